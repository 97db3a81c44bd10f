"""The engine-step playground (design sections 7 and 10): the scheduler, budget, batch size,
long-prefill threshold and KV connector of an engine-step scenario, and its arrivals and steps.

Every change becomes a new view (settings in ``view.engine``, ops in ``view.edits``) that the
page replays at once and the link carries; nothing here checks a value itself: a setting goes
through ``check_step_setting`` (the scenario parser's checks), an op through the parser when
the view is built (``add_edit``).
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from explorer.errors import BadInput
from explorer.scenario.spec import Scenario
from explorer.scenario.step_spec import MAX_BUDGET, SCHEDULERS
from explorer.ui import bound
from explorer.ui.explorer_callbacks import add_edit, start_empty
from explorer.ui.explorer_session import K_NOTICE, add_error, base_scenario, build_view, current_view, set_view
from explorer.ui.state import ViewState, next_request_id
from explorer.ui.step_settings import (
    BLANK_ENGINE,
    CONNECTOR_KEY,
    NO_CONNECTOR,
    SCHED_KEYS,
    base_value,
    check_step_setting,
)
from explorer.ui.text import caption, check_text

W_SCHED, W_BUDGET, W_SEQS, W_THRESHOLD = "px_w_sched", "px_w_mnbt", "px_w_mns", "px_w_lpt"
W_KV, W_CPU = "px_w_kv", "px_w_kvcpu"
SCHED_WIDGETS = dict(zip((W_SCHED, W_BUDGET, W_SEQS, W_THRESHOLD), SCHED_KEYS, strict=True))
KINDS = (NO_CONNECTOR, "static", "offloading")


def _shown(view: ViewState, base: Scenario, key: str) -> Any:
    return view.engine[key] if key in view.engine else base_value(base, key)


def _set(key: str, value: Any) -> None:
    """The view with one engine-step setting changed (dropped when it is the scenario's own)."""
    view = current_view()
    try:
        base = base_scenario(view)
        value = check_step_setting(key, value)
    except BadInput as e:
        add_error(str(e))
        return
    engine = dict(view.engine)
    if value == base_value(base, key):
        engine.pop(key, None)
    else:
        engine[key] = value
    candidate = view.with_(engine=engine)
    try:
        build_view(candidate)  # what depends on several keys (a budget below max_num_seqs)
    except BadInput as e:
        add_error(str(e))  # one message; the view keeps its settings and steps
        return
    set_view(candidate)


def on_sched(name: str, k: str) -> None:
    if bound.is_current(name, k):
        value = st.session_state.get(k)
        _set(SCHED_WIDGETS[name], value if name == W_SCHED else int(value or 0))


def on_connector(name: str, k: str) -> None:
    if not bound.is_current(name, k):
        return
    view, ss = current_view(), st.session_state
    kind = ss.get(bound.current(W_KV))
    own = base_value(base_scenario(view), CONNECTOR_KEY)
    if kind == NO_CONNECTOR:
        _set(CONNECTOR_KEY, None)
    elif kind == "static":
        _set(CONNECTOR_KEY, own if own is not None and own["kind"] == "static" else {"kind": "static"})
    else:
        cpu = int(ss.get(bound.current(W_CPU)) or 64)
        _set(CONNECTOR_KEY, {"kind": "offloading", "cpu_blocks": cpu})


def settings_widgets(view: ViewState, base: Scenario) -> None:
    """The scheduler keys and the connector, drawn from the view."""

    def bind(name: str, value: Any, fn: Any = on_sched) -> dict[str, Any]:
        k = bound.key(name, value)
        return {"key": k, "on_change": fn, "args": (name, k)}

    sched = _shown(view, base, "scheduler")
    st.radio("Scheduler", SCHEDULERS, index=SCHEDULERS.index(sched), horizontal=True, **bind(W_SCHED, sched))
    for name, label in (
        (W_BUDGET, "max_num_batched_tokens (the step's token budget)"),
        (W_SEQS, "max_num_seqs"),
        (W_THRESHOLD, "long_prefill_token_threshold (0 = none)"),
    ):
        value = _shown(view, base, SCHED_WIDGETS[name])
        lo = 0 if name == W_THRESHOLD else 1
        st.number_input(label, min_value=lo, max_value=MAX_BUDGET, value=value, step=1, **bind(name, value))
    kv = _shown(view, base, CONNECTOR_KEY)
    kind = NO_CONNECTOR if kv is None else kv["kind"]
    st.selectbox("KV connector", KINDS, index=KINDS.index(kind), **bind(W_KV, kind, on_connector))
    if kind == "offloading":
        cpu = int(kv["cpu_blocks"]) if kv is not None else 64
        st.number_input("CPU tier (blocks)", min_value=1, value=cpu, step=1, **bind(W_CPU, cpu, on_connector))


def start_empty_engine() -> None:
    """An empty engine-step scenario, keeping the current block size, pool size, hash settings
    and the engine-step settings the user changed."""
    start_empty(BLANK_ENGINE, "An empty engine: arrive a request, then step.", (*SCHED_KEYS, CONNECTOR_KEY))


def on_step_arrive() -> None:
    ss = st.session_state
    try:
        step: dict[str, Any] = {"op": "arrive"}
        for key, name, what in (
            ("px_e_id", "id", "the request id"),
            ("px_e_prompt", "prompt", "the prompt"),
            ("px_e_output", "output", "the output"),
            ("px_e_salt", "cache_salt", "the cache_salt"),
            ("px_e_lora", "lora", "the LoRA name"),
        ):
            v = check_text(str(ss.get(key) or "").strip(), what)
            if v:
                step[name] = v
    except BadInput as e:
        add_error(str(e))
        return
    if int(ss.get("px_e_ext") or 0) > 0:
        step["external_tokens"] = int(ss["px_e_ext"])
    if add_edit(step):
        ss[K_NOTICE] = f"{step.get('id', '')} arrived."
        ss["px_e_id"] = ""


def on_step() -> None:
    if add_edit({"op": "step"}):
        st.session_state[K_NOTICE] = f"A step added as step {current_view().step}."


def step_playground(view: ViewState, sc: Scenario | None) -> None:
    """The arrive form and the Step button of an engine-step scenario."""
    ss = st.session_state
    if sc is not None and not ss.get("px_e_id"):
        ss["px_e_id"] = next_request_id(sc)
    caption("Engine steps: an arrival joins the waiting queue; each step is one call of the engine's step.")
    with st.form("px_step_arrive", clear_on_submit=False, border=False):
        st.text_input("Request id", key="px_e_id", max_chars=40)
        st.text_input("Prompt (token spec)", key="px_e_prompt", placeholder="0:100", max_chars=2_000)
        st.text_input(
            "Output (the tokens the model samples)", key="px_e_output", placeholder="9000:9008", max_chars=2_000
        )
        c1, c2 = st.columns(2)
        c1.text_input("cache_salt", key="px_e_salt", max_chars=64)
        c2.text_input("LoRA name", key="px_e_lora", max_chars=64)
        if sc is not None and sc.connector is not None and sc.connector.kind == "static":
            st.number_input("external_tokens (held by the static connector)", key="px_e_ext", min_value=0, step=16)
        st.form_submit_button("Arrive", on_click=on_step_arrive, type="primary")
    st.button("Step", on_click=on_step, key="px_b_step", type="primary", width="stretch")
