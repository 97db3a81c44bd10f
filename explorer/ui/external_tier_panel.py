"""The External tier panel of an engine step with a KV connector (design section 10), drawn
between the lookup and the allocation: what the connector offered after the local hit, the
requests waiting for their loads, finished and failed loads (explorer/viz/external_tier_html.py)."""

from __future__ import annotations

import streamlit as st

from explorer.scenario.trace import Trace
from explorer.ui.text import esc, paragraph
from explorer.viz.external_tier_html import external_tier_html

REFS = (
    ("Scheduler.schedule: get_num_new_matched_tokens after the local hit", "vllm/v1/core/sched/scheduler.py:924-1009"),
    ("_update_waiting_for_remote_kv (cache the loaded blocks)", "vllm/v1/core/sched/scheduler.py:3052-3097"),
    ("_handle_invalid_blocks (failed loads)", "vllm/v1/core/sched/scheduler.py:3279-3359"),
)


def external_tier_panel(trace: Trace, k: int) -> bool:
    """Draw the panel for step k if the scenario has a connector and it did something; True if drawn."""
    connector = trace.scenario.connector
    step = trace.steps[k - 1]
    es = step.engine_step
    if connector is None or es is None:
        return False
    before, after = trace.snapshot_at(k - 1), trace.snapshot_at(k)
    stored = sum(type(e).__name__ == "BlockStored" for e in step.events)
    body = external_tier_html(es.connector, es.external, before, after, stored)
    if not body:
        return False
    refs = " ".join(f"<span class='px-ref'>{esc(f)} <span class='px-loc'>{esc(loc)}</span></span>" for f, loc in REFS)
    with st.container(border=True, key="px_panel_external"):
        st.html(
            f'<div class="px-panel-head" data-px-panel="external">External tier · {esc(connector.kind)} connector, '
            f"load = {esc(connector.load)}, failure_policy = {esc(connector.failure_policy)}</div>"
            f'<div class="px-refs">{refs}</div>'
        )
        paragraph(
            "After the local prefix-cache hit the scheduler asks the KV connector how many more tokens "
            "it holds, from the block-aligned hit on. An async load holds its blocks without hashes until "
            "the worker reports it done; a sync one counts its tokens as computed at once."
        )
        st.html(body)
    return True
