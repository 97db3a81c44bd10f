"""Hybrid KV cache groups drawn (design section 8): each group's own hit and the fixed point's
passes, a block-table row per group with the null blocks visible, retention's choice, the
blocks freed below a window, and the pool coloured by group.

Pure functions of what a step recorded (the core's `GroupLookup`, `Retention` and freed-block
reports) and of a snapshot; nothing here works out a decision of the core.
"""

from __future__ import annotations

from collections.abc import Sequence

from explorer.core.kv_cache_interface import KVCacheSpec
from explorer.scenario.records import GroupLookup, Retention, SkippedFreed
from explorer.scenario.trace import Snapshot, Step
from explorer.viz.chips import elide, snap_chip
from explorer.viz.palette import OKABE_ITO
from explorer.viz.text import esc

# One colour per group (Okabe-Ito, distinct from the state colours' meaning): group 0 first.
GROUP_COLOURS = (
    OKABE_ITO["blue"],
    OKABE_ITO["reddish_purple"],
    OKABE_ITO["yellow"],
    OKABE_ITO["bluish_green"],
    OKABE_ITO["orange"],
    OKABE_ITO["sky_blue"],
    OKABE_ITO["vermillion"],
    "#777777",
)


def group_name(gid: int, spec: KVCacheSpec) -> str:
    kind = "full attention" if spec.sliding_window is None else f"window {spec.sliding_window}"
    return f"group {gid} ({kind}, {spec.block_size}-token blocks)"


def _swatch(gid: int) -> str:
    colour = GROUP_COLOURS[gid % len(GROUP_COLOURS)]
    return f'<span class="px-grp-swatch" style="display:inline-block;width:0.8em;height:0.8em;background:{colour};margin-right:4px"></span>'


def lookup_html(lookup: GroupLookup, groups: Sequence[KVCacheSpec]) -> str:
    """One request's hybrid lookup: each group alone, then every call of the fixed point by
    pass, then the reconciled hit and shared_prefix_boundary."""
    rid = esc(lookup.request_id)
    alone = "".join(
        f'<tr data-px-group-hit="{gid}:{hit}"><td>{_swatch(gid)}{esc(group_name(gid, groups[gid]))}</td><td>{hit:,}</td></tr>'
        for gid, hit in enumerate(lookup.group_hit_tokens)
    )
    calls = "".join(
        f'<tr data-px-pass="{c.pass_index}:{",".join(map(str, c.group_ids))}:{c.max_length}:{c.hit_tokens}">'
        f"<td>{c.pass_index}</td><td>{', '.join(f'group {g}' for g in c.group_ids)}"
        f"{' (EAGLE: one block more, then dropped)' if c.drop_eagle_block else ''}</td>"
        f"<td>at most {c.max_length:,}</td><td>{c.hit_tokens:,}</td></tr>"
        for c in lookup.calls
    )
    if not calls:
        calls = '<tr><td colspan="4">one group: its own hit is the hit (no fixed point)</td></tr>'
    spb = lookup.shared_prefix_boundary
    tail = (
        f"shared_prefix_boundary {spb:,}: a group cached {spb:,} tokens that the others did not; the "
        "request keeps it, and retention will hash the window tail there so a sibling can hit it."
        if spb
        else "shared_prefix_boundary 0: no group hit further than the reconciled hit."
    )
    return (
        f'<div class="px-groups" data-px-group-lookup="{rid}" data-px-passes="{lookup.num_passes}" '
        f'data-px-reconciled="{lookup.hit_tokens}" data-px-spb="{spb}">'
        f"<b>{rid}</b>: each group alone"
        f'<table class="px-table"><tr><th>group</th><th>hit alone (tokens)</th></tr>{alone}</table>'
        f"the fixed point, {lookup.num_passes} pass(es) until one changes nothing"
        f'<table class="px-table"><tr><th>pass</th><th>asked</th><th>candidate</th><th>hit</th></tr>{calls}</table>'
        f"<div>reconciled hit <b>{lookup.hit_tokens:,}</b> tokens; {esc(tail)}</div></div>"
    )


def retention_reason(r: Retention) -> str:
    """Why retention kept these blocks hashed, in words."""
    where = ", ".join(f"{b:,}" for b in r.boundaries)
    if r.retention_interval is None:
        return "dense retention (None): every block a later hit could end on gets a hash"
    if r.retention_interval == 0:
        return (
            "retention 0 (the engine default): only the window tails ending at the replay boundary "
            f"and the shared-prefix boundary (tokens {where}, each floored to a block boundary) get a hash"
        )
    return (
        f"retention {r.retention_interval:,}: one window tail per {r.retention_interval:,}-token segment, "
        f"plus the tails ending at tokens {where}"
    )


def retention_html(records: Sequence[Retention]) -> str:
    rows = []
    for r in records:
        marks = "".join(
            f'<span class="px-blk px-compact" data-px-retained="{r.start_block + i}:{int(m)}" '
            f'title="block index {r.start_block + i}: {"hashed" if m else "no hash"}">{r.start_block + i}{"✓" if m else "–"}</span>'
            for i, m in enumerate(r.mask)
        )
        rows.append(
            f'<div class="px-row" data-px-retention="{esc(r.request_id)}:{r.group_id}">'
            f'<span class="px-rowlabel">{esc(r.request_id)} group {r.group_id}: {sum(r.mask)} of {len(r.mask)} hashed</span>'
            f"{marks}<div><small>{esc(retention_reason(r))}</small></div></div>"
        )
    return "".join(rows)


def skipped_html(records: Sequence[SkippedFreed], snap: Snapshot) -> str:
    rows = []
    for r in records:
        rid, gid = r.request_id, r.group_id
        chips = "".join(snap_chip(snap, b, mode="id") for b in r.block_ids)
        rows.append(
            f'<div class="px-row" data-px-skipped="{esc(rid)}:{gid}"><span class="px-rowlabel">{esc(rid)} group {gid}: '
            f"freed below the window, last skipped first (before the capacity check)</span>{chips}</div>"
        )
    return "".join(rows)


def group_tables_html(snap: Snapshot, groups: Sequence[KVCacheSpec], show: int = 48) -> str:
    """Every live request's block table, one row per group; block 0 is the null block."""
    if not snap.requests:
        return '<div class="px-empty">No live request.</div>'
    out = []
    for r in snap.requests:
        rows = []
        for gid, ids in enumerate(r.block_ids_by_group):
            chips = [
                '<span class="px-blk px-s-null px-id" data-px-null="1" title="the null block: outside the window">'
                "<b>0</b> N</span>"
                if b == 0
                else snap_chip(snap, b, mode="id")
                for b in ids
            ]
            body = "".join(elide(chips, show // 2, show // 2, "blocks")) or '<span class="px-more">no blocks</span>'
            nulls = sum(1 for b in ids if b == 0)
            rows.append(
                f'<div class="px-row" data-px-group-row="{esc(r.request_id)}:{gid}:{nulls}">'
                f'<span class="px-rowlabel">{_swatch(gid)}{esc(group_name(gid, groups[gid]))}</span>{body}</div>'
            )
        out.append(
            f'<div data-px-group-request="{esc(r.request_id)}"><b>{esc(r.request_id)}</b> '
            f"({r.num_computed_tokens:,} of {r.num_tokens:,} tokens computed){''.join(rows)}</div>"
        )
    return "".join(out)


def block_groups(snap: Snapshot) -> dict[int, int]:
    """Which group holds each block now: a live table's group, else the group of its cached key."""
    owner: dict[int, int] = {}
    for gid, _, ids in snap.cached_by_group:
        for b in ids:
            owner.setdefault(b, gid)
    for r in snap.requests:
        for gid, ids in enumerate(r.block_ids_by_group):
            for b in ids:
                if b:
                    owner[b] = gid
    return owner


def pool_by_group_html(snap: Snapshot, groups: Sequence[KVCacheSpec], limit: int = 1200) -> str:
    """The pool coloured by group (a block's state letter stays on it); free blocks without a
    hash belong to no group."""
    owner = block_groups(snap)
    cells = []
    for b in range(1, min(len(snap.blocks), limit)):
        gid = owner.get(b)
        style = "" if gid is None else f' style="background:{GROUP_COLOURS[gid % len(GROUP_COLOURS)]};color:#000"'
        title = f"block {b}: " + ("no group (free, no hash)" if gid is None else f"group {gid}")
        cells.append(
            f'<span class="px-blk px-compact" data-px-block="{b}" data-px-block-group="{"" if gid is None else gid}"'
            f'{style} title="{title}"><b>{b}</b></span>'
        )
    legend = " ".join(f"{_swatch(g)}{esc(group_name(g, s))}" for g, s in enumerate(groups))
    more = (
        f'<span class="px-more">&hellip; {len(snap.blocks) - limit:,} more</span>' if len(snap.blocks) > limit else ""
    )
    return f'<div class="px-legend">{legend}</div><div class="px-chips" data-px-pool-groups="1">{"".join(cells)}{more}</div>'


def step_has_groups(step: Step) -> bool:
    return any(isinstance(r, (GroupLookup, Retention, SkippedFreed)) for r in step.records)
