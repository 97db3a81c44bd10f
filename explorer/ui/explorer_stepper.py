"""The explorer page's stepper (first, back, the step slider, next, last) and autoplay."""

from __future__ import annotations

import time

import streamlit as st

from explorer.ui import bound
from explorer.ui.explorer_callbacks import go, on_play, on_step
from explorer.ui.explorer_session import K_PLAYING, W_PLAY, W_SPEED, W_STEP, current_view, set_view
from explorer.ui.state import ViewState

SPEEDS = {"0.5x": 3.0, "1x": 1.5, "2x": 0.75, "4x": 0.35}


def stepper(view: ViewState, n: int, presenter: bool) -> None:
    cols = st.columns([0.6, 0.75, 5.9, 1.6, 0.6, 1.2, 1.1], vertical_alignment="bottom")
    cols[0].button(
        "",
        icon=":material/first_page:",
        key="px_b_first",
        on_click=go,
        kwargs={"to": 0},
        help="First: before step 1",
        disabled=view.step == 0,
        width="stretch",
    )
    cols[1].button(
        "",
        icon=":material/chevron_left:",
        key="px_b_back",
        on_click=go,
        kwargs={"delta": -1},
        help="Back one step (Left arrow)",
        shortcut="Left",
        disabled=view.step == 0,
        width="stretch",
    )
    if n > 0:
        k = bound.key(W_STEP, view.step)
        cols[2].slider(
            f"Step {view.step} of {n}",
            min_value=0,
            max_value=n,
            value=view.step,
            key=k,
            on_change=on_step,
            args=(k,),
            help="0 = before the first step. Keys: Left and Right arrows.",
        )
    else:
        cols[2].caption("This scenario has no steps yet: add some in the playground.")
    cols[3].button(
        "Next",
        icon=":material/chevron_right:",
        icon_position="right",
        key="px_b_next",
        on_click=go,
        kwargs={"delta": 1},
        help="Next step (Right arrow)",
        shortcut="Right",
        disabled=view.step >= n,
        width="stretch",
        type="primary",
    )
    cols[4].button(
        "",
        icon=":material/last_page:",
        key="px_b_last",
        on_click=go,
        kwargs={"to": n},
        help="Last step",
        disabled=view.step >= n,
        width="stretch",
    )
    playing = bool(st.session_state.get(K_PLAYING))
    k = bound.key(W_PLAY, playing)
    cols[5].toggle("Play", value=playing, key=k, on_change=on_play, args=(k,), disabled=n == 0)
    cols[6].selectbox("Speed", list(SPEEDS), index=1, key=W_SPEED, label_visibility="collapsed")


def autoplay(n: int) -> None:
    ss = st.session_state
    if not ss.get(K_PLAYING):
        return
    if current_view().step >= n:
        ss[K_PLAYING] = False  # the toggle shows it off from the next run on
        return
    interval = SPEEDS.get(ss.get(W_SPEED) or "1x", 1.5)
    ss["px_rendered_at"] = time.monotonic()

    @st.fragment(run_every=interval)
    def _tick() -> None:
        if time.monotonic() - st.session_state.get("px_rendered_at", 0.0) < interval * 0.8:
            return  # this is the page's own run, not a tick
        view = current_view()
        last = st.session_state.get("px_n_steps", 0)
        if view.step < last:
            set_view(view.with_(step=view.step + 1))
            if view.step + 1 >= last:
                st.session_state[K_PLAYING] = False  # the toggle switches off at the last step
            st.rerun(scope="app")

    _tick()
