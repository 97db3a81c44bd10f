"""Block chips and the small HTML pieces every explorer view is built from (styled by
assets/explorer.css).

Every string that came from a user (request ids, LoRA names, salts, image ids, token text) is
escaped with ``esc`` (explorer.viz.text). A block chip carries ``data-px-block="<id>"`` so a click anywhere on the
page can open that block's history.
"""

from __future__ import annotations

from collections.abc import Sequence

from explorer.scenario.trace import Snapshot
from explorer.viz.palette import STATE_ORDER, STATES, block_letter, block_state, short_hash
from explorer.viz.text import esc

FULL_GRID_MAX = 400  # blocks drawn as full chips (id, letter, short hash)
COMPACT_GRID_MAX = 1200  # beyond this the pool becomes a heat strip (explorer.viz.figures)


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
        title += ", " + esc(title_extra)
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
            f'<span class="px-blk px-s-{s} px-legend-chip"><span class="px-l">{esc(letter)}</span></span> {esc(text)}'
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


def elide(items: Sequence[str], keep_head: int, keep_tail: int, what: str = "more") -> list[str]:
    if len(items) <= keep_head + keep_tail + 1:
        return list(items)
    hidden = len(items) - keep_head - keep_tail
    return [
        *items[:keep_head],
        f'<span class="px-more">&hellip; {hidden:,} {what} &hellip;</span>',
        *items[-keep_tail:],
    ]


def hash_text(h: object) -> str:
    return str(h) if isinstance(h, int) else (h.hex()[:12] if isinstance(h, bytes) else str(h)[:12])
