"""HTML builders for the explorer's panels and state views (styled by assets/explorer.css).

Every function returns an HTML string built from a trace step; every string that came from a
user (request ids, LoRA names, salts, image ids, token text) is escaped. A block chip carries
``data-px-block="<id>"`` so a click anywhere on the page can open that block's history.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from html import escape

from explorer.core.hashing import external_block_hash
from explorer.trace import Snapshot, Step, Trace
from explorer.viz.palette import STATE_ORDER, STATES, block_letter, block_state, short_hash

FULL_GRID_MAX = 400  # blocks drawn as full chips (id, letter, short hash)
COMPACT_GRID_MAX = 1200  # beyond this the pool becomes a heat strip (explorer.viz.figures)


def _e(s: object) -> str:
    return escape(str(s), quote=True)


def _attrs(**kw: object) -> str:
    return "".join(f' {k.replace("_", "-")}="{_e(v)}"' for k, v in kw.items() if v is not None)


def chip(
    block_id: int,
    ref_cnt: int,
    block_hash: bytes | None,
    *,
    changed: bool = False,
    selected: bool = False,
    mode: str = "full",
    extra: str = "",
    title_extra: str = "",
) -> str:
    """One block: colour by state AND a letter (N, F, U<n>), with id and short hash."""
    state = block_state(block_id, ref_cnt, block_hash)
    letter = block_letter(block_id, ref_cnt)
    cls = (
        f"px-blk px-s-{state}"
        + (" px-chg" if changed else "")
        + (" px-sel" if selected else "")
        + (f" px-{mode}" if mode != "full" else "")
    )
    label = STATES[state][2].split("  ", 1)[1]
    title = f"block {block_id}: {letter} ({label}), ref_cnt {ref_cnt}" + (
        f", hash {block_hash.hex()[:16]}..." if block_hash else ", no hash"
    )
    if changed:
        title += ", changed by this step"
    if title_extra:
        title += ", " + _e(title_extra)
    if mode == "compact":
        body = f"<b>{block_id}</b>{letter}"
    elif mode == "id":
        body = f"<b>{block_id}</b> {letter}"
    else:
        h = short_hash(block_hash)
        body = f'<b>{block_id}</b> <span class="px-l">{letter}</span>' + (
            f' <span class="px-h">{h}</span>' if h else ""
        )
    return f'<span class="{cls}" data-px-block="{block_id}" title="{title}">{body}{extra}</span>'


def snap_chip(
    snap: Snapshot,
    block_id: int,
    changed: set[int] | frozenset[int] = frozenset(),
    selected: int | None = None,
    mode: str = "full",
    extra: str = "",
    title_extra: str = "",
) -> str:
    rc, h = snap.blocks[block_id]
    return chip(
        block_id,
        rc,
        h,
        changed=block_id in changed,
        selected=block_id == selected,
        mode=mode,
        extra=extra,
        title_extra=title_extra,
    )


def legend_html() -> str:
    items = []
    for s in STATE_ORDER:
        letter, text = STATES[s][2].split("  ", 1)
        items.append(
            f'<span class="px-blk px-s-{s} px-legend-chip"><span class="px-l">{_e(letter)}</span></span> {_e(text)}'
        )
    items.append(
        '<span class="px-blk px-s-free px-chg px-legend-chip"><span class="px-l">&nbsp;</span></span> changed by this step'
    )
    return '<div class="px-legend">' + "".join(f"<span>{i}</span>" for i in items) + "</div>"


def grid_mode(num_blocks: int) -> str:
    if num_blocks <= FULL_GRID_MAX:
        return "full"
    if num_blocks <= COMPACT_GRID_MAX:
        return "compact"
    return "strip"


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


def _elide(items: Sequence[str], keep_head: int, keep_tail: int, what: str = "more") -> list[str]:
    if len(items) <= keep_head + keep_tail + 1:
        return list(items)
    hidden = len(items) - keep_head - keep_tail
    return [
        *items[:keep_head],
        f'<span class="px-more">&hellip; {hidden:,} {what} &hellip;</span>',
        *items[-keep_tail:],
    ]


def free_queue_html(snap: Snapshot, changed: set[int], selected: int | None = None, show: int = 48) -> str:
    """The free queue as an ordered lane: head (popped and evicted first) to tail."""
    q = snap.free_queue
    chips = [snap_chip(snap, b, changed, selected, "full") for b in q]
    half = show // 2
    body = "".join(_elide(chips, half, half, "blocks"))
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
    new_hashes = {c.hash for c in step.cached} if step else set()
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
    changed_ids = set()
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
            tags.append(f"LoRA {_e(r.lora)}")
        if r.cache_salt:
            tags.append(f"salt {_e(r.cache_salt)}")
        if r.prompt_logprobs:
            tags.append("prompt_logprobs")
        if r.num_preemptions:
            tags.append(f"preempted {r.num_preemptions}x")
        chips = [snap_chip(snap, b, changed, selected, "id") for b in r.block_ids]
        table = "".join(_elide(chips, show // 2, show // 2, "blocks")) or '<span class="px-more">no blocks</span>'
        rows.append(
            f'<tr data-px-request="{_e(r.request_id)}"><td><b>{_e(r.request_id)}</b></td><td>{_e(r.status)}</td>'
            f"<td>{r.num_computed_tokens:,} / {r.num_tokens:,}<br><small>prompt {r.num_prompt_tokens:,}, {len(r.block_hashes)} hashes</small></td>"
            f'<td>{"<br>".join(tags)}</td><td><div class="px-chips">{table}</div></td></tr>'
        )
    head = "<tr><th>request</th><th>status</th><th>computed / tokens</th><th></th><th>block table (block ids in order)</th></tr>"
    return f'<table class="px-table">{head}{"".join(rows)}</table>'


def _hashes_short(hs: Sequence[object], n: int = 3) -> str:
    parts = [_hash_text(h) for h in hs[:n]]
    return ", ".join(parts) + (f", &hellip; ({len(hs)} in all)" if len(hs) > n else "")


def _event_hashes(hs) -> str:
    return _hashes_short(list(hs) if hs is not None else [])


def event_row(step_no: int, ev_no: int, event, current: bool) -> str:
    kind = type(event).__name__
    if kind == "BlockStored":
        toks = event.token_ids or ()
        parent = event.parent_block_hash
        detail = (
            f"hashes {_event_hashes(event.block_hashes)}; parent {_hash_text(parent) if parent is not None else 'None'}; "
            f"{len(toks):,} token ids; block_size {event.block_size}"
            + (f"; lora {_e(event.lora_name)} (id {event.lora_id})" if event.lora_name else "")
            + (
                f"; extra_keys {_e(_short_json(event.extra_keys))}"
                if event.extra_keys and any(x is not None for x in event.extra_keys)
                else ""
            )
        )
    elif kind == "BlockRemoved":
        detail = f"hashes {_event_hashes(event.block_hashes)}; medium {event.medium}"
    else:
        detail = "every cached block dropped"
    cls = ' class="px-cur"' if current else ""
    return f"<tr{cls}><td>{step_no}</td><td>{ev_no}</td><td><b>{kind}</b></td><td>{detail}</td></tr>"


def _hash_text(h: object) -> str:
    return str(h) if isinstance(h, int) else (h.hex()[:12] if isinstance(h, bytes) else str(h)[:12])


def _short_json(v: object, n: int = 80) -> str:
    import json

    s = json.dumps(v, default=lambda o: o.hex() if isinstance(o, bytes) else str(o))
    return s if len(s) <= n else s[: n - 3] + "..."


def event_log_html(trace: Trace, k: int, cap: int = 80) -> str:
    """Events of steps 1..k, newest first; this step's rows highlighted."""
    rows = []
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


def phase_strip_html(active: Mapping[str, str], titles: Mapping[str, str]) -> str:
    """The six phases; those that happened this step are lit, with a few words each."""
    cells = []
    for i, (key, title) in enumerate(titles.items(), start=1):
        on = key in active
        cls = "px-phase px-on" if on else "px-phase"
        cells.append(
            f'<div class="{cls}" data-px-phase="{key}"><b>{i}</b> {_e(title)}<br><small>{_e(active.get(key, "-"))}</small></div>'
        )
    return '<div class="px-phases">' + "".join(cells) + "</div>"


# ---- the six panels' pictures -----------------------------------------------------------------


def _extra_label(keys: tuple | None) -> str:
    if not keys:
        return ""
    out = []
    for k in keys:
        if k[0] == "lora":
            out.append(f"LoRA {_e(k[1])}")
        elif k[0] == "mm":
            out.append(f"image {_e(k[1])} @{k[2]:+d}")
        elif k[0] == "cache_salt":
            out.append(f"salt {_e(k[1])}")
        else:
            out.append(_e(k[0]))
    return '<span class="px-extra">' + ", ".join(out) + "</span>"


def hashing_html(
    step: Step,
    none_hash: bytes | None,
    parent: bytes | None,
    num_tokens: int,
    block_size: int,
    int_hashes: bool = True,
    snippets: Mapping[int, str] | None = None,
    show: int = 24,
) -> str:
    """The prompt cut into blocks: the chain from NONE_HASH (or the previous block), each
    digest and its 64-bit event form, extra keys on the blocks they touch, the partial tail."""
    hashed = step.hashed
    cards = []
    for hb in hashed:
        snip = (snippets or {}).get(hb.index)
        ev = f"event {hb.external}" if int_hashes else "event: raw digest"
        cards.append(
            f'<div class="px-card" data-px-hash-index="{hb.index}"><div><b>block {hb.index}</b> <small>tokens {hb.start:,}-{hb.end - 1:,}</small></div>'
            f'<code class="px-digest">{hb.hash.hex()[:16]}&hellip;</code><div><small>{ev}</small></div>'
            + (f'<div class="px-snip">{_e(snip)}</div>' if snip else "")
            + _extra_label(hb.extra_keys)
            + "</div>"
        )
    cards = _elide(cards, show - 4, 4, "blocks")
    first = hashed[0].index if hashed else 0
    if first == 0:
        start = f'<div class="px-card px-root"><b>NONE_HASH</b><code class="px-digest">{none_hash.hex()[:16] if none_hash else "-"}&hellip;</code><small>parent of block 0</small></div>'
    else:
        start = f'<div class="px-card px-root"><b>block {first - 1}</b><code class="px-digest">{parent.hex()[:16] if parent else "-"}&hellip;</code><small>hashed earlier</small></div>'
    tail_n = num_tokens % block_size
    full = num_tokens // block_size
    tail = ""
    if tail_n:
        tail = (
            f'<div class="px-card px-tail" data-px-tail="{tail_n}"><b>partial tail</b> <small>tokens {full * block_size:,}-{num_tokens - 1:,}</small>'
            f"<div>{tail_n} of {block_size} tokens</div><small>no hash until it is full</small></div>"
        )
    arrow = '<span class="px-arrow">&rarr;</span>'
    return '<div class="px-chain">' + arrow.join([start, *cards]) + (arrow + tail if tail else "") + "</div>"


def digest_table_html(hashed, int_hashes: bool = True, cap: int = 256) -> str:
    """Every block hash of the step in full, with its event form and tagged extra keys."""
    rows = []
    for hb in hashed[:cap]:
        ev = str(hb.external) if int_hashes else "raw digest"
        rows.append(
            f"<tr><td>{hb.index}</td><td>{hb.start:,}-{hb.end - 1:,}</td><td><code class='px-digest'>{hb.hash.hex()}</code></td>"
            f"<td><code>{ev}</code></td><td>{_extra_label(hb.extra_keys)}</td></tr>"
        )
    more = len(hashed) - cap
    foot = (
        f"<tr><td colspan='5' class='px-more'>&hellip; {more:,} more: the hash calculator page or the replay JSON has them all</td></tr>"
        if more > 0
        else ""
    )
    return (
        "<div class='px-scroll'><table class='px-table px-hash-table' data-px-digests='1'><tr><th>block</th><th>tokens</th>"
        "<th>digest</th><th>event hash</th><th>extra keys</th></tr>" + "".join(rows) + foot + "</table></div>"
    )


def lookup_html(step: Step, num_full_blocks: int, block_size: int, show: int = 40) -> str:
    lk = step.lookup
    if lk is None or lk.skipped:
        return ""
    probes = []
    for idx, hit, bid in lk.probes:
        if hit:
            probes.append(
                f'<span class="px-probe px-hit" data-px-block="{bid}" title="block {idx}: hit, block #{bid}">b{idx} &#10003; #{bid}</span>'
            )
        else:
            probes.append(f'<span class="px-probe px-miss" title="block {idx}: miss">b{idx} &#10007; miss: stop</span>')
    if lk.cap_blocks == 0:
        probes.append('<span class="px-probe px-off">cap 0: nothing to probe</span>')
    elif all(h for _, h, _ in lk.probes) and len(lk.probes) == lk.cap_blocks:
        probes.append(f'<span class="px-probe px-cap">cap reached: block {lk.cap_blocks} not probed</span>')
    probes = _elide(probes, show - 6, 6, "probes")
    hits = sum(1 for _, h, _ in lk.probes if h)
    miss = 1 if any(not h for _, h, _ in lk.probes) else 0
    unprobed = max(lk.cap_blocks - hits - miss, 0)
    beyond = max(num_full_blocks - lk.cap_blocks, 0)
    partial = 1 if lk.num_tokens % block_size else 0
    total = max(hits + miss + unprobed + beyond + partial, 1)

    def seg(n: int, cls: str, label: str) -> str:
        if n <= 0:
            return ""
        return f'<div class="px-seg {cls}" style="flex-grow:{n}" title="{_e(label)}">{_e(label) if n / total > 0.08 else ""}</div>'

    cap_at = 100 * lk.cap_blocks / total
    ruler = (
        '<div class="px-ruler-wrap"><div class="px-ruler">'
        + seg(hits, "px-hit", f"{hits} hit")
        + seg(miss, "px-miss", "miss")
        + seg(unprobed, "px-off", f"{unprobed} not probed")
        + seg(beyond, "px-beyond", f"{beyond} past the cap")
        + seg(partial, "px-tailseg", "tail")
        + f'</div><div class="px-capline{" px-capline-r" if cap_at > 75 else ""}" style="left:{cap_at:.2f}%" data-px-cap="{lk.cap_blocks}"><span>cap: {lk.cap_blocks} blocks</span></div></div>'
        + f'<div class="px-ruler-caption">blocks 0-{max(num_full_blocks - 1, 0)} of the request; the cap lets the walk look at {lk.cap_blocks} of them '
        f"(({lk.num_tokens:,} - 1) // {block_size}); hit = {lk.hit_tokens:,} tokens</div>"
    )
    return '<div class="px-probes">' + "".join(probes) + "</div>" + ruler


def allocate_html(step: Step, before: Snapshot, after: Snapshot, changed: set[int], selected: int | None = None) -> str:
    parts = []
    if step.op.op == "admit" and step.admissions:
        a = step.admissions[0]
        ok = "px-ok" if a.ok else "px-bad"
        verdict = "&le;" if a.ok else "&gt;"
        parts.append(
            f'<div class="px-eq {ok}" data-px-admission="{a.required}/{a.free_blocks}">'
            f"<span><b>{a.new_blocks_needed}</b> new blocks</span> + <span><b>{a.free_hit_blocks}</b> free hit blocks</span> = "
            f"<b>{a.required}</b> {verdict} <b>{a.free_blocks}</b> free &rarr; {'ok' if a.ok else 'None: nothing changes'}</div>"
        )
    else:
        grew = [a for a in step.admissions if a.new_blocks_needed > 0 or not a.ok]
        if grew:
            items = "".join(
                f"<li>tokens up to {a.slots_needed:,}: {a.new_blocks_needed} new block &le; {a.free_blocks} free</li>"
                if a.ok
                else f"<li>tokens up to {a.slots_needed:,}: {a.required} &gt; {a.free_blocks} free &rarr; None</li>"
                for a in grew[:12]
            )
            parts.append(f'<ul class="px-list">{items}</ul>')
    if step.touched:
        from_free = set(step.touched_from_free)
        chips = [
            snap_chip(
                after,
                b,
                changed,
                selected,
                "full",
                title_extra="left the free queue" if b in from_free else "was already in use",
            )
            for b in step.touched
        ]
        parts.append(
            f'<div class="px-row"><span class="px-rowlabel">touch: {len(step.touched)} hit blocks '
            f"({len(from_free)} from the free queue)</span>" + "".join(_elide(chips, 30, 6, "blocks")) + "</div>"
        )
    if step.new_block_ids:
        evicted = {b for b, _ in step.evicted}
        chips = [
            snap_chip(
                after,
                b,
                changed,
                selected,
                "full",
                extra=' <span class="px-x" title="evicted">&#10007;</span>' if b in evicted else "",
            )
            for b in step.new_block_ids
        ]
        parts.append(
            f'<div class="px-row"><span class="px-rowlabel">get_new_blocks: {len(step.new_block_ids)} popped from the head</span>'
            + "".join(_elide(chips, 30, 6, "blocks"))
            + "</div>"
        )
    return "".join(parts)


def caching_html(
    step: Step, after: Snapshot, changed: set[int], selected: int | None = None, int_hashes: bool = True, show: int = 10
) -> str:
    rows = []
    for c in step.cached:
        dup = (
            f' <span class="px-dupmark">duplicate of #{", #".join(map(str, c.duplicate_of))}: both kept</span>'
            if c.duplicate_of
            else ""
        )
        rows.append(
            f'<div class="px-cached-row">{snap_chip(after, c.block_id, changed, selected)} '
            f"<span>block {c.index} &larr; <code>{c.hash.hex()[:16]}&hellip;</code> <small>event {external_block_hash(c.hash) if int_hashes else 'raw digest'}</small></span>{dup}</div>"
        )
    rows = _elide(rows, show - 4, 4, "blocks")
    ev = []
    for e in step.events:
        if type(e).__name__ == "BlockStored":
            toks = e.token_ids or ()
            ev.append(
                f'<div class="px-event"><b>BlockStored</b> {len(e.block_hashes)} hashes, parent '
                f"{_hash_text(e.parent_block_hash) if e.parent_block_hash is not None else 'None'}, "
                f"{len(toks):,} token ids ({toks[0] if toks else '-'}&hellip;{toks[-1] if toks else '-'})</div>"
            )
    return '<div class="px-cached">' + "".join(rows) + "</div>" + "".join(ev[:6])


def free_html(step: Step, after: Snapshot, changed: set[int], selected: int | None = None) -> str:
    out = []
    order = [f.block_id for f in step.freed]
    out.append(
        '<div class="px-row"><span class="px-rowlabel">free order (block table reversed)</span>'
        + "".join(_elide([f'<span class="px-ord">{b}</span>' for b in order], 30, 6, "blocks"))
        + "</div>"
    )
    for to, label in (
        ("front", "&rarr; front of the free queue (no hash: reused first)"),
        ("back", "&rarr; back of the free queue (hashed: stays cached)"),
        ("held", "still held (ref_cnt &gt; 0)"),
    ):
        ids = [f.block_id for f in step.freed if f.to == to]
        if ids:
            chips = [snap_chip(after, b, changed, selected) for b in ids]
            out.append(
                f'<div class="px-row" data-px-freed="{to}"><span class="px-rowlabel">{len(ids)} {label}</span>'
                + "".join(_elide(chips, 30, 6, "blocks"))
                + "</div>"
            )
    return "".join(out)


def eviction_html(
    step: Step,
    before: Snapshot,
    after: Snapshot,
    changed: set[int],
    selected: int | None = None,
    int_hashes: bool = True,
) -> str:
    if step.op.op == "reset":
        n = len(before.cached)
        if step.ok:
            return f'<div class="px-event"><b>AllBlocksCleared</b>: {n:,} hashes dropped at once; no BlockRemoved per block.</div>'
        return '<div class="px-event px-bad">reset refused: blocks are still in use.</div>'
    still = {h: ids for h, ids in after.cached}
    rows = []
    for b, h in step.evicted:
        if h in still:
            fate = f"one copy of a duplicate gone; #{', #'.join(map(str, still[h]))} still cached"
        else:
            fate = "map entry gone"
        rows.append(
            f'<div class="px-cached-row">{snap_chip(after, b, changed, selected)} lost <code>{h.hex()[:16]}&hellip;</code> '
            f"<small>BlockRemoved {external_block_hash(h) if int_hashes else 'raw digest'}</small> &middot; {fate}</div>"
        )
    return '<div class="px-cached">' + "".join(_elide(rows, 6, 4, "blocks")) + "</div>"


def history_html(entries: Iterable, k: int) -> str:
    rows = []
    for e in entries:
        cls = ' class="px-cur"' if e.step == k else (' class="px-future"' if e.step > k else "")
        rows.append(f"<tr{cls}><td>{e.step}</td><td>{_e(e.label)}</td><td>{_e(e.text)}</td></tr>")
    if not rows:
        return '<div class="px-empty">Nothing has happened to this block in this scenario.</div>'
    return (
        '<table class="px-table" data-px-history="1"><tr><th>step</th><th>op</th><th>what happened</th></tr>'
        + "".join(rows)
        + "</table>"
    )


def hit_rate_svg(trace: Trace, k: int, width: int = 560, height: int = 170) -> str:
    """Total hit rate and vLLM's windowed rate after every step, the current step marked."""
    n = len(trace.steps)
    left, right, top, bottom = 44, 10, 12, 28
    w, h = width - left - right, height - top - bottom

    def x(i: int) -> float:
        return left + (w * i / n if n else 0)

    def y(v: float) -> float:
        return top + h * (1 - v)

    total, window = [], []
    for i in range(n + 1):
        s = trace.snapshot_at(i)
        q = s.stats["queries"]
        if q:
            total.append(f"{x(i):.1f},{y(s.stats['hits'] / q):.1f}")
        if s.window_requests:
            window.append(f"{x(i):.1f},{y(s.window_hit_rate):.1f}")
    grid = "".join(
        f'<line x1="{left}" x2="{left + w}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>'
        f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end" font-size="13">{int(v * 100)}%</text>'
        for v in (0, 0.5, 1)
    )
    ticks = sorted({0, n, k} | set(range(0, n + 1, max(1, n // 8 or 1))))
    xt = "".join(
        f'<text x="{x(i):.1f}" y="{top + h + 16}" text-anchor="middle" font-size="13">{i}</text>' for i in ticks
    )
    marker = f'<line x1="{x(k):.1f}" x2="{x(k):.1f}" y1="{top}" y2="{top + h}" stroke="#D55E00" stroke-width="2"/>'
    lines = ""
    if total:
        lines += f'<polyline fill="none" stroke="#0072B2" stroke-width="2.5" points="{" ".join(total)}"/>'
    if window:
        lines += f'<polyline fill="none" stroke="#E69F00" stroke-width="2" stroke-dasharray="6 4" points="{" ".join(window)}"/>'
    legend = (
        f'<line x1="{left + 8}" x2="{left + 28}" y1="{top + 4}" y2="{top + 4}" stroke="#0072B2" stroke-width="2.5"/>'
        f'<text x="{left + 32}" y="{top + 8}" font-size="13">total</text>'
        f'<line x1="{left + 80}" x2="{left + 100}" y1="{top + 4}" y2="{top + 4}" stroke="#E69F00" stroke-width="2" stroke-dasharray="6 4"/>'
        f'<text x="{left + 104}" y="{top + 8}" font-size="13">window (~1000 requests)</text>'
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'font-family="sans-serif">{grid}{xt}{marker}{lines}{legend}'
        f'<text x="{left + w / 2:.1f}" y="{height - 2}" text-anchor="middle" font-size="13">step</text></svg>'
    )


def svg_img(svg: str, alt: str) -> str:
    """An SVG as an <img> (st.html sanitizes inline SVG away; a data URI survives)."""
    import base64

    data = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    return f'<img class="px-rate" src="data:image/svg+xml;base64,{data}" alt="{_e(alt)}" style="width:100%;max-width:720px">'
