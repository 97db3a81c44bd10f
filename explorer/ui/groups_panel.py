"""The explorer page's hybrid KV cache groups (design section 8): drawn only for a scenario
with ``kv_cache_groups``, from what each step recorded (explorer/viz/groups_html.py)."""

from __future__ import annotations

import streamlit as st

from explorer.scenario.trace import Trace
from explorer.ui.html_block import html_block
from explorer.ui.text import caption_html, heading_html
from explorer.viz.groups_html import (
    group_tables_html,
    lookup_html,
    pool_by_group_html,
    retention_html,
    skipped_html,
    step_has_groups,
)


def step_panel(trace: Trace, k: int) -> None:
    """This step's group decisions: the lookups (each group alone, each pass of the fixed
    point), the blocks freed below a window, and which window blocks retention hashed and why."""
    groups = trace.scenario.groups
    if groups is None or k == 0:
        return
    step = trace.steps[k - 1]
    if not step_has_groups(step):
        return
    with st.container(border=True, key="px_panel_groups"):
        body = '<div class="px-panel-head" data-px-panel="groups">KV cache groups</div>'
        specs = groups.groups
        body += "".join(lookup_html(lookup, specs) for lookup in step.group_lookups)
        if step.skipped_freed:
            body += skipped_html(step.skipped_freed, trace.snapshot_at(k))
        if step.retention:
            body += caption_html(
                "Caching in the window groups: ✓ gets a hash, – stays unhashed (a later hit cannot reach it)."
            )
            body += retention_html(step.retention)
        html_block(body, "px_html_groups_step")


def state_panel(trace: Trace, k: int) -> None:
    """After step k: every request's block table per group (null blocks visible) and the pool
    coloured by the group that holds each block."""
    groups = trace.scenario.groups
    if groups is None:
        return
    snap = trace.snapshot_at(k)
    html_block(
        heading_html("groups", "Block tables by KV cache group")
        + caption_html(
            "One row per group. A window group's blocks left of its window are the null block (block 0): "
            "they hold nothing a later token attends."
        )
        + group_tables_html(snap, groups.groups),
        "px_html_groups_tables",
    )
    with st.expander("The pool coloured by group"):
        html_block(pool_by_group_html(snap, groups.groups), "px_html_groups_pool")
