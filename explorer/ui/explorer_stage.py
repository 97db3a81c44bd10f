"""The explorer page's stage: the control bar and step k (the NOW box, the panels, the state after
it), a fragment, so a step redraws only the stage and never the sidebar or anything above it.

A step (Next, Back, the slider, a block click, autoplay's timer) reruns only this fragment; it
reads the view and the session's cached replay (explorer_session) and draws. What the rest of the
page shows (presenter mode's stylesheet, the timer of autoplay) is fixed by the full run, so a
change of those from inside the stage asks for a full rerun. Presenter mode lays one step out on
one 16:9 screen: the NOW box, this step's panels and, beside them, the blocks it changed, the
free queue and the metrics, each box scrolling on its own when it has more than fits.
"""

from __future__ import annotations

import time
from urllib.parse import urlencode

import streamlit as st

from explorer.errors import BadInput
from explorer.scenario.trace import Trace
from explorer.ui.explorer_callbacks import on_block_click
from explorer.ui.explorer_panels import click_component, now_box, phase_panels, state_views
from explorer.ui.explorer_session import K_PLAYING, base_scenario, build_view, current_view, set_view
from explorer.ui.explorer_stepper import SPEEDS, stepper
from explorer.ui.history import changed_blocks
from explorer.ui.html_block import html_block
from explorer.ui.state import ViewState, to_query
from explorer.ui.text import caption, error
from explorer.viz.presenter_html import changed_html, free_html, metrics_html

K_FULL_RUN = "px_stage_full_run"  # set by the page's full run just before it draws the stage
K_DRAWN_AT = "px_stage_drawn_at"  # when the stage was last drawn (autoplay tells its ticks by it)


def interval() -> float | None:
    """Autoplay's seconds per step, or None when it is off."""
    ss = st.session_state
    return SPEEDS.get(ss.get("px_w_speed") or "1x", 1.5) if ss.get(K_PLAYING) else None


def draw_stage(presenter: bool) -> None:
    """The stage, as a fragment that autoplay's timer reruns while it plays."""
    every = interval()
    st.session_state[K_FULL_RUN] = True
    st.fragment(_stage, run_every=every)(presenter, every)


def _stage(presenter: bool, every: float | None) -> None:
    ss = st.session_state
    full_run = bool(ss.pop(K_FULL_RUN, False))
    view = current_view()
    if interval() != every or view.presenter != presenter:
        st.rerun(scope="app")  # autoplay's timer or presenter mode changed: the whole page changes
    try:
        base = base_scenario(view)
        sc, rep = build_view(view)
    except BadInput as e:
        error(str(e))
        return
    trace = rep.trace
    n = len(trace.steps)
    ss["px_n_steps"] = n
    if every is not None and not full_run and time.monotonic() - ss.get(K_DRAWN_AT, 0.0) >= every * 0.8:
        view = _tick(view, n)  # a tick of autoplay's timer, not a click
    if not 0 <= view.step <= n:
        view = view.with_(step=max(0, min(n, view.step)))
        set_view(view)
    if view.block is not None and not 0 <= view.block < len(trace.initial.blocks):
        view = view.with_(block=None)
        set_view(view)
    k = view.step
    with st.container(key="px_stage"):
        stepper(view, n, presenter)
        changed = changed_blocks(trace, k)
        base_ops = len(base.ops)
        if presenter:
            _presenter(trace, k, changed, view.block, base_ops)
        else:
            now_box(trace, k, base_ops)
            phase_panels(trace, k, changed, view.block)
            state_views(trace, k, changed, view.block)
            _share_link(current_view())
    click_component()(key="px_click", on_block_change=on_block_click)
    _sync_url(current_view())
    ss[K_DRAWN_AT] = time.monotonic()


def _tick(view: ViewState, n: int) -> ViewState:
    if view.step < n:
        view = view.with_(step=view.step + 1)
        set_view(view)
    if view.step >= n:
        st.session_state[K_PLAYING] = False
        st.rerun(scope="app")  # the last step: the timer stops and the toggle shows it off
    return view


def _presenter(trace: Trace, k: int, changed: set[int], selected: int | None, base_ops: int) -> None:
    snap = trace.snapshot_at(k)
    prev = trace.snapshot_at(k - 1) if k > 0 else snap
    with st.container(key="px_pres_now"):
        now_box(trace, k, base_ops)
    left, right = st.columns([3, 2], gap="medium")
    with left.container(key="px_pres_panel"):
        phase_panels(trace, k, changed, selected)
    with right.container(key="px_pres_state"):
        html_block(
            metrics_html(snap, prev) + changed_html(snap, changed, selected, k) + free_html(snap, changed, selected),
            "px_html_presenter_state",
        )


def _share_link(view: ViewState) -> None:
    q, warnings = to_query(view)
    for w in warnings:
        caption(w)
    try:
        base = (st.context.url or "").split("?")[0]
    except Exception:
        base = ""
    with st.expander("Share this view", key="px_x_share"):
        st.code(f"{base}?{urlencode(q)}", language=None, wrap_lines=True)
        st.caption("The link holds the scenario, settings, playground steps, the step and presenter mode.")


def _sync_url(view: ViewState) -> None:
    q, _ = to_query(view)
    try:
        current = {k: st.query_params.get(k) for k in st.query_params}
        if current != q:
            st.query_params.from_dict(q)
    except Exception:
        pass
