"""The explorer page's widget callbacks: they run before the script, so they may set widget keys.

Each one turns a click or an edit into a new view (step, block, engine settings, playground
steps, an uploaded file); the page then replays and draws that view.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from explorer.errors import BadInput
from explorer.ui.explorer_session import (
    ENGINE_WIDGETS,
    K_NOTICE,
    UPLOADED,
    W_BLOCK,
    W_LESSON,
    W_PRESENTER,
    W_STEP,
    add_error,
    base_scenario,
    build_view,
    current_view,
    set_view,
    sync_widgets,
)
from explorer.ui.state import (
    MAX_EDITS,
    MAX_GENERATE,
    MAX_UPLOAD_BYTES,
)


def on_lesson() -> None:
    choice = st.session_state[W_LESSON]
    if choice == UPLOADED:
        return
    view = current_view().with_(lesson=choice, upload=None, engine={}, edits=(), step=0, block=None)
    set_view(view)
    sync_widgets(view, None)


def on_engine() -> None:
    view = current_view()
    try:
        base = base_scenario(view)
    except BadInput as e:
        add_error(str(e))
        return
    engine = dict(view.engine)
    for wkey, ekey in ENGINE_WIDGETS.items():
        if wkey not in st.session_state:
            continue
        value = st.session_state[wkey]
        if ekey in ("block_size", "num_blocks"):
            value = int(value)
        if ekey == "hash_seed":
            value = str(value).strip()
        if value == getattr(base.engine, ekey):
            engine.pop(ekey, None)
        else:
            engine[ekey] = value
    set_view(view.with_(engine=engine))


def on_step() -> None:
    set_view(current_view().with_(step=int(st.session_state[W_STEP])))


def go(delta: int | None = None, to: int | None = None) -> None:
    view = current_view()
    n = st.session_state.get("px_n_steps", 0)
    k = to if to is not None else view.step + (delta or 0)
    k = max(0, min(n, k))
    set_view(view.with_(step=k))
    st.session_state[W_STEP] = k


def on_block() -> None:
    v = st.session_state.get(W_BLOCK)
    set_view(current_view().with_(block=None if v is None else int(v)))


def on_block_click() -> None:
    res = st.session_state.get("px_click")
    value = getattr(res, "block", None) if res is not None else None
    if isinstance(res, dict):
        value = res.get("block")
    if isinstance(value, int) and value >= 0:
        set_view(current_view().with_(block=value))
        st.session_state[W_BLOCK] = value


def close_history() -> None:
    set_view(current_view().with_(block=None))
    st.session_state[W_BLOCK] = None


def on_presenter(value: bool | None = None) -> None:
    v = st.session_state[W_PRESENTER] if value is None else value
    set_view(current_view().with_(presenter=bool(v)))
    st.session_state[W_PRESENTER] = bool(v)


def new_seed() -> None:
    view = current_view()
    from explorer.scenario.spec import EngineConfig

    set_view(view.with_(drawn_seed=EngineConfig(hash_algo="xxhash").resolve_seed()))


def _add_edit(step: dict[str, Any]) -> bool:
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
    n = len(rep.trace.steps)
    set_view(candidate.with_(step=n))
    st.session_state[W_STEP] = n
    return True


def on_arrive() -> None:
    ss = st.session_state
    rid = (ss.get("px_p_id") or "").strip()
    step: dict[str, Any] = {"op": "arrive", "id": rid}
    if ss.get("px_p_kind") == "Text":
        step["text"] = ss.get("px_p_text") or ""
    else:
        step["prompt"] = ss.get("px_p_spec") or ""
    for key, name in (("px_p_lora", "lora"), ("px_p_salt", "cache_salt")):
        v = (ss.get(key) or "").strip()
        if v:
            step[name] = v
    if ss.get("px_p_img"):
        step["mm"] = [
            {
                "id": (ss.get("px_p_img_id") or "img-1").strip() or "img-1",
                "offset": int(ss.get("px_p_img_off") or 0),
                "length": int(ss.get("px_p_img_len") or 1),
            }
        ]
    if ss.get("px_p_logprobs"):
        step["prompt_logprobs"] = True
    if _add_edit(step):
        ss[K_NOTICE] = f"{rid} arrived."
        ss["px_p_id"] = ""
        ss["px_a_req"] = rid  # the actions below now act on the new request


def act(op: str) -> None:
    ss = st.session_state
    rid = ss.get("px_a_req")
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
    if _add_edit(step):
        ss[K_NOTICE] = f"{op} {rid or ''} added as step {current_view().step}."


def undo() -> None:
    view = current_view()
    if view.edits:
        set_view(view.with_(edits=view.edits[:-1]))
        go(to=10**9)


def clear_edits() -> None:
    set_view(current_view().with_(edits=(), step=0))
    st.session_state[W_STEP] = 0


def on_upload() -> None:
    f = st.session_state.get("px_w_upload")
    if f is None:
        return
    size = getattr(f, "size", None)
    if size is not None and size > MAX_UPLOAD_BYTES:
        add_error(f"{f.name}: {size:,} bytes, more than the upload limit of {MAX_UPLOAD_BYTES // 1024} KiB.")
        return
    raw = f.getvalue()
    if len(raw) > MAX_UPLOAD_BYTES:
        add_error(f"{f.name}: {len(raw):,} bytes, more than the upload limit of {MAX_UPLOAD_BYTES // 1024} KiB.")
        return
    name = Path(f.name).name[:120] or "upload.toml"
    candidate = current_view().with_(lesson=None, upload=(name, raw), engine={}, edits=(), step=0, block=None)
    try:
        sc, rep = build_view(candidate)
    except BadInput as e:
        add_error(str(e))
        return
    except Exception as e:
        add_error(f"{name}: cannot be read as a scenario ({type(e).__name__}).")
        return
    if rep.error is not None:
        add_error(rep.error)
        return
    set_view(candidate)
    sync_widgets(candidate, sc)
    st.session_state[K_NOTICE] = f"Loaded {name}: {sc.title} ({len(sc.ops)} steps)."
