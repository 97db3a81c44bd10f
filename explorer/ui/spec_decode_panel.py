"""The Explorer's speculative-decoding panel (design section 9): for a scenario with
`engine.speculative`, what the drafts did in the step: EAGLE's dropped hit block, the lookahead
slots (allocated, never hashed) and the drafts accepted and rolled back (explorer/viz/spec_decode_html.py)."""

from __future__ import annotations

import streamlit as st

from explorer.scenario.trace import Trace
from explorer.ui.html_block import html_block
from explorer.ui.text import esc
from explorer.viz.spec_decode_html import spec_decode_html


def draw(trace: Trace, k: int) -> None:
    """The panel for step k; nothing without speculative decoding or when the step shows none."""
    spec = trace.scenario.speculative
    if spec is None or k == 0:
        return
    step = trace.steps[k - 1]
    body = spec_decode_html(step, trace.snapshot_at(k - 1), trace.scenario.engine.block_size)
    if not body:
        return
    drop = "drops the last block of every hit" if spec.use_eagle_block_drop() else "drops no hit block"
    with st.container(border=True, key="px_panel_spec_decode"):
        html_block(
            f'<div class="px-panel-head" data-px-panel="spec_decode">Speculative decoding · {esc(spec.method)}, '
            f"{spec.num_speculative_tokens} drafts a step: {drop}, {spec.num_lookahead_tokens} lookahead slots "
            "in every allocation</div>"
            '<div class="px-refs"><span class="px-ref">find_longest_cache_hit <span class="px-loc">'
            "single_type_kv_cache_manager.py:834-839</span></span> <span class='px-ref'>allocate_slots "
            "<span class='px-loc'>kv_cache_manager.py:537-541, 603-612</span></span> <span class='px-ref'>update_from_output "
            "<span class='px-loc'>scheduler.py:2051-2069</span></span></div>" + body,
            "px_html_spec_decode",
        )
