"""HTML of one engine step (design section 7): the batch against the token budget, the tokens in
flight under async scheduling, preemptions with their reasons, finished requests and the KV
event batch.

Pure functions of a step's records (`EngineStepRecord`, `Scheduled`, the admission checks and
the snapshots around it); nothing here works out what the scheduler would do. Every request id
and reason goes through `esc`.
"""

from __future__ import annotations

from explorer.core.kv_cache_observer import AdmissionCheck
from explorer.numbers import counted
from explorer.scenario.trace import EngineStepRecord, RequestView, Scheduled, Snapshot
from explorer.viz.chips import hash_text
from explorer.viz.text import esc

PREFILL_CHUNK = "prefill chunk"
PREFILL_LAST = "prefill (last chunk)"
DECODE = "decode"
MAX_ROWS = 64  # batch rows drawn; the rest are counted
MAX_CELLS = 4  # blocks drawn per request in flight


def request_in(before: Snapshot, after: Snapshot, request_id: str) -> RequestView | None:
    """The request's view after the step, or before it (it finished in this step)."""
    return after.request(request_id) or before.request(request_id)


def work_kind(s: Scheduled, req: RequestView | None) -> str:
    """What the scheduled tokens are, as the record says: a prefill chunk (prompt tokens left
    after it), the rest of a prefill, or one decode token."""
    if s.is_prefill_chunk:
        return PREFILL_CHUNK
    start = s.num_computed_tokens - s.num_tokens
    if s.num_tokens == 1 and (req is None or start >= req.num_prompt_tokens):
        return DECODE
    return PREFILL_LAST


def budget_bar_html(batch: tuple[Scheduled, ...], kinds: dict[str, str], budget: int) -> str:
    """The token budget as a bar: one segment per scheduled request, the unused rest blank."""
    used = sum(s.num_tokens for s in batch)
    segs = []
    for s in batch[:MAX_ROWS]:
        width = 100.0 * s.num_tokens / budget if budget else 0.0
        kind = kinds.get(s.request_id, DECODE)
        cls = "px-es-decode" if kind == DECODE else "px-es-prefill"
        label = f"{esc(s.request_id, 24)} {s.num_tokens:,}" if width >= 6 else ""
        segs.append(
            f'<span class="px-es-seg {cls}" style="width:{width:.3f}%" title="{esc(s.request_id)}: {s.num_tokens:,} tokens, {kind}">{label}</span>'
        )
    free = max(budget - used, 0)
    if free:
        segs.append(
            f'<span class="px-es-seg px-es-free" style="width:{100.0 * free / budget:.3f}%" title="unused budget">{free:,} left</span>'
        )
    return (
        f'<div class="px-es-budget" data-px-budget="{used}/{budget}">'
        f'<div class="px-es-bar">{"".join(segs)}</div>'
        f'<div class="px-es-caption">{used:,} of max_num_batched_tokens = {budget:,} tokens scheduled '
        f"({counted(len(batch), 'request')})</div></div>"
    )


def batch_table_html(
    batch: tuple[Scheduled, ...], kinds: dict[str, str], record: EngineStepRecord, async_sched: bool
) -> str:
    """One row per scheduled request: tokens, kind, computed after scheduling, tokens in flight,
    and what this step's update delivered to it."""
    rows = []
    for s in batch[:MAX_ROWS]:
        out = record.outputs.get(s.request_id, ())
        got = ", ".join(str(t) for t in out[:8]) + (" ..." if len(out) > 8 else "")
        rows.append(
            f'<tr data-px-sched="{esc(s.request_id)}:{s.num_tokens}"><td><b>{esc(s.request_id)}</b></td>'
            f"<td>{s.num_tokens:,}</td><td>{kinds.get(s.request_id, '')}</td><td>{s.num_computed_tokens:,}</td>"
            + (f"<td>{s.num_placeholders}</td>" if async_sched else "")
            + f"<td>{got or '-'}</td></tr>"
        )
    more = f'<div class="px-es-caption">... and {len(batch) - MAX_ROWS:,} more</div>' if len(batch) > MAX_ROWS else ""
    head = (
        "<tr><th>request</th><th>tokens</th><th>kind</th><th>num_computed_tokens after</th>"
        + ("<th>placeholders</th>" if async_sched else "")
        + "<th>sampled tokens delivered</th></tr>"
    )
    return f'<table class="px-es-table">{head}{"".join(rows)}</table>{more}' if rows else ""


def in_flight_html(batch: tuple[Scheduled, ...], before: Snapshot, after: Snapshot, block_size: int) -> str:
    """Under async scheduling: each request's last blocks when this batch was planned, its known
    tokens filled and the tokens in flight (placeholders) marked "?"; whether the block is
    cached after the step."""
    parts = []
    for s in batch[:MAX_ROWS]:
        if s.num_placeholders <= 0:
            continue
        was = before.request(s.request_id)
        req = request_in(before, after, s.request_id)
        if req is None:
            continue
        known = (was or req).num_tokens  # the schedule runs before this step's update
        end = known + s.num_placeholders
        first_block = known // block_size
        last_block = (end - 1) // block_size
        cells = []
        for b in range(max(first_block, last_block - MAX_CELLS + 1), last_block + 1):
            lo = b * block_size
            slots = "".join(
                '<span class="px-es-tok px-es-known"></span>'
                if p < known
                else '<span class="px-es-tok px-es-ph" title="placeholder: a token in flight">?</span>'
                if p < end
                else '<span class="px-es-tok"></span>'
                for p in range(lo, lo + block_size)
            )
            block_id = req.block_ids[b] if b < len(req.block_ids) else None
            cached = (
                block_id is not None and 0 <= block_id < len(after.blocks) and after.blocks[block_id][1] is not None
            )
            where = f"block {b}" + (f" (id {block_id})" if block_id is not None else "")
            state = "cached after this step" if cached else "not cached yet"
            cells.append(
                f'<div class="px-es-block" data-px-inflight="{esc(s.request_id)}:{b}:{int(cached)}">'
                f'<span class="px-rowlabel">{where}, tokens {lo}..{lo + block_size - 1}: {state}</span>'
                f'<span class="px-es-slots">{slots}</span></div>'
            )
        parts.append(
            f'<div class="px-row"><span class="px-rowlabel"><b>{esc(s.request_id)}</b>: {known:,} tokens known when '
            f"this batch was planned, {s.num_placeholders} in flight</span>{''.join(cells)}</div>"
        )
    return "".join(parts)


def preempted_html(
    reasons: tuple[tuple[str, str], ...], failed: list[AdmissionCheck], preempted: tuple[str, ...]
) -> str:
    """Who was preempted and why: the scheduler's reason and the allocation that failed."""
    if not preempted and not reasons:
        return ""
    why = dict(reasons)
    items = []
    for rid in preempted or tuple(r for r, _ in reasons):
        items.append(
            f'<li data-px-preempted="{esc(rid)}"><b>{esc(rid)}</b> preempted: {esc(why.get(rid, "no reason reported"))}</li>'
        )
    for a in failed[:8]:
        items.append(
            f'<li class="px-bad" data-px-failed="{esc(a.request_id)}">allocate_slots({esc(a.request_id)}, {a.num_new_tokens:,} tokens): '
            f"{a.num_new_blocks} new + {a.num_evictable_hit_blocks} free hit blocks = {a.num_required_blocks} &gt; "
            f"{a.num_free_blocks} free &rarr; None</li>"
        )
    return f'<ul class="px-list px-es-preempted">{"".join(items)}</ul>'


def finished_html(finished: tuple[str, ...]) -> str:
    if not finished:
        return ""
    names = ", ".join(f'<b data-px-finished="{esc(r)}">{esc(r)}</b>' for r in finished[:MAX_ROWS])
    return f'<div class="px-row"><span class="px-rowlabel">finished in this step\'s update:</span> {names}</div>'


def event_batch_html(events: tuple[object, ...]) -> str:
    """The one KV event batch this step's update published, event by event."""
    if not events:
        return '<div class="px-es-caption" data-px-events="0">No KV event batch: this step published nothing.</div>'
    items = []
    for e in events[:40]:
        name = type(e).__name__
        hashes = getattr(e, "block_hashes", None)
        detail = ""
        if isinstance(hashes, list):
            shown = ", ".join(hash_text(h) for h in hashes[:3]) + (" ..." if len(hashes) > 3 else "")
            detail = f": {counted(len(hashes), 'block hash', 'block hashes')} ({esc(shown)})"
        items.append(f"<li><code>{name}</code>{detail}</li>")
    more = f"<li>... {len(events) - 40:,} more</li>" if len(events) > 40 else ""
    return f'<ul class="px-list" data-px-events="{len(events)}">{"".join(items)}{more}</ul>'
