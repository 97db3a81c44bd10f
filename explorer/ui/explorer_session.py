"""The explorer page's session: its view in st.session_state, the names of the widgets bound to it,
and the browser session's replays (a Streamlit server is shared, so nothing lives at module level).

The replays live in a session-scoped resource (`_session_cache`): Streamlit drops it when the
browser session disconnects, so a closed tab's replays are freed at once (and the freed memory
handed back to the system, `release_cache`), while the view (in st.session_state, kept a while
for a reconnect) is small. Nothing else may hold a replay: the download buttons hold it weakly. Within the session they stay inside a
memory budget (explorer.ui.budget): a replay that alone would exceed it is refused before it
runs, and older ones leave first to make room.
"""

from __future__ import annotations

import secrets

import streamlit as st

from explorer.errors import BadInput
from explorer.scenario.ops import Arrive, EngineArrive, Generate, Op, Sample
from explorer.scenario.spec import Scenario
from explorer.ui.budget import PER_TOKEN, ReplayCache, check_budget, release_cache
from explorer.ui.state import (
    UI_LIMITS,
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
from explorer.ui.step_settings import apply_engine

# Session-state keys: the view, the cache's token, messages, whether autoplay runs.
K_VIEW, K_TOKEN, K_ERRORS, K_NOTICE = "px_view", "px_cache_token", "px_errors", "px_notice"
K_NAV = "px_nav"  # how often the server moved the view's step or block (explorer.ui.stage)
K_REQUEST = "px_request"  # the live request the playground acts on
K_OPENED, OPEN_PARAM = "px_opened_links", "open"  # the one-time tokens of links already opened (init_session)
# Names of the widgets bound to the view (explorer.ui.bound gives each its current key).
W_LESSON, W_PRESENTER = "px_w_lesson", "px_w_presenter"
W_BS, W_NB, W_ALGO, W_SEED, W_PC = "px_w_bs", "px_w_nb", "px_w_algo", "px_w_seed", "px_w_pc"
W_REQUEST = "px_a_req"
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
    ss = st.session_state
    old = ss.get(K_VIEW)
    if old is None or (old.step, old.block, old.lesson, old.upload) != (
        view.step,
        view.block,
        view.lesson,
        view.upload,
    ):
        ss[K_NAV] = ss.get(K_NAV, 0) + 1  # the stage shows this step, not the one the browser is on
    ss[K_VIEW] = view


def add_error(msg: str) -> None:
    st.session_state.setdefault(K_ERRORS, []).append(msg)


def init_session() -> None:
    """The view from the URL on a session's first run, and again when a link from another page
    opens one (the Lessons page's "Open this lesson in the explorer"): such a link carries a
    one-time ``open`` token, taken once, so a stale report of that URL later cannot move the view
    back (the page writes its own view into the URL on every run, without the token)."""
    ss = st.session_state
    params = st.query_params.to_dict()
    token = params.pop(OPEN_PARAM, None)
    if K_VIEW in ss and (token is None or token in ss.get(K_OPENED, ())):
        return
    if token is not None:
        ss[K_OPENED] = (*ss.get(K_OPENED, ())[-31:], token)
    view, errors = from_query(params)
    for e in errors:
        add_error(e + " It was ignored.")
    set_view(view)


def open_link_params(**params: str) -> dict[str, str]:
    """Query parameters of a link that opens a view in the explorer from another page."""
    return {**params, OPEN_PARAM: secrets.token_hex(6)}


# ---- the session's replays --------------------------------------------------------------------


@st.cache_resource(scope="session", max_entries=2, show_spinner=False, on_release=release_cache)
def _session_cache(token: str) -> ReplayCache:
    """One per browser session (``token`` tells apart sessions that share an id, as tests do)."""
    return ReplayCache()


def replay_cache() -> ReplayCache:
    token = st.session_state.setdefault(K_TOKEN, secrets.token_hex(8))
    return _session_cache(token)


def _op_tokens(op: Op) -> int:
    match op:
        case EngineArrive():
            return len(op.prompt) + len(op.output)
        case Arrive():
            return len(op.prompt)
        case Sample() | Generate():
            return len(op.tokens)
    return 0


def _scenario_cost(sc: Scenario) -> int:
    return sum(map(_op_tokens, sc.ops)) * PER_TOKEN


def base_scenario(view: ViewState) -> Scenario:
    source, raw = base_bytes(view)
    return replay_cache().get(
        "base:" + replay_key(source, raw, {}, (), None), lambda: parse_base(source, raw), _scenario_cost
    )


def build_view(view: ViewState) -> tuple[Scenario, Replayed]:
    """The view's scenario and its replay (cached per scenario, settings, edits and seed). A
    replay that would not fit in the session's memory budget is refused (BadInput) before it runs."""
    source, raw = base_bytes(view)
    key = "trace:" + replay_key(source, raw, view.engine, view.edits, view.drawn_seed)
    cache = replay_cache()
    hit = cache.peek(key)
    if hit is not None:
        return hit
    base = base_scenario(view)
    sc = effective_scenario(base, view.engine, view.edits, view.drawn_seed)
    need = check_budget(sc, cache.budget)
    return cache.get(key, lambda: (sc, replay_until_error(sc)), need)


def ensure_seed(view: ViewState) -> ViewState:
    """xxhash without a seed draws one, once per browser session (kept in the view and URL)."""
    if view.drawn_seed:
        return view
    try:
        base = base_scenario(view)
        probe = apply_engine(base, view.engine, UI_LIMITS) if view.engine else base
    except BadInput:
        return view
    if needs_drawn_seed(probe):
        view = view.with_(drawn_seed=probe.engine.resolve_seed())
        set_view(view)
    return view
