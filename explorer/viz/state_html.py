"""HTML of the state after a step: the pool grid and summary, the free queue, the hash map, the
requests' block tables, the KV event log, a block's history and the hit-rate chart.

Every function returns an HTML string built from a trace step (styled by assets/explorer.css).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from explorer.core.events import BlockRemoved, BlockStored, KVCacheEvent
from explorer.core.hashing import external_block_hash
from explorer.scenario.records import CachedBlock
from explorer.scenario.trace import Snapshot, Step, Trace
from explorer.viz.chips import FULL_GRID_MAX, elide, hash_text, snap_chip
from explorer.viz.palette import STATE_ORDER, block_state
from explorer.viz.svg_charts import Series, line_chart_svg
from explorer.viz.text import esc


def pool_summary(snap: Snapshot) -> dict[str, int]:
    out = {s: 0 for s in STATE_ORDER}
    for i, (rc, h) in enumerate(snap.blocks):
        out[block_state(i, rc, h)] += 1
    return out


def pool_summary_html(snap: Snapshot) -> str:
    c = pool_summary(snap)
    parts = [
        f"<b>{c['null']}</b> null (N)",
        f"<b>{c['free']:,}</b> free without a hash (F)",
        f"<b>{c['cached']:,}</b> free and cached (F + hash)",
        f"<b>{c['used']:,}</b> in use by one request (U1)",
        f"<b>{c['shared']:,}</b> shared (U2+)",
    ]
    return '<div class="px-summary">' + " &middot; ".join(parts) + "</div>"


def pool_grid_html(snap: Snapshot, changed: set[int], selected: int | None = None) -> str:
    """The pool as wrapping chips; compact chips (id + letter) past FULL_GRID_MAX blocks."""
    mode = "full" if len(snap.blocks) <= FULL_GRID_MAX else "compact"
    chips = [snap_chip(snap, i, changed, selected, mode) for i in range(len(snap.blocks))]
    return f'<div class="px-grid px-grid-{mode}" data-px-pool="{len(snap.blocks)}">' + "".join(chips) + "</div>"


def free_queue_html(snap: Snapshot, changed: set[int], selected: int | None = None, show: int = 48) -> str:
    """The free queue as an ordered lane: head (popped and evicted first) to tail."""
    q = snap.free_queue
    chips = [snap_chip(snap, b, changed, selected, "full") for b in q]
    half = show // 2
    body = "".join(elide(chips, half, half, "blocks"))
    if not q:
        body = '<span class="px-more">empty: every block is in use</span>'
    return (
        f'<div class="px-lane" data-px-free="{len(q)}"><span class="px-end">head &rarr;<br><small>popped first</small></span>'
        f'<div class="px-lane-body">{body}</div><span class="px-end">&larr; tail<br><small>freed last</small></span></div>'
    )


def hash_map_html(
    snap: Snapshot,
    step: Step | None,
    prev: Snapshot | None,
    selected: int | None = None,
    cap: int = 300,
    int_hashes: bool = True,
) -> str:
    """hash -> block ids (insertion order), duplicates marked, this step's additions and removals shown."""
    new_hashes = {c.hash for c in step.of(CachedBlock)} if step else set()
    now = {h for h, _ in snap.cached}
    removed = []
    if prev is not None and step is not None:
        removed = [(h, ids) for h, ids in prev.cached if h not in now]
    rows = []
    for h, ids in removed[:cap]:
        rows.append(
            f'<tr class="px-removed"><td><code>{h.hex()[:12]}</code></td><td>{_event_hash(h, int_hashes)}</td>'
            f"<td>{' '.join(f'#{i}' for i in ids)}</td><td>entry removed this step</td></tr>"
        )
    changed_ids: set[int] = set()
    for h, ids in snap.cached[:cap]:
        cls = []
        note = []
        if len(ids) > 1:
            cls.append("px-dup")
            note.append(f"duplicate: {len(ids)} blocks")
        if h in new_hashes:
            cls.append("px-new")
            note.append("added this step")
        chips = " ".join(snap_chip(snap, i, changed_ids, selected, "id") for i in ids)
        rows.append(
            f'<tr class="{" ".join(cls)}"><td><code>{h.hex()[:12]}</code></td><td>{_event_hash(h, int_hashes)}</td>'
            f"<td>{chips}</td><td>{', '.join(note)}</td></tr>"
        )
    more = len(snap.cached) - cap
    foot = (
        f'<tr><td colspan="4" class="px-more">&hellip; {more:,} more entries (download the replay JSON for all)</td></tr>'
        if more > 0
        else ""
    )
    if not snap.cached and not removed:
        return '<div class="px-empty">The hash map is empty: no block is cached.</div>'
    head = "<tr><th>hash</th><th>event hash</th><th>blocks (insertion order)</th><th></th></tr>"
    return f'<div class="px-scroll"><table class="px-table" data-px-map="{len(snap.cached)}">{head}{"".join(rows)}{foot}</table></div>'


def _event_hash(h: bytes, int_hashes: bool) -> str:
    return f"<code>{external_block_hash(h)}</code>" if int_hashes else "<code>raw digest</code>"


def requests_html(snap: Snapshot, changed: set[int], selected: int | None = None, show: int = 64) -> str:
    if not snap.requests:
        return '<div class="px-empty">No live request.</div>'
    rows = []
    for r in snap.requests:
        tags = []
        if r.lora:
            tags.append(f"LoRA {esc(r.lora)}")
        if r.cache_salt:
            tags.append(f"salt {esc(r.cache_salt)}")
        if r.prompt_logprobs:
            tags.append("prompt_logprobs")
        if r.num_preemptions:
            tags.append(f"preempted {r.num_preemptions}x")
        chips = [snap_chip(snap, b, changed, selected, "id") for b in r.block_ids]
        table = "".join(elide(chips, show // 2, show // 2, "blocks")) or '<span class="px-more">no blocks</span>'
        rows.append(
            f'<tr data-px-request="{esc(r.request_id)}"><td><b>{esc(r.request_id)}</b></td><td class="px-nw">{esc(r.status)}</td>'
            f"<td>{r.num_computed_tokens:,} / {r.num_tokens:,}<br><small>prompt {r.num_prompt_tokens:,}, {len(r.block_hashes)} hashes</small></td>"
            f'<td>{"<br>".join(tags)}</td><td><div class="px-chips">{table}</div></td></tr>'
        )
    head = "<tr><th>request</th><th>status</th><th>computed / tokens</th><th></th><th>block table (block ids in order)</th></tr>"
    return f'<table class="px-table">{head}{"".join(rows)}</table>'


def _hashes_short(hs: Sequence[object], n: int = 3) -> str:
    parts = [hash_text(h) for h in hs[:n]]
    return ", ".join(parts) + (f", &hellip; ({len(hs)} in all)" if len(hs) > n else "")


def _event_hashes(hs: Iterable[int | bytes] | None) -> str:
    return _hashes_short(list(hs) if hs is not None else [])


def event_row(step_no: int, ev_no: int, event: KVCacheEvent, current: bool) -> str:
    kind = type(event).__name__
    if isinstance(event, BlockStored):
        toks = event.token_ids or ()
        parent = event.parent_block_hash
        detail = (
            f"hashes {_event_hashes(event.block_hashes)}; parent {hash_text(parent) if parent is not None else 'None'}; "
            f"{len(toks):,} token ids; block_size {event.block_size}"
            + (f"; lora {esc(event.lora_name)} (id {event.lora_id})" if event.lora_name else "")
            + (
                f"; extra_keys {esc(_short_json(event.extra_keys))}"
                if event.extra_keys and any(x is not None for x in event.extra_keys)
                else ""
            )
        )
    elif isinstance(event, BlockRemoved):
        detail = f"hashes {_event_hashes(event.block_hashes)}; medium {event.medium}"
    else:
        detail = "every cached block dropped"
    cls = ' class="px-cur"' if current else ""
    return f"<tr{cls}><td>{step_no}</td><td>{ev_no}</td><td><b>{kind}</b></td><td>{detail}</td></tr>"


def _short_json(v: object, n: int = 80) -> str:
    import json

    s = json.dumps(v, default=lambda o: o.hex() if isinstance(o, bytes) else str(o))
    return s if len(s) <= n else s[: n - 3] + "..."


def event_log_html(trace: Trace, k: int, cap: int = 80) -> str:
    """Events of steps 1..k, newest first; this step's rows highlighted."""
    rows: list[str] = []
    total = sum(len(s.events) for s in trace.steps[:k])
    n = total
    for i in range(k, 0, -1):
        evs = trace.steps[i - 1].events
        for j in range(len(evs) - 1, -1, -1):
            if len(rows) < cap:
                rows.append(event_row(i, n, evs[j], i == k))
            n -= 1
        if len(rows) >= cap:
            break
    if not rows:
        return (
            '<div class="px-empty">No KV event yet.</div>'
            if trace.scenario.engine.events
            else '<div class="px-empty">KV events are off in this scenario.</div>'
        )
    more = f'<tr><td colspan="4" class="px-more">&hellip; {total - cap:,} older events</td></tr>' if total > cap else ""
    head = "<tr><th>step</th><th>#</th><th>type</th><th>fields</th></tr>"
    return f'<div class="px-scroll"><table class="px-table" data-px-events="{total}">{head}{"".join(rows)}{more}</table></div>'


def history_html(entries: Iterable, k: int) -> str:
    rows = []
    for e in entries:
        cls = ' class="px-cur"' if e.step == k else (' class="px-future"' if e.step > k else "")
        rows.append(f"<tr{cls}><td>{e.step}</td><td>{esc(e.label)}</td><td>{esc(e.text)}</td></tr>")
    if not rows:
        return '<div class="px-empty">Nothing has happened to this block in this scenario.</div>'
    return (
        '<table class="px-table" data-px-history="1"><tr><th>step</th><th>op</th><th>what happened</th></tr>'
        + "".join(rows)
        + "</table>"
    )


def stat_cells(snap: Snapshot, prev: Snapshot) -> list[tuple[str, str, str, int]]:
    """(key, label, value, what this step added) of the four prefix-cache numbers after a step:
    the explorer's metrics and presenter mode's metrics box draw these."""
    s, p = snap.stats, prev.stats
    rate = s["hits"] / s["queries"] if s["queries"] else 0.0
    window = f"{snap.window_requests:,} {'request' if snap.window_requests == 1 else 'requests'}"
    return [
        ("queries", "Queries (tokens)", f"{s['queries']:,}", s["queries"] - p["queries"]),
        ("hits", "Hits (tokens)", f"{s['hits']:,}", s["hits"] - p["hits"]),
        ("rate", "Hit rate (total)", f"{rate:.1%}", 0),
        # An empty window has no rate (the log line shows none), not 0%.
        ("window", f"Window ({window})", f"{snap.window_hit_rate:.1%}" if snap.window_requests else "none", 0),
    ]


WINDOW_HELP = "vLLM's logged rate: the last ~1000 requests (CachingMetrics), preempted ones excluded."


def stats_html(snap: Snapshot, prev: Snapshot) -> str:
    """The four numbers as the page's metrics (a label, the value, what the step added)."""
    cells = []
    for key, label, value, delta in stat_cells(snap, prev):
        title = f' title="{esc(WINDOW_HELP)}"' if key == "window" else ""
        d = f'<div class="px-metric-delta">&uarr; {delta:,}</div>' if delta > 0 else ""
        cells.append(
            f'<div class="px-metric" data-px-stat="{key}"><div class="px-metric-label"{title}>{esc(label)}</div>'
            f'<div class="px-metric-value">{esc(value)}</div>{d}</div>'
        )
    return '<div class="px-metrics">' + "".join(cells) + "</div>"


def hit_rate_svg(trace: Trace, k: int, width: int = 560, height: int = 170) -> str:
    """Total hit rate and vLLM's windowed rate after each step up to k (no spoilers: later steps
    are not drawn, though the step axis spans the whole scenario), step k marked."""
    n = len(trace.steps)
    total: list[float | None] = []
    window: list[float | None] = []
    for i in range(min(max(k, 0), n) + 1):
        s = trace.stats_at(i)  # every step's, not its state: this reads all steps up to k
        q = s.stats["queries"]
        total.append(s.stats["hits"] / q if q else None)
        window.append(s.window_hit_rate if s.window_requests else None)
    series = (Series("total", total, "#0072B2"), Series("window (~1000 requests)", window, "#E69F00", "6 4"))
    return line_chart_svg(series, n, k, width=width, height=height, legend=True)


def svg_img(svg: str, alt: str) -> str:
    """An SVG as an <img> (st.html sanitizes inline SVG away; a data URI survives)."""
    import base64

    data = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    return f'<img class="px-rate" src="data:image/svg+xml;base64,{data}" alt="{esc(alt)}" style="width:100%;max-width:720px">'
