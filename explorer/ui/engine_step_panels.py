"""What the explorer page draws for a step of an engine-step scenario: the batch (budget bar,
prefill chunks and decodes, tokens in flight, preemptions and why, finished requests, the KV
event batch), then the phase panels of the step. An `arrive` or a `reset` is drawn as the
manager-level page draws it."""

from __future__ import annotations

import streamlit as st

from explorer.scenario.trace import Trace
from explorer.ui.explain import engine_step as explain
from explorer.ui.explain.records import PANEL_TITLES
from explorer.ui.explain.refs import Ref
from explorer.ui.external_tier_panel import external_tier_panel
from explorer.ui.html_block import html_block
from explorer.ui.text import esc, paragraph_html
from explorer.viz.engine_step_html import (
    batch_table_html,
    budget_bar_html,
    event_batch_html,
    finished_html,
    in_flight_html,
    preempted_html,
)
from explorer.viz.panels_html import (
    allocate_html,
    caching_html,
    eviction_html,
    free_html,
    lookup_html,
    phase_strip_html,
)


def draws_step(trace: Trace, k: int) -> bool:
    """Whether step k is drawn here (a `step` or `abort` of an engine-step scenario)."""
    return trace.scenario.sched is not None and k > 0 and trace.steps[k - 1].op.op in ("step", "abort")


def _refs_line(refs: tuple[Ref, ...]) -> str:
    return " ".join(f"<span class='px-ref'>{esc(r.func)} <span class='px-loc'>{esc(r.loc)}</span></span>" for r in refs)


def batch_panel(trace: Trace, k: int) -> None:
    step = trace.steps[k - 1]
    es = step.engine_step
    sched = trace.scenario.sched
    if es is None or sched is None:
        return
    before, after = trace.snapshot_at(k - 1), trace.snapshot_at(k)
    kinds = explain.kinds(trace, k)
    async_sched = sched.scheduler == "async"
    refs = (explain.ENGINE_REFS["schedule"], explain.ENGINE_REFS["update"]) + (
        (explain.ENGINE_REFS["async_placeholders"],) if async_sched else ()
    )
    with st.container(border=True, key="px_panel_batch"):
        body = (
            f'<div class="px-panel-head" data-px-panel="batch">Batch · {esc(sched.scheduler)} scheduler, '
            f"max_num_batched_tokens = {sched.max_num_batched_tokens:,}, max_num_seqs = {sched.max_num_seqs:,}</div>"
            f'<div class="px-refs">{_refs_line(refs)}</div>'
        )
        body += budget_bar_html(es.batch, kinds, sched.max_num_batched_tokens)
        body += batch_table_html(es.batch, kinds, es, async_sched)
        if async_sched:
            flight = in_flight_html(es.batch, before, after, trace.scenario.engine.block_size)
            if flight:
                body += (
                    '<div class="px-rowlabel"><b>Tokens in flight</b> (? = a placeholder: a slot, never hashed)</div>'
                    + flight
                )
        failed = [a for a in step.admissions if not a.ok] if step.preempted else []
        body += preempted_html(es.preemption_reasons, failed, step.preempted)
        body += finished_html(es.finished)
        body += '<div class="px-rowlabel"><b>The KV event batch of this step</b></div>' + event_batch_html(step.events)
        html_block(body, "px_html_batch")


def phase_panels(trace: Trace, k: int, changed: set[int], selected: int | None) -> None:
    """The batch, then the phase panels of an engine step (only those whose records exist)."""
    panels = explain.panels(trace, k)
    html_block(phase_strip_html({p.key: p.summary for p in panels}, PANEL_TITLES), "px_html_strip")
    step = trace.steps[k - 1]
    if step.op.op == "step":
        batch_panel(trace, k)
    before, after = trace.snapshot_at(k - 1), trace.snapshot_at(k)
    eng = trace.scenario.engine
    external_drawn = False  # the KV connector's panel goes between lookup and allocation
    for p in panels:
        if not external_drawn and p.key not in ("hashing", "lookup"):
            external_drawn = external_tier_panel(trace, k) or True
        with st.container(border=True, key=f"px_panel_{p.key}"):
            body = (
                f'<div class="px-panel-head" data-px-panel="{p.key}">{p.number} · {esc(p.title)}</div>'
                f'<div class="px-refs">{_refs_line(p.refs)}</div>' + paragraph_html(p.text)
            )
            if p.key == "lookup" and step.lookup is not None:
                body += lookup_html(step, step.lookup.num_tokens // eng.block_size, eng.block_size)
            elif p.key == "allocate":
                body += allocate_html(step, before, after, changed, selected)
            elif p.key == "caching":
                body += caching_html(step, after, changed, selected, eng.int_block_hashes)
            elif p.key == "free":
                body += free_html(step, after, changed, selected)
            elif p.key == "eviction":
                body += eviction_html(step, before, after, changed, selected, eng.int_block_hashes)
            html_block(body, f"px_html_panel_{p.key}")
    if not external_drawn:
        external_tier_panel(trace, k)
