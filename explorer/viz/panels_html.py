"""HTML of the six phase panels' pictures (hashing chain, lookup probes and cap, the admission
sum with touched and popped blocks, cached, freed and evicted blocks) and the phase strip.

Every function returns an HTML string built from a trace step (styled by assets/explorer.css).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from explorer.core.events import BlockStored
from explorer.core.hashing import external_block_hash
from explorer.scenario.records import AdmissionCheck, CachedBlock, Freed, HashedBlock, Lookup, Popped, Touched
from explorer.scenario.trace import Snapshot, Step
from explorer.viz.chips import elide, hash_text, snap_chip
from explorer.viz.text import esc


def phase_strip_html(active: Mapping[str, str], titles: Mapping[str, str]) -> str:
    """The six phases; those that happened this step are lit, with a few words each."""
    cells = []
    for i, (key, title) in enumerate(titles.items(), start=1):
        on = key in active
        cls = "px-phase px-on" if on else "px-phase"
        cells.append(
            f'<div class="{cls}" data-px-phase="{key}"><b>{i}</b> {esc(title)}<br><small>{esc(active.get(key, "-"))}</small></div>'
        )
    return '<div class="px-phases">' + "".join(cells) + "</div>"


def _extra_label(keys: tuple | None) -> str:
    if not keys:
        return ""
    out = []
    for k in keys:
        if k[0] == "lora":
            out.append(f"LoRA {esc(k[1])}")
        elif k[0] == "mm":
            out.append(f"image {esc(k[1])} @{k[2]:+d}")
        elif k[0] == "cache_salt":
            out.append(f"salt {esc(k[1])}")
        else:
            out.append(esc(k[0]))
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
    hashed = step.of(HashedBlock)
    cards = []
    for hb in hashed:
        snip = (snippets or {}).get(hb.index)
        ev = f"event {hb.external}" if int_hashes else "event: raw digest"
        cards.append(
            f'<div class="px-card" data-px-hash-index="{hb.index}"><div><b>block {hb.index}</b> <small>tokens {hb.start:,}-{hb.end - 1:,}</small></div>'
            f'<code class="px-digest">{hb.hash.hex()[:16]}&hellip;</code><div><small>{ev}</small></div>'
            + (f'<div class="px-snip">{esc(snip)}</div>' if snip else "")
            + _extra_label(hb.extra_keys)
            + "</div>"
        )
    cards = elide(cards, show - 4, 4, "blocks")
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


def digest_table_html(hashed: Sequence[HashedBlock], int_hashes: bool = True, cap: int = 256) -> str:
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
    lk = step.last(Lookup)
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
    probes = elide(probes, show - 6, 6, "probes")
    hits = sum(1 for _, h, _ in lk.probes if h)
    miss = 1 if any(not h for _, h, _ in lk.probes) else 0
    unprobed = max(lk.cap_blocks - hits - miss, 0)
    beyond = max(num_full_blocks - lk.cap_blocks, 0)
    partial = 1 if lk.num_tokens % block_size else 0
    total = max(hits + miss + unprobed + beyond + partial, 1)

    def seg(n: int, cls: str, label: str) -> str:
        if n <= 0:
            return ""
        return f'<div class="px-seg {cls}" style="flex-grow:{n}" title="{esc(label)}">{esc(label) if n / total > 0.08 else ""}</div>'

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
    checks = step.of(AdmissionCheck)
    if step.op.op == "admit" and checks:
        a = checks[0]
        ok = "px-ok" if a.ok else "px-bad"
        verdict = "&le;" if a.ok else "&gt;"
        parts.append(
            f'<div class="px-eq {ok}" data-px-admission="{a.num_required_blocks}/{a.num_free_blocks}">'
            f"<span><b>{a.num_new_blocks}</b> new blocks</span> + <span><b>{a.num_evictable_hit_blocks}</b> free hit blocks</span> = "
            f"<b>{a.num_required_blocks}</b> {verdict} <b>{a.num_free_blocks}</b> free &rarr; {'ok' if a.ok else 'None: nothing changes'}</div>"
        )
    else:
        grew = [a for a in checks if a.num_new_blocks > 0 or not a.ok]
        if grew:
            items = "".join(
                f"<li>tokens up to {a.num_tokens_need_slot:,}: {a.num_new_blocks} new block &le; {a.num_free_blocks} free</li>"
                if a.ok
                else f"<li>tokens up to {a.num_tokens_need_slot:,}: {a.num_required_blocks} &gt; {a.num_free_blocks} free &rarr; None</li>"
                for a in grew[:12]
            )
            parts.append(f'<ul class="px-list">{items}</ul>')
    touched = step.of(Touched)
    if touched:
        chips = [
            snap_chip(
                after,
                t.block_id,
                changed,
                selected,
                "full",
                title_extra="left the free queue" if t.from_free else "was already in use",
            )
            for t in touched
        ]
        parts.append(
            f'<div class="px-row"><span class="px-rowlabel">touch: {len(touched)} hit blocks '
            f"({sum(t.from_free for t in touched)} from the free queue)</span>"
            + "".join(elide(chips, 30, 6, "blocks"))
            + "</div>"
        )
    if step.new_block_ids:
        evicted = {p.block_id for p in step.evictions()}
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
            + "".join(elide(chips, 30, 6, "blocks"))
            + "</div>"
        )
    return "".join(parts)


def caching_html(
    step: Step, after: Snapshot, changed: set[int], selected: int | None = None, int_hashes: bool = True, show: int = 10
) -> str:
    rows = []
    for c in step.of(CachedBlock):
        dup = (
            f' <span class="px-dupmark">duplicate of #{", #".join(map(str, c.duplicate_of))}: both kept</span>'
            if c.duplicate_of
            else ""
        )
        rows.append(
            f'<div class="px-cached-row">{snap_chip(after, c.block_id, changed, selected)} '
            f"<span>block {c.index} &larr; <code>{c.hash.hex()[:16]}&hellip;</code> <small>event {external_block_hash(c.hash) if int_hashes else 'raw digest'}</small></span>{dup}</div>"
        )
    rows = elide(rows, show - 4, 4, "blocks")
    ev = []
    for e in step.events:
        if isinstance(e, BlockStored):
            toks = e.token_ids or ()
            ev.append(
                f'<div class="px-event"><b>BlockStored</b> {len(e.block_hashes)} hashes, parent '
                f"{hash_text(e.parent_block_hash) if e.parent_block_hash is not None else 'None'}, "
                f"{len(toks):,} token ids ({toks[0] if toks else '-'}&hellip;{toks[-1] if toks else '-'})</div>"
            )
    return '<div class="px-cached">' + "".join(rows) + "</div>" + "".join(ev[:6])


def free_html(step: Step, after: Snapshot, changed: set[int], selected: int | None = None) -> str:
    out = []
    freed = step.of(Freed)
    order = [f.block_id for f in freed]
    out.append(
        '<div class="px-row"><span class="px-rowlabel">free order (block table reversed)</span>'
        + "".join(elide([f'<span class="px-ord">{b}</span>' for b in order], 30, 6, "blocks"))
        + "</div>"
    )
    for to, label in (
        ("front", "&rarr; front of the free queue (no hash: reused first)"),
        ("back", "&rarr; back of the free queue (hashed: stays cached)"),
        ("held", "still held (ref_cnt &gt; 0)"),
    ):
        ids = [f.block_id for f in freed if f.to == to]
        if ids:
            chips = [snap_chip(after, b, changed, selected) for b in ids]
            out.append(
                f'<div class="px-row" data-px-freed="{to}"><span class="px-rowlabel">{len(ids)} {label}</span>'
                + "".join(elide(chips, 30, 6, "blocks"))
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
    for p in step.of(Popped):
        b, h = p.block_id, p.evicted_hash
        if h is None:
            continue
        if h in still:
            fate = f"one copy of a duplicate gone; #{', #'.join(map(str, still[h]))} still cached"
        else:
            fate = "map entry gone"
        rows.append(
            f'<div class="px-cached-row">{snap_chip(after, b, changed, selected)} lost <code>{h.hex()[:16]}&hellip;</code> '
            f"<small>BlockRemoved {external_block_hash(h) if int_hashes else 'raw digest'}</small> &middot; {fate}</div>"
        )
    return '<div class="px-cached">' + "".join(elide(rows, 6, 4, "blocks")) + "</div>"
