"""What the explorer page draws for step k: the NOW box, the phase panels of the step, and the
state after it (block pool, block history, free queue, requests, metrics, hash map, KV events)."""

from __future__ import annotations

import json

import streamlit as st

from explorer.errors import BadInput
from explorer.scenario.trace import Trace
from explorer.ui import bound, engine_step_panels, groups_panel, spec_decode_panel
from explorer.ui.engine_step_panels import draws_step
from explorer.ui.explain import engine_step
from explorer.ui.explain import step as explain
from explorer.ui.explain.records import PANEL_TITLES
from explorer.ui.explain.refs import REFS
from explorer.ui.explain.words import counted
from explorer.ui.explorer_callbacks import close_history, on_block, on_strip_select
from explorer.ui.explorer_session import W_BLOCK
from explorer.ui.history import block_history
from explorer.ui.html_block import html_block
from explorer.ui.metrics_panel import metrics_panel
from explorer.ui.text import caption_html, esc, heading_html, paragraph_html, warning
from explorer.viz.chips import grid_mode, legend_html, snap_chip
from explorer.viz.figures import heat_strip
from explorer.viz.panels_html import (
    allocate_html,
    caching_html,
    digest_table_html,
    eviction_html,
    free_html,
    hashing_html,
    lookup_html,
    phase_strip_html,
)
from explorer.viz.state_html import (
    event_log_html,
    free_queue_html,
    hash_map_html,
    history_html,
    hit_rate_svg,
    pool_grid_html,
    pool_summary_html,
    requests_html,
    stats_html,
    svg_img,
)


@st.cache_resource
def click_component():
    """A script-only component: a click on any block chip opens that block's history."""
    js = """
export default function (component) {
  const { setTriggerValue } = component;
  const onClick = (e) => {
    const el = e.target && e.target.closest ? e.target.closest('[data-px-block]') : null;
    if (!el) return;
    const id = parseInt(el.getAttribute('data-px-block'), 10);
    if (!Number.isNaN(id)) setTriggerValue('block', id);
  };
  document.addEventListener('click', onClick, true);
  document.body.setAttribute('data-px-click-ready', '1');
  return () => document.removeEventListener('click', onClick, true);
}
"""
    return st.components.v2.component("px_block_click", js=js)


def _refs_line(refs) -> str:
    return " ".join(f"<span class='px-ref'>{esc(r.func)} <span class='px-loc'>{esc(r.loc)}</span></span>" for r in refs)


def now_box(trace: Trace, k: int, base_ops: int) -> None:
    now = (engine_step.now if trace.scenario.sched is not None else explain.now)(trace, k)
    n = len(trace.steps)
    origin = ' <span class="px-tag">playground</span>' if k > base_ops else ""
    extra = ""
    failures: tuple[str, ...] = ()
    if k > 0:
        extra, failures = _note_and_checks(trace.steps[k - 1])
    html_block(
        f'<div class="px-now" data-px-now="{k}"><div class="px-headline">Step {k} of {n}: {esc(now.headline)}{origin}</div>'
        f'<div class="px-refs">{_refs_line(now.refs)}</div><div class="px-now-text">{esc(now.text)}</div>{extra}</div>',
        "px_html_now",
    )
    for f in failures:
        warning(f"Lesson check failed: {f}")


def _note_and_checks(step) -> tuple[str, tuple[str, ...]]:
    """The step's lesson note and checks, off script when the view's engine settings differ from
    its scenario's own (explorer.ui.lesson_checks)."""
    from explorer.ui import lesson_checks
    from explorer.ui.explorer_session import base_scenario, current_view

    view = current_view()
    off = None
    if view.engine:
        try:
            off = lesson_checks.off_script(view.engine, base_scenario(view).engine)
        except BadInput:
            off = None
    return lesson_checks.note_and_checks(step, off)


def phase_panels(trace: Trace, k: int, changed: set[int], selected: int | None) -> None:
    spec_decode_panel.draw(trace, k)
    if draws_step(trace, k):
        engine_step_panels.phase_panels(trace, k, changed, selected)
        groups_panel.step_panel(trace, k)
        return
    panels = explain.panels(trace, k)
    html_block(phase_strip_html({p.key: p.summary for p in panels}, PANEL_TITLES), "px_html_strip")
    if k == 0:
        return
    step = trace.steps[k - 1]
    before, after = trace.snapshot_at(k - 1), trace.snapshot_at(k)
    eng = trace.scenario.engine
    bs = eng.block_size
    ints = eng.int_block_hashes
    for p in panels:
        with st.container(border=True, key=f"px_panel_{p.key}"):
            head = (
                f'<div class="px-panel-head" data-px-panel="{p.key}">{p.number} · {esc(p.title)}</div>'
                f'<div class="px-refs">{_refs_line(p.refs)}</div>' + paragraph_html(p.text)
            )
            body = ""
            if p.key == "hashing" and eng.enable_prefix_caching:
                rid = step.op.id
                assert rid is not None  # arrive, sample and generate name their request
                req = after.request(rid) or before.request(rid)
                n = len(step.op.prompt) if step.op.op == "arrive" else (req.num_tokens if req else 0)
                parent = None
                if step.hashed and step.hashed[0].index > 0 and req is not None:
                    parent = req.block_hashes[step.hashed[0].index - 1]
                html_block(
                    head + hashing_html(step, trace.none_hash, parent, n, bs, ints, _snippets(step)),
                    f"px_html_panel_{p.key}",
                )
                head = ""
                if len(step.hashed) > 1:
                    with st.expander(f"All {len(step.hashed):,} digests in full"):
                        html_block(digest_table_html(step.hashed, ints), "px_html_digests")
            elif p.key == "lookup" and step.lookup is not None:
                body = lookup_html(step, step.lookup.num_tokens // bs, bs)
            elif p.key == "allocate":
                body = allocate_html(step, before, after, changed, selected)
            elif p.key == "caching":
                body = caching_html(step, after, changed, selected, ints)
            elif p.key == "free":
                body = free_html(step, after, changed, selected)
            elif p.key == "eviction":
                body = eviction_html(step, before, after, changed, selected, ints)
            if head or body:
                html_block(head + body, f"px_html_panel_{p.key}")
    groups_panel.step_panel(trace, k)


def _snippets(step) -> dict[int, str]:
    """Token text of the first blocks of a typed prompt (shown on the hash cards)."""
    if step.op.op != "arrive" or not step.op.text or not step.hashed:
        return {}
    try:
        from explorer.tokens import token_strings

        out = {}
        for hb in list(step.hashed[:20]) + list(step.hashed[-4:]):
            out[hb.index] = "".join(token_strings(step.op.prompt[hb.start : hb.end]))
        return out
    except Exception:
        return {}


def state_views(trace: Trace, k: int, changed: set[int], selected: int | None) -> None:
    snap = trace.snapshot_at(k)
    prev = trace.snapshot_at(k - 1) if k > 0 else None
    step = trace.steps[k - 1] if k > 0 else None
    n = len(snap.blocks)
    # A heading, its caption and its HTML go out as one element: a step redraws fewer of them.
    html_block(
        heading_html("pool", f"Block pool after step {k}" if k else "Block pool before step 1")
        + legend_html()
        + pool_summary_html(snap),
        "px_html_pool_head",
    )
    if grid_mode(n) == "strip":
        st.plotly_chart(
            heat_strip(snap, changed, selected),
            key="px_strip",
            on_select=on_strip_select,
            selection_mode="points",
            config={"displayModeBar": False},
        )
        st.caption(
            "One cell per block, 100 blocks a row, coloured by state; an open square marks a block this step changed. "
            "Hover for id, ref_cnt and hash; click a marked block (or type its id below) for its history."
        )
        if changed:
            from explorer.scenario.cli import id_ranges

            ids = sorted(changed)
            chips = "".join(snap_chip(snap, b, changed, selected, "full") for b in ids) if len(ids) <= 60 else ""
            html_block(
                f'<div class="px-row" data-px-changed="{len(ids)}"><span class="px-rowlabel">changed by this step ({len(ids):,} blocks):</span>'
                + (chips or f"<code>{esc(id_ranges(ids)[1:-1])}</code>")
                + "</div>",
                "px_html_changed",
            )
    else:
        html_block(pool_grid_html(snap, changed, selected), "px_html_pool")
    c1, c2 = st.columns([1, 3], vertical_alignment="bottom")
    shown = selected if selected is not None and 0 <= selected < n else None
    wkey = bound.key(W_BLOCK, shown)
    c1.number_input(
        "Block history: block id",
        min_value=0,
        max_value=n - 1,
        value=shown,
        step=1,
        key=wkey,
        on_change=on_block,
        args=(wkey,),
        placeholder="click a block",
        help="Click any block chip on the page, or type its id.",
    )
    if selected is not None and 0 <= selected < n:
        with st.container(border=True, key="px_history"):
            hc1, hc2 = st.columns([6, 1])
            hc1.markdown(f"**History of block {selected}** (every step of the scenario; later steps greyed)")
            hc2.button("Close", on_click=close_history, key="px_b_close_hist")
            html_block(history_html(block_history(trace, selected), k), "px_html_history")

    html_block(
        heading_html("free-queue", "Free queue")
        + caption_html(
            f"{snap.num_free_blocks:,} free blocks. get_new_blocks pops from the head; free_blocks puts unhashed blocks at the head and hashed ones at the tail."
        )
        + free_queue_html(snap, changed, selected),
        "px_html_free_queue",
    )

    groups_panel.state_panel(trace, k)
    c1, c2 = st.columns([3, 2])
    with c1:
        html_block(
            heading_html("requests", "Requests and their block tables") + requests_html(snap, changed, selected),
            "px_html_requests",
        )
    with c2:
        html_block(_metrics(trace, k), "px_html_metrics")
    metrics_panel(trace, k)  # engine-step scenarios: what vLLM exports (explorer/ui/metrics_panel.py)

    c1, c2 = st.columns(2)
    with c1:
        html_block(
            heading_html("hash-map", "Hash map")
            + caption_html(
                f"{len(snap.cached):,} hashes cached. One hash may map to several blocks: vLLM keeps duplicates."
            )
            + hash_map_html(snap, step, prev, selected, int_hashes=trace.scenario.engine.int_block_hashes),
            "px_html_hash_map",
        )
    with c2:
        html_block(heading_html("events", "KV event log") + event_log_html(trace, k), "px_html_events")
        if step is not None and step.events:
            with st.expander(f"This step's {len(step.events)} event(s) as vLLM's msgpack decodes them"):
                from explorer.core.events import event_to_json

                evs = [event_to_json(e) for e in step.events[:20]]
                for e in evs:
                    if isinstance(e.get("token_ids"), list) and len(e["token_ids"]) > 32:
                        e["token_ids"] = e["token_ids"][:16] + [f"... {len(e['token_ids'])} in all"]
                # escaped text, not st.json: its viewer costs the browser more than the rest of the step
                html_block(
                    f'<pre class="px-json">{esc(json.dumps(evs, indent=1, ensure_ascii=False, default=str))}</pre>',
                    "px_html_events_json",
                )


def _metrics(trace: Trace, k: int) -> str:
    """The prefix-cache metrics after step k, the sentence that reads them and the hit-rate chart."""
    snap = trace.snapshot_at(k)
    prev = trace.snapshot_at(k - 1) if k > 0 else snap
    s = snap.stats
    sentence = (
        explain.metrics_sentence(trace, k)
        + f" Preempted: {counted(s['preempted_requests'], 'request')}, {s['preempted_hits']:,} of {s['preempted_queries']:,} tokens hit."
    )
    return (
        heading_html("metrics", "Metrics")
        + stats_html(snap, prev)
        + caption_html(sentence)
        + f'<div class="px-refs">{_refs_line((REFS["record_stats"], REFS["prefix_cache_stats"], REFS["caching_metrics"]))}</div>'
        + svg_img(hit_rate_svg(trace, k), f"Hit rate after each step, total and windowed; step {k} marked.")
    )
