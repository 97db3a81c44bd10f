"""The External tier panel of an engine step with a KV connector (design section 10), drawn
between the lookup and the allocation: what the connector offered after the local hit, the
requests waiting for their loads, finished and failed loads (explorer/viz/external_tier_html.py)."""

from __future__ import annotations

import streamlit as st

from explorer.scenario.trace import Trace
from explorer.ui.html_block import html_block
from explorer.ui.text import esc, paragraph_html
from explorer.viz.cpu_tier_html import cpu_tier_html, jobs_html
from explorer.viz.external_tier_html import external_tier_html

REFS = (
    ("Scheduler.schedule: get_num_new_matched_tokens after the local hit", "vllm/v1/core/sched/scheduler.py:924-1009"),
    ("_update_waiting_for_remote_kv (cache the loaded blocks)", "vllm/v1/core/sched/scheduler.py:3052-3097"),
    ("_handle_invalid_blocks (failed loads)", "vllm/v1/core/sched/scheduler.py:3279-3359"),
)
OFFLOADING_REFS = (
    ("OffloadingConnectorScheduler", "vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py"),
    ("CPUOffloadingManager, LRUCachePolicy", "vllm/v1/kv_offload/cpu/manager.py, cpu/policies/lru.py"),
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
    cpu = jobs_html(es.connector) if connector.kind == "offloading" else ""
    if not body and not cpu:
        return False
    if connector.kind == "offloading":  # the CPU tier beside the GPU pool
        body += f'<div class="px-xt">{cpu_tier_html(es.connector, after, connector.cpu_blocks)}</div>'
    setting = f"cpu_blocks = {connector.cpu_blocks}" if connector.kind == "offloading" else f"load = {connector.load}"
    all_refs = REFS + (OFFLOADING_REFS if connector.kind == "offloading" else ())
    refs = " ".join(
        f"<span class='px-ref'>{esc(f)} <span class='px-loc'>{esc(loc)}</span></span>" for f, loc in all_refs
    )
    with st.container(border=True, key="px_panel_external"):
        head = (
            f'<div class="px-panel-head" data-px-panel="external">External tier · {esc(connector.kind)} connector, '
            f"{esc(setting)}, failure_policy = {esc(connector.failure_policy)}</div>"
            f'<div class="px-refs">{refs}</div>'
        )
        text = paragraph_html(
            "After the local prefix-cache hit the scheduler asks the KV connector how many more tokens "
            "it holds, from the block-aligned hit on. An async load holds its blocks without hashes until "
            "the worker reports it done; a sync one counts its tokens as computed at once."
            + (
                " The offloading connector stores each computed prompt block to its CPU tier, which keeps "
                "its own LRU, and offers a later request what the GPU cache has lost."
                if connector.kind == "offloading"
                else ""
            )
        )
        html_block(head + text + body, "px_html_external")
    return True
