"""HTML of the External tier panel (design section 10): what the KV connector did in a step.

Pure functions of a step's records (`ConnectorReport`, `EngineStepRecord.external`) and the
snapshots around it; nothing here works out what the scheduler or the connector would do:
- the lookup: per admitted (or skipped) request, the local hit, then the tokens the connector
  offered after it, sync or async, as one ruler over the request's tokens;
- the requests waiting for remote KV after the step, with the blocks they hold meanwhile (no
  hash yet: ``delay_cache_blocks``);
- loads that finished: their blocks were cached in this step's ``schedule()`` (the
  ``BlockStored`` of this batch), a full hit leaving its last token to compute;
- failed loads: the valid tokens left and the blocks whose hashes were evicted;
- the external stats so far. Every request id goes through `esc`.
"""

from __future__ import annotations

from collections.abc import Mapping

from explorer.numbers import counted
from explorer.scenario.connector_reports import ConnectorLoaded, ConnectorLoadFailed, ConnectorLookup, ConnectorReport
from explorer.scenario.trace import Snapshot
from explorer.viz.chips import chip
from explorer.viz.text import esc

MAX_ROWS = 32  # requests drawn per list; the rest are counted
MAX_CHIPS = 24  # blocks drawn per waiting request


def _ruler(num_tokens: int, local: int, external: int) -> str:
    """The request's tokens: the local hit, the connector's tokens, the rest to compute."""
    if num_tokens <= 0:
        return ""
    rest = max(num_tokens - local - external, 0)
    segs = []
    for n, cls, label in (
        (local, "px-xt-local", "local hit"),
        (external, "px-xt-ext", "external"),
        (rest, "px-xt-rest", "to compute"),
    ):
        if n:
            segs.append(
                f'<span class="px-es-seg {cls}" style="width:{100.0 * n / num_tokens:.3f}%" '
                f'title="{label}: {n:,} tokens">{n:,}</span>'
            )
    return f'<div class="px-es-bar px-xt-ruler">{"".join(segs)}</div>'


def lookup_rows_html(
    reports: tuple[ConnectorReport, ...], after: Snapshot, before: Snapshot, allocated: Mapping[str, int] | None = None
) -> str:
    """One row per lookup. The request's tokens are those it had when schedule() looked it up,
    before this step's update appended any; the stats count a lookup only once its allocation
    succeeds (``allocated``: update_state_after_alloc's requests)."""
    rows = []
    lookups = [r for r in reports if isinstance(r, ConnectorLookup)]
    for r in lookups[:MAX_ROWS]:
        req = before.request(r.request_id) or after.request(r.request_id)
        n = req.num_tokens if req is not None else 0
        in_stats = allocated is None or r.request_id in allocated
        apart = req is not None and req.num_preemptions > 0  # a resumed request's stats count apart
        if r.num_external_tokens is None:
            offer, ext = "cannot tell yet: the request is skipped this step, nothing recorded", 0
        else:
            ext = r.num_external_tokens
            how = "async: the request waits for remote KV" if r.load_async else "sync: counted as computed now"
            offer = f"offers <b>{counted(ext, 'token')}</b> after it ({how})" if ext else "offers nothing after it"
        rows.append(
            f'<div class="px-xt-row" data-px-xt-lookup="{esc(r.request_id)}"><b>{esc(r.request_id, 24)}</b>: '
            f"local hit <b>{r.num_local_tokens:,}</b> of {counted(n, 'token')}, then the connector {offer}"
            + (
                f"; resumed after a preemption, so its {max(n - r.num_local_tokens, 0):,} queried and {ext:,} hit "
                "tokens count as preempted, not in the external stats"
                if in_stats and apart
                else f"; external queries {max(n - r.num_local_tokens, 0):,}, hits {ext:,}"
                if in_stats
                else "; no blocks this step, so the external stats do not count it yet"
                if r.num_external_tokens is not None
                else ""
            )
            + f"{_ruler(n, r.num_local_tokens, ext)}</div>"
        )
    if len(lookups) > MAX_ROWS:
        rows.append(f'<div class="px-xt-row">... and {counted(len(lookups) - MAX_ROWS, "more lookup")}</div>')
    return "".join(rows)


def waiting_html(after: Snapshot) -> str:
    """Requests waiting for remote KV after the step, and the blocks they hold (unhashed)."""
    rows = []
    waiting = [r for r in after.requests if r.status == "waiting_for_remote_kvs"]
    for r in waiting[:MAX_ROWS]:
        chips = "".join(
            chip(bid, after.blocks[bid][0], after.blocks[bid][1], mode="id") for bid in r.block_ids[:MAX_CHIPS]
        )
        more = f" +{len(r.block_ids) - MAX_CHIPS:,}" if len(r.block_ids) > MAX_CHIPS else ""
        rows.append(
            f'<div class="px-xt-row" data-px-xt-waiting="{esc(r.request_id)}"><b>{esc(r.request_id, 24)}</b> '
            f"waits for remote KV with {counted(r.num_computed_tokens, 'token')} counted as computed, holding "
            f"{counted(len(r.block_ids), 'block')} (hashed only when the load is done): {chips}{more}</div>"
        )
    return "".join(rows)


def loads_html(reports: tuple[ConnectorReport, ...], num_block_stored: int) -> str:
    rows = []
    for r in reports:
        if isinstance(r, ConnectorLoaded):
            what = (
                f"after a failed load only the valid prefix, {counted(r.num_tokens, 'token')}, is kept"
                if r.failed
                else f"its blocks are cached now, up to {counted(r.num_tokens, 'computed token')}"
            )
            rows.append(
                f'<div class="px-xt-row" data-px-xt-loaded="{esc(r.request_id)}"><b>{esc(r.request_id, 24)}</b>: '
                f"the load finished; {what} (BlockStored in this batch: {num_block_stored})</div>"
            )
        elif isinstance(r, ConnectorLoadFailed):
            ev = ", ".join(f"#{b}" for b in r.evicted[:MAX_CHIPS])
            evicted = f"; blocks {ev} lost their hashes (one BlockRemoved each)" if r.evicted else "; no hash evicted"
            rows.append(
                f'<div class="px-xt-row px-xt-failed" data-px-xt-failed="{esc(r.request_id)}">'
                f"<b>{esc(r.request_id, 24)}</b>: the load reported invalid blocks; "
                f"{counted(r.num_tokens, 'token')} {'stays' if r.num_tokens == 1 else 'stay'} valid{evicted}</div>"
            )
    return "".join(rows)


def external_tier_html(
    reports: tuple[ConnectorReport, ...],
    allocations: Mapping[str, int] | None,
    before: Snapshot,
    after: Snapshot,
    num_block_stored: int,
) -> str:
    """The panel body; empty when the connector did nothing visible in the step."""
    body = lookup_rows_html(reports, after, before, allocations or {})
    allocs = {rid: n for rid, n in (allocations or {}).items()}
    if allocs:
        parts = ", ".join(f"{esc(rid, 24)} {n:,}" for rid, n in list(allocs.items())[:MAX_ROWS])
        body += f'<div class="px-xt-row">update_state_after_alloc (num_external_tokens): {parts}</div>'
    body += loads_html(reports, num_block_stored)
    body += waiting_html(after)
    if not body:
        return ""
    s = after.stats
    if "external_queries" in s:
        body += (
            f'<div class="px-xt-row px-xt-stats">External stats so far: {counted(s["external_requests"], "request")}, '
            f"{counted(s['external_queries'], 'query', 'queries')} (tokens after the local hit), "
            f"{counted(s['external_hits'], 'hit')}</div>"
        )
    return f'<div class="px-xt">{body}</div>'
