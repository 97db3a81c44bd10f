"""The explorer page's widget callbacks: each turns a click or an edit into a new view (a lesson,
engine settings, playground steps, an uploaded file); the page then replays and draws that view.

A callback of a widget bound to the view (explorer.ui.bound) gets the key the widget was drawn
under and does nothing when that key is no longer current: the report is stale. Callbacks never
write a bound widget's key; the page draws the widgets from the view.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from explorer.errors import BadInput
from explorer.ui import bound
from explorer.ui.explorer_session import (
    ENGINE_WIDGETS,
    K_NOTICE,
    K_REQUEST,
    UPLOADED,
    W_LESSON,
    W_PRESENTER,
    W_REQUEST,
    add_error,
    base_scenario,
    build_view,
    current_view,
    set_view,
)
from explorer.ui.state import MAX_EDITS, MAX_GENERATE, MAX_UPLOAD_BYTES
from explorer.ui.text import check_text


def _reported(name: str, key: str) -> tuple[bool, Any]:
    """(fresh, value) of a bound widget's report: fresh only for its current key."""
    if not bound.is_current(name, key):
        return False, None
    return True, st.session_state.get(key)


def on_lesson(key: str) -> None:
    fresh, choice = _reported(W_LESSON, key)
    if not fresh or choice == UPLOADED or choice is None:
        return
    set_view(current_view().with_(lesson=choice, upload=None, engine={}, edits=(), step=0, block=None))


def on_engine(name: str, key: str) -> None:
    fresh, value = _reported(name, key)
    if not fresh:
        return
    view = current_view()
    try:
        base = base_scenario(view)
    except BadInput as e:
        add_error(str(e))
        return
    ekey = ENGINE_WIDGETS[name]
    if ekey in ("block_size", "num_blocks"):
        value = int(value)
    if ekey == "hash_seed":
        value = str(value).strip()
    engine = dict(view.engine)
    if value == getattr(base.engine, ekey):
        engine.pop(ekey, None)
    else:
        engine[ekey] = value
    set_view(view.with_(engine=engine))


def on_presenter(key: str | None = None, value: bool | None = None) -> None:
    if key is not None:
        fresh, value = _reported(W_PRESENTER, key)
        if not fresh:
            return
    set_view(current_view().with_(presenter=bool(value)))


def on_request(key: str) -> None:
    fresh, value = _reported(W_REQUEST, key)
    if fresh:
        st.session_state[K_REQUEST] = value


def new_seed() -> None:
    view = current_view()
    from explorer.scenario.spec import EngineConfig

    set_view(view.with_(drawn_seed=EngineConfig(hash_algo="xxhash").resolve_seed()))


def add_edit(step: dict[str, Any]) -> bool:
    """Append a playground step if the scenario still replays with it; else say why."""
    view = current_view()
    if len(view.edits) >= MAX_EDITS:
        add_error(f"The playground holds at most {MAX_EDITS} steps: undo or clear some first.")
        return False
    candidate = view.with_(edits=view.edits + (step,))
    try:
        sc, rep = build_view(candidate)
    except BadInput as e:
        add_error(str(e))
        return False
    if rep.error is not None:
        add_error(rep.error)
        return False
    set_view(candidate.with_(step=len(rep.trace.steps)))
    return True


def _field(name: str, what: str, default: str = "") -> str:
    return check_text((st.session_state.get(name) or default).strip(), what)


def on_arrive() -> None:
    ss = st.session_state
    try:
        rid = _field("px_p_id", "the request id")
        step: dict[str, Any] = {"op": "arrive", "id": rid}
        if ss.get("px_p_kind") == "Text":
            step["text"] = check_text(ss.get("px_p_text") or "", "the text")
        else:
            step["prompt"] = _field("px_p_spec", "the token spec")
        for key, name, what in (("px_p_lora", "lora", "the LoRA name"), ("px_p_salt", "cache_salt", "the cache_salt")):
            v = _field(key, what)
            if v:
                step[name] = v
        if ss.get("px_p_img"):
            step["mm"] = [
                {
                    "id": _field("px_p_img_id", "the image id", "img-1") or "img-1",
                    "offset": int(ss.get("px_p_img_off") or 0),
                    "length": int(ss.get("px_p_img_len") or 1),
                }
            ]
    except BadInput as e:
        add_error(str(e))
        return
    if ss.get("px_p_logprobs"):
        step["prompt_logprobs"] = True
    if add_edit(step):
        ss[K_NOTICE] = f"{rid} arrived."
        ss["px_p_id"] = ""
        ss[K_REQUEST] = rid  # the actions below now act on the new request


def act(op: str) -> None:
    ss = st.session_state
    rid = ss.get(K_REQUEST)
    if op == "reset":
        step: dict[str, Any] = {"op": "reset", "running": bool(ss.get("px_a_running"))}
    else:
        if not rid:
            add_error("Pick a live request first (arrive one above).")
            return
        step = {"op": op, "id": rid}
        if op == "admit" and int(ss.get("px_a_chunk") or 0) > 0:
            step["tokens"] = int(ss["px_a_chunk"])
        if op == "generate":
            n = int(ss.get("px_a_gen") or 1)
            if not 1 <= n <= MAX_GENERATE:
                add_error(f"Generate 1 to {MAX_GENERATE} tokens at a time.")
                return
            base = 90_000 + 1_000 * len(current_view().edits)
            step["tokens"] = f"{base}:{base + n}"
    if add_edit(step):
        ss[K_NOTICE] = f"{op} {rid or ''} added as step {current_view().step}."


def start_empty(lesson: str, notice: str, keep: tuple[str, ...] = ()) -> None:
    """Open ``lesson`` (an empty scenario) with no edits, keeping the current scenario's block
    size, pool size and hash settings and the changed engine settings named in ``keep``."""
    from explorer.ui.blank_pool import empty_pool_engine

    view = current_view()
    try:
        engine = empty_pool_engine(base_scenario(view).engine, view.engine)
    except BadInput as e:
        add_error(str(e))
        return
    engine.update({k: v for k, v in view.engine.items() if k in keep})
    set_view(view.with_(lesson=lesson, upload=None, engine=engine, edits=(), step=0, block=None))
    st.session_state[K_NOTICE] = notice


def start_empty_pool() -> None:
    """The playground on an empty pool (the blank pool scenario)."""
    from explorer.ui.blank_pool import BLANK_POOL

    start_empty(BLANK_POOL, "An empty pool: arrive a request in the playground.")


def undo() -> None:
    view = current_view()
    if not view.edits:
        return
    candidate = view.with_(edits=view.edits[:-1])
    try:
        _, rep = build_view(candidate)
    except BadInput as e:
        add_error(str(e))
        return
    set_view(candidate.with_(step=len(rep.trace.steps)))


def clear_edits() -> None:
    set_view(current_view().with_(edits=(), step=0))


def on_upload() -> None:
    f = st.session_state.get("px_w_upload")
    if f is None:
        return
    size = getattr(f, "size", None)
    limit = f"more than the upload limit of {MAX_UPLOAD_BYTES // 1024} KiB."
    if size is not None and size > MAX_UPLOAD_BYTES:
        add_error(f"{f.name}: {size:,} bytes, {limit}")
        return
    raw = f.getvalue()
    if len(raw) > MAX_UPLOAD_BYTES:
        add_error(f"{f.name}: {len(raw):,} bytes, {limit}")
        return
    name = Path(f.name).name[:120] or "upload.toml"
    candidate = current_view().with_(lesson=None, upload=(name, raw), engine={}, edits=(), step=0, block=None)
    try:
        sc, rep = build_view(candidate)
    except BadInput as e:
        add_error(str(e))
        return
    if rep.error is not None:
        add_error(rep.error)
        return
    set_view(candidate)
    st.session_state[K_NOTICE] = f"Loaded {name}: {sc.title} ({len(sc.ops)} steps)."
