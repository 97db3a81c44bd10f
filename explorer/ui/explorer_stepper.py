"""The explorer page's control bar: first, back, the step slider, next, last, play and its speed
(and, in presenter mode, the way back to the full page). The slider is explorer/ui/step_slider.py.

One horizontal row that sizes each button to its label and gives the slider the rest, wrapping
to a second line rather than cutting a label short, at any width.
"""

from __future__ import annotations

import streamlit as st

from explorer.ui import bound
from explorer.ui.explorer_callbacks import go, on_play, on_presenter, on_step
from explorer.ui.explorer_session import K_PLAYING, W_PLAY, W_SPEED
from explorer.ui.state import ViewState
from explorer.ui.step_slider import step_slider

SPEEDS = {"0.5x": 3.0, "1x": 1.5, "2x": 0.75, "4x": 0.35}


def stepper(view: ViewState, n: int, presenter: bool) -> None:
    with st.container(horizontal=True, vertical_alignment="bottom", gap="small", key="px_controls"):
        st.button(
            "",
            icon=":material/first_page:",
            key="px_b_first",
            on_click=go,
            kwargs={"to": 0},
            help="First: before step 1",
            disabled=view.step == 0,
        )
        st.button(
            "",
            icon=":material/chevron_left:",
            key="px_b_back",
            on_click=go,
            kwargs={"delta": -1},
            help="Back one step (Left arrow)",
            shortcut="Left",
            disabled=view.step == 0,
        )
        if n > 0:
            step_slider(view.step, n, show_label=not presenter, on_step=on_step)
        else:
            st.caption("This scenario has no steps yet: add some in the playground.")
        st.button(
            "Next",
            icon=":material/chevron_right:",
            icon_position="right",
            key="px_b_next",
            on_click=go,
            kwargs={"delta": 1},
            help="Next step (Right arrow)",
            shortcut="Right",
            disabled=view.step >= n,
            type="primary",
        )
        st.button(
            "",
            icon=":material/last_page:",
            key="px_b_last",
            on_click=go,
            kwargs={"to": n},
            help="Last step",
            disabled=view.step >= n,
        )
        playing = bool(st.session_state.get(K_PLAYING))
        k = bound.key(W_PLAY, playing)
        st.toggle("Play", value=playing, key=k, on_change=on_play, args=(k,), disabled=n == 0, width="content")
        st.selectbox("Speed", list(SPEEDS), index=1, key=W_SPEED, label_visibility="collapsed", width="stretch")
        if presenter:
            st.button(
                "Full page",
                icon=":material/close_fullscreen:",
                on_click=on_presenter,
                kwargs={"value": False},
                key="px_b_leave_presenter",
                help="Leave presenter mode: the sidebar and every view of the step come back",
            )
