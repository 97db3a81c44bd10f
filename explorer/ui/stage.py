"""The explorer's stage: one component that holds every step of the replay and steps through it
in the browser (explorer/ui/static/stage.js).

The walk is built once per replay, presenter mode and PromQL window (explorer.view.stage) and
kept in the session's replay cache; the page reruns only when the scenario, a setting or an edit
changes. The browser keeps the step it shows across such a run unless the server moved the view
itself (a new lesson, a playground step): ``nav`` counts those moves. A stage mounted again (a
visit to another page, a reconnect) keeps the tab's step too while ``nav`` is unchanged. The component writes the
step and the open block into the URL, so a shared link opens the same view.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from explorer.scenario.spec import Scenario
from explorer.scenario.trace import Trace
from explorer.ui.explorer_session import K_NAV, current_view, replay_cache, set_view
from explorer.ui.state import ViewState, replay_key
from explorer.view import lesson_checks
from explorer.view.stage import StageSteps, build_steps, snippets

COMPONENT = "px_stage"  # the name tests look for (tests/ui/helpers.py)
KEY = "px_stage"
JS_PATH = Path(__file__).resolve().parent / "static" / "stage.js"
W_WINDOW = "px_metrics_window"  # the PromQL window of the exported metrics, in steps
MAX_WINDOW = 1000


@st.cache_resource
def _component() -> Any:
    # isolate_styles=False: the app's stylesheet (explorer/ui/style.py) styles the parts
    return st.components.v2.component(COMPONENT, js=JS_PATH.read_text(encoding="utf-8"), isolate_styles=False)


def _steps(view: ViewState, trace_key: str, trace: Trace, base: Scenario, window: int) -> StageSteps:
    off = lesson_checks.off_script(view.engine, base.engine) if view.engine else None
    key = f"stage:{trace_key}:{int(view.presenter)}:{window}:{off}"
    return replay_cache().get(
        key,
        lambda: build_steps(trace, len(base.ops), view.presenter, off, window, snippets(trace)),
        lambda s: sum(len(p) for p in s.parts) * 2,
    )


def window_input(trace: Trace) -> int:
    """The PromQL window (engine-step scenarios only: the others export no metrics)."""
    if trace.scenario.sched is None:
        return 5
    return int(
        st.number_input(
            "PromQL window of the exported metrics: the last N steps (one scrape per step)",
            min_value=1,
            max_value=MAX_WINDOW,
            value=5,
            step=1,
            key=W_WINDOW,
        )
    )


def _leave_presenter() -> None:
    set_view(current_view().with_(presenter=False))


def draw(view: ViewState, trace_key: str, trace: Trace, base: Scenario, window: int) -> None:
    """The stage at the view's step (the browser's own step after a run it did not ask for)."""
    steps = _steps(view, trace_key, trace, base, window)
    n = len(trace.steps)
    block = view.block if view.block is not None and 0 <= view.block < steps.num_blocks else None
    data = {
        **steps.to_data(),
        "version": f"{trace_key}:{int(view.presenter)}:{window}",
        "step": max(0, min(n, view.step)),
        "block": block,
        "nav": st.session_state.get(K_NAV, 0),
        "presenter": view.presenter,
    }
    _component()(data=data, key=KEY, on_presenter_change=_leave_presenter, width="stretch")


def trace_key(view: ViewState) -> str:
    """The key of the view's replay (the scenario, its settings, edits and drawn seed)."""
    from explorer.ui.state import base_bytes

    source, raw = base_bytes(view)
    return replay_key(source, raw, view.engine, view.edits, view.drawn_seed)
