"""HTML of presenter mode's state column: the blocks a step changed, the free queue and the
metrics, sized for one 16:9 screen (styled by assets/explorer.css, `.px-pres-*`)."""

from __future__ import annotations

from explorer.scenario.trace import Snapshot
from explorer.viz.chips import snap_chip
from explorer.viz.state_html import free_queue_html, stat_cells
from explorer.viz.text import esc

CHANGED_SHOWN = 40  # chips of changed blocks; the rest are counted
FREE_SHOWN = 12  # free-queue chips (half from the head, half from the tail)


def _plural(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def changed_html(snap: Snapshot, changed: set[int], selected: int | None, k: int) -> str:
    ids = sorted(changed)
    if k == 0:
        body = '<span class="px-empty">before step 1: nothing changed yet</span>'
    elif not ids:
        body = '<span class="px-empty">no block changed</span>'
    else:
        body = "".join(snap_chip(snap, b, changed, selected, "id") for b in ids[:CHANGED_SHOWN])
        if len(ids) > CHANGED_SHOWN:
            body += f'<span class="px-more">+ {len(ids) - CHANGED_SHOWN:,} more</span>'
    return (
        f'<div class="px-pres-box" data-px-pres="changed" data-px-changed="{len(ids)}">'
        f'<div class="px-pres-label">Blocks this step changed ({len(ids):,})</div><div class="px-chips">{body}</div></div>'
    )


def free_html(snap: Snapshot, changed: set[int], selected: int | None) -> str:
    return (
        '<div class="px-pres-box" data-px-pres="free">'
        f'<div class="px-pres-label">Free queue: {_plural(snap.num_free_blocks, "free block", "free blocks")}</div>'
        + free_queue_html(snap, changed, selected, show=FREE_SHOWN)
        + "</div>"
    )


def metrics_html(snap: Snapshot, prev: Snapshot) -> str:
    def cell(label: str, value: str, delta: int) -> str:
        d = f'<span class="px-pres-delta">+{delta:,}</span>' if delta > 0 else ""
        return f'<div class="px-pres-metric"><div class="px-pres-mlabel">{esc(label)}</div><div class="px-pres-mvalue">{esc(value)}{d}</div></div>'

    return (
        '<div class="px-pres-box" data-px-pres="metrics"><div class="px-pres-label">Metrics (prefix cache stats)</div>'
        '<div class="px-pres-metrics">'
        + "".join(cell(label, value, delta) for _, label, value, delta in stat_cells(snap, prev))
        + "</div></div>"
    )
