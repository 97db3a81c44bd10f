"""The explorer page's session: its view in st.session_state, the widgets bound to it, and the
replays cached per browser session (a Streamlit server is shared, so nothing lives at module level)."""

from __future__ import annotations

from collections import OrderedDict

import streamlit as st

from explorer.errors import BadInput
from explorer.scenario.parse import with_engine
from explorer.scenario.spec import Scenario
from explorer.ui.state import (
    Replayed,
    ViewState,
    base_bytes,
    effective_scenario,
    from_query,
    needs_drawn_seed,
    parse_base,
    replay_key,
    replay_until_error,
)

_CACHE_ENTRIES = 4

# Session-state keys: the view, caches, messages, and the widgets bound to the view.
K_VIEW, K_CACHE, K_ERRORS, K_NOTICE = "px_view", "px_cache", "px_errors", "px_notice"
W_LESSON, W_STEP, W_PLAY, W_SPEED, W_BLOCK, W_PRESENTER = (
    "px_w_lesson",
    "px_w_step",
    "px_w_play",
    "px_w_speed",
    "px_w_block",
    "px_w_presenter",
)
W_BS, W_NB, W_ALGO, W_SEED, W_PC = "px_w_bs", "px_w_nb", "px_w_algo", "px_w_seed", "px_w_pc"
ENGINE_WIDGETS = {
    W_BS: "block_size",
    W_NB: "num_blocks",
    W_ALGO: "hash_algo",
    W_SEED: "hash_seed",
    W_PC: "enable_prefix_caching",
}
UPLOADED = "(uploaded file)"


# ---- session helpers --------------------------------------------------------------------------


def current_view() -> ViewState:
    return st.session_state[K_VIEW]


def set_view(view: ViewState) -> None:
    st.session_state[K_VIEW] = view


def add_error(msg: str) -> None:
    st.session_state.setdefault(K_ERRORS, []).append(msg)


def init_session() -> None:
    if K_VIEW in st.session_state:
        return
    try:
        params = st.query_params.to_dict()
    except Exception:
        params = {}
    view, errors = from_query(params)
    for e in errors:
        add_error(e + " It was ignored.")
    set_view(view)
    st.session_state[K_CACHE] = OrderedDict()
    sync_widgets(view, None)


def sync_widgets(view: ViewState, scenario: Scenario | None) -> None:
    """Put the view's values into the widgets' keys (only ever before the widgets exist)."""
    st.session_state[W_STEP] = view.step
    st.session_state[W_PRESENTER] = view.presenter
    st.session_state[W_BLOCK] = view.block
    st.session_state[W_LESSON] = view.lesson if view.upload is None else UPLOADED
    for key in ENGINE_WIDGETS:
        st.session_state.pop(key, None)  # refilled from the scenario when drawn


def _cache() -> OrderedDict:
    return st.session_state.setdefault(K_CACHE, OrderedDict())


def _cached(key: str, make):
    cache = _cache()
    if key in cache:
        cache.move_to_end(key)
        return cache[key]
    value = make()
    cache[key] = value
    while len(cache) > _CACHE_ENTRIES:
        cache.popitem(last=False)
    return value


def base_scenario(view: ViewState) -> Scenario:
    source, raw = base_bytes(view)
    return _cached("base:" + replay_key(source, raw, {}, (), None), lambda: parse_base(source, raw))


def build_view(view: ViewState) -> tuple[Scenario, Replayed]:
    """The view's scenario and its replay (cached per scenario, settings, edits and seed)."""
    source, raw = base_bytes(view)
    key = replay_key(source, raw, view.engine, view.edits, view.drawn_seed)

    def make():
        base = base_scenario(view)
        sc = effective_scenario(base, view.engine, view.edits, view.drawn_seed)
        return sc, replay_until_error(sc)

    return _cached("trace:" + key, make)


def ensure_seed(view: ViewState) -> ViewState:
    """xxhash without a seed draws one, once per browser session (kept in the view and URL)."""
    if view.drawn_seed:
        return view
    try:
        base = base_scenario(view)
        probe = with_engine(base, **view.engine) if view.engine else base
    except BadInput:
        return view
    if needs_drawn_seed(probe):
        view = view.with_(drawn_seed=probe.engine.resolve_seed())
        set_view(view)
    return view
