"""The explorer page: a scenario (plus the user's edits) replayed to step k and drawn.

Top to bottom: the stepper, the NOW line (op, vLLM function with its 0.31.0 file:line, what
happened in numbers), the six phase panels of this step (hashing, lookup, touch + allocate,
caching, free, eviction; only those that happened), then the state after the step, always
visible: the block pool, the free queue, the hash map, the block tables, the KV event log and
the metrics. The sidebar holds the scenario picker, engine settings, the playground, files and
presenter mode. The whole view lives in the URL, so a link opens the same step.

The page never touches an engine: a run replays (cached per session) and hands every step of the
replay, drawn once (explorer.view.stage), to the stage component (explorer.ui.stage), which steps
through them in the browser; the page runs again only when the scenario, a setting or an edit
changes. Its pieces sit beside it in explorer/ui/: explorer_session (the view in session state and
the cached replays), explorer_callbacks, explorer_sidebar and stage.
"""

from __future__ import annotations

import streamlit as st

from explorer.errors import BadInput
from explorer.scenario.spec import Scenario
from explorer.ui import stage
from explorer.ui.classroom import join_box
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
from explorer.ui.state import DEFAULT_LESSON, Replayed, ViewState, to_query
from explorer.ui.style import page_css
from explorer.ui.text import caption, error, esc, toast
from explorer.ui.vllm_switch import vllm_switch


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
    vllm_switch(trace.scenario.vllm)
    if rep.error:
        error(f"The replay stopped: {rep.error}. The steps before it are shown.")
    if base is None:
        return
    n = len(trace.steps)
    if not 0 <= view.step <= n or (view.block is not None and not 0 <= view.block < len(trace.initial.blocks)):
        block = view.block if view.block is not None and 0 <= view.block < len(trace.initial.blocks) else None
        view = view.with_(step=max(0, min(n, view.step)), block=block)  # a link past the replay's end
        set_view(view)
    if view.presenter:
        with st.expander("Class address: a QR code for the room", key="px_x_join"):
            join_box()
    window = stage.window_input(trace)
    try:
        stage.draw(view, stage.trace_key(view), trace, base, window)
    except BadInput as e:  # the drawn steps would be bigger than a view may hold
        error(str(e))
        return
    _sync_url(view)


def _sync_url(view: ViewState) -> None:
    """The view's URL, written when more than the step or the open block differs (those two the
    stage keeps in the URL itself as the browser steps)."""
    q, warnings = to_query(view)
    for w in warnings:
        caption(w)
    current = {k: st.query_params.get(k) for k in st.query_params}
    moving = ("step", "block")
    if {k: v for k, v in current.items() if k not in moving} != {k: v for k, v in q.items() if k not in moving}:
        st.query_params.from_dict(q)


# Streamlit runs a page file as __main__; importing it (a test calling render()) draws nothing.
if __name__ == "__main__":
    render()
