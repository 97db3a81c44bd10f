"""The explorer page: a scenario (plus the user's edits) replayed to step k and drawn.

Top to bottom: the stepper, the NOW line (op, vLLM function with its 0.31.0 file:line, what
happened in numbers), the six phase panels of this step (hashing, lookup, touch + allocate,
caching, free, eviction; only those that happened), then the state after the step, always
visible: the block pool, the free queue, the hash map, the block tables, the KV event log and
the metrics. The sidebar holds the scenario picker, engine settings, the playground, files and
presenter mode. The whole view lives in the URL, so a link opens the same step.

The page never touches an engine: every rerun replays (cached per session) and renders a
frozen snapshot. Its pieces sit beside it in explorer/ui/: explorer_session (the view in session
state and the cached replays), explorer_callbacks, explorer_sidebar, explorer_stepper and
explorer_panels (what it draws for a step).
"""

from __future__ import annotations

from urllib.parse import urlencode

import streamlit as st

from explorer.errors import BadInput
from explorer.scenario.spec import Scenario
from explorer.ui.explorer_callbacks import on_block_click, on_presenter
from explorer.ui.explorer_panels import click_component, now_box, phase_panels, state_views
from explorer.ui.explorer_session import (
    K_ERRORS,
    K_NOTICE,
    add_error,
    base_scenario,
    build_view,
    current_view,
    ensure_seed,
    init_session,
    set_view,
)
from explorer.ui.explorer_sidebar import sidebar
from explorer.ui.explorer_stepper import autoplay, stepper
from explorer.ui.history import changed_blocks
from explorer.ui.state import DEFAULT_LESSON, Replayed, ViewState, to_query
from explorer.ui.style import page_css
from explorer.ui.text import caption, error, esc, toast


def _share_link(view: ViewState) -> None:
    q, warnings = to_query(view)
    for w in warnings:
        caption(w)
    try:
        base = (st.context.url or "").split("?")[0]
    except Exception:
        base = ""
    with st.sidebar.expander("Share this view", key="px_x_share"):
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


def render() -> None:
    init_session()
    ss = st.session_state
    view = ensure_seed(current_view())
    page_css(view.presenter)

    base: Scenario | None = None
    sc: Scenario | None = None
    rep: Replayed | None = None
    try:
        base = base_scenario(view)
        sc, rep = build_view(view)
    except BadInput as e:
        add_error(str(e))
    if rep is None and (view.engine or view.edits):
        # Settings or edits that cannot be used: keep the scenario, drop them, say so.
        fallback = view.with_(engine={}, edits=())
        try:
            base = base_scenario(fallback)
            sc, rep = build_view(fallback)
            set_view(fallback)
            view = fallback
        except BadInput as e:
            add_error(str(e))
    if rep is None and (view.upload is not None or view.lesson != DEFAULT_LESSON):
        fallback = ViewState(drawn_seed=view.drawn_seed)
        try:
            base = base_scenario(fallback)
            sc, rep = build_view(fallback)
            set_view(fallback)
            view = fallback
        except BadInput as e:
            add_error(str(e))

    sidebar(view, base, sc, rep.trace if rep is not None else None)
    view = current_view()

    for msg in ss.pop(K_ERRORS, []):
        error(msg)
    notice = ss.pop(K_NOTICE, None)
    if notice:
        toast(notice)
    if rep is None:
        st.info("Pick a lesson in the sidebar.")
        return
    trace = rep.trace

    n = len(trace.steps)
    ss["px_n_steps"] = n
    if view.step > n or view.step < 0:
        view = view.with_(step=max(0, min(n, view.step)))
        set_view(view)
    if view.block is not None and not 0 <= view.block < len(trace.initial.blocks):
        view = view.with_(block=None)
        set_view(view)
    k = view.step

    title = sc.title if sc else ""
    eng = trace.scenario.engine
    seed = (
        "caching off"
        if trace.hash_seed is None or trace.none_hash is None
        else f"{eng.hash_algo}, seed {trace.hash_seed[:24]!r}{'...' if len(trace.hash_seed) > 24 else ''}, NONE_HASH {trace.none_hash.hex()[:12]}..."
    )
    st.html(
        f'<div class="px-title"><span class="px-title-main">{esc(title)}</span> '
        f'<span class="px-title-sub">{esc(trace.scenario.source)} · block size {eng.block_size} · {eng.num_blocks:,} blocks · {esc(seed)}</span></div>'
    )
    if rep.error:
        error(f"The replay stopped: {rep.error}. The steps before it are shown.")
    if view.presenter:
        st.button(
            "Leave presenter mode",
            icon=":material/close_fullscreen:",
            on_click=on_presenter,
            kwargs={"value": False},
            key="px_b_leave_presenter",
            type="tertiary",
        )

    stepper(view, n, view.presenter)
    changed = changed_blocks(trace, k)
    selected = view.block
    base_ops = len(base.ops) if base is not None else n
    now_box(trace, k, base_ops)
    phase_panels(trace, k, changed, selected)
    state_views(trace, k, changed, selected)

    if not view.presenter:
        _share_link(current_view())
    click_component()(key="px_click", on_block_change=on_block_click)
    autoplay(n)
    _sync_url(current_view())


# Streamlit runs a page file as __main__; importing it (a test calling render()) draws nothing.
if __name__ == "__main__":
    render()
