"""The explorer page's sidebar: the scenario picker, engine settings, the playground, files and
presenter mode."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import streamlit as st

from explorer.scenario.spec import EngineConfig, Scenario
from explorer.scenario.trace import Trace
from explorer.ui import bound
from explorer.ui.blank_pool import BLANK_POOL, BLANK_POOL_TITLE, continues_from
from explorer.ui.explorer_callbacks import (
    act,
    clear_edits,
    new_seed,
    on_arrive,
    on_engine,
    on_lesson,
    on_presenter,
    on_request,
    on_upload,
    start_empty_pool,
    undo,
)
from explorer.ui.explorer_session import (
    ENGINE_WIDGETS,
    K_REQUEST,
    UPLOADED,
    W_ALGO,
    W_BS,
    W_LESSON,
    W_NB,
    W_PC,
    W_PRESENTER,
    W_REQUEST,
    W_SEED,
)
from explorer.ui.lesson_files import lesson_title
from explorer.ui.state import (
    MAX_GENERATE,
    MAX_UPLOAD_BYTES,
    UI_LIMITS,
    ViewState,
    build,
    list_lessons,
    live_requests,
    next_request_id,
    session_json,
    session_toml,
)
from explorer.ui.step_playground import settings_widgets, start_empty_engine, step_playground
from explorer.ui.step_settings import BLANK_ENGINE, BLANK_ENGINE_TITLE
from explorer.ui.text import caption, clean


def sidebar(view: ViewState, base: Scenario | None, sc: Scenario | None, trace: Trace | None) -> None:
    sb = st.sidebar
    lessons = list_lessons()
    options = ([UPLOADED] if view.upload is not None else []) + lessons + [BLANK_POOL, BLANK_ENGINE]
    shown = UPLOADED if view.upload is not None else view.lesson
    if options:
        k = bound.key(W_LESSON, shown if shown in options else options[0])
        sb.selectbox(
            "Lesson / scenario",
            options,
            index=options.index(shown) if shown in options else 0,
            key=k,
            on_change=on_lesson,
            args=(k,),
            format_func=lambda o: _option_title(o, view),
            help="The lessons' scenarios (lessons/*.toml), an empty pool to try requests on, or the file you uploaded.",
        )

    eng = base.engine if base is not None else None
    with sb.expander("Engine settings", expanded=False, key="px_x_engine"):
        if eng is not None:
            _engine_widgets(view, eng)
            if base is not None and base.sched is not None:
                settings_widgets(view, base)
            if trace is not None:
                if trace.hash_seed is None:
                    st.caption("Prefix caching is off: no hasher, no seed.")
                elif (
                    sc is not None
                    and view.drawn_seed
                    and sc.engine.hash_seed == view.drawn_seed
                    and not view.engine.get("hash_seed")
                ):
                    caption(
                        f"xxhash without a seed: vLLM draws a random one. This session drew {view.drawn_seed[:16]}... and keeps it (and puts it in the link), so the hashes stay put."
                    )
                    st.button("Draw a new seed", on_click=new_seed, key="px_b_newseed")
                else:
                    caption(f"Seed: {trace.hash_seed[:40]}")
            if view.engine:
                caption("Changed: " + ", ".join(f"{k} = {v!r}" for k, v in view.engine.items()))

    blank = view.lesson in (BLANK_POOL, BLANK_ENGINE)
    with sb.expander("Playground", expanded=bool(view.edits) or blank, key="px_x_playground"):
        if sc is not None and trace is not None and sc.sched is None:
            caption(continues_from(trace, sc.title, len(base.ops) if base is not None else len(trace.steps)))
        if view.lesson != BLANK_POOL or view.edits:
            st.button("Start from an empty pool", on_click=start_empty_pool, key="px_b_empty_pool", width="stretch")
        if view.lesson != BLANK_ENGINE or view.edits:
            st.button(
                "Start from an empty engine (engine steps)",
                on_click=start_empty_engine,
                key="px_b_empty_engine",
                width="stretch",
            )
        if sc is not None and sc.sched is not None:
            step_playground(view, sc)
            _undo_buttons(view)
        else:
            _playground(view, sc, trace)

    with sb.expander("Files", expanded=False, key="px_x_files"):
        st.file_uploader(
            "Upload a scenario (.toml)",
            type=["toml"],
            key="px_w_upload",
            on_change=on_upload,
            max_upload_size=1,
            help=f"At most {MAX_UPLOAD_BYTES // 1024} KiB.",
        )
        if sc is not None and trace is not None:
            stem = Path(view.upload[0]).stem if view.upload else (view.lesson or "session")
            toml_data, json_data = _download_data(view, sc, trace)
            st.download_button(
                "Download the session as a scenario (TOML)",
                data=toml_data,
                file_name=f"{stem}-session.toml",
                mime="application/toml",
                key="px_dl_toml",
                on_click="ignore",
            )
            st.download_button(
                "Download the replay (JSON)",
                data=json_data,
                file_name=f"{stem}-replay.json",
                mime="application/json",
                key="px_dl_json",
                on_click="ignore",
            )

    k = bound.key(W_PRESENTER, view.presenter)
    sb.toggle(
        "Presenter mode",
        value=view.presenter,
        key=k,
        on_change=on_presenter,
        args=(k,),
        help="Hides the sidebar and enlarges the panels for a projector.",
    )


def _option_title(option: str, view: ViewState) -> str:
    """A picker entry as the lesson's title (its narrative's first line), the blank pool's, or
    the uploaded file's name."""
    if option == UPLOADED and view.upload:
        return clean(f"Uploaded: {view.upload[0]}", 200)
    if option == BLANK_POOL:
        return f"{BLANK_POOL_TITLE} (an empty pool for your own requests)"
    if option == BLANK_ENGINE:
        return f"{BLANK_ENGINE_TITLE} (an empty engine: scheduler steps)"
    return lesson_title(option)


def _engine_widgets(view: ViewState, eng: EngineConfig) -> None:
    from explorer.core.hashing import HASH_ALGOS

    def shown(wkey: str) -> Any:
        ekey = ENGINE_WIDGETS[wkey]
        return view.engine.get(ekey, getattr(eng, ekey))

    def key(wkey: str) -> dict:
        k = bound.key(wkey, shown(wkey))
        return {"key": k, "on_change": on_engine, "args": (wkey, k)}

    bs, nb = shown(W_BS), shown(W_NB)
    st.number_input("Block size (tokens)", min_value=1, max_value=max(bs, 1024), value=bs, step=1, **key(W_BS))
    st.number_input(
        "Number of blocks (block 0 is the null block)",
        min_value=2,
        max_value=max(nb, UI_LIMITS.max_blocks),
        value=nb,
        step=1,
        **key(W_NB),
    )
    algo = shown(W_ALGO)
    st.selectbox("Hash algorithm", HASH_ALGOS, index=HASH_ALGOS.index(algo) if algo in HASH_ALGOS else 0, **key(W_ALGO))
    st.text_input(
        "Hash seed (PYTHONHASHSEED)",
        value=shown(W_SEED),
        placeholder="empty: vLLM's default",
        max_chars=256,
        **key(W_SEED),
    )
    st.toggle("Prefix caching", value=bool(shown(W_PC)), **key(W_PC))


def _download_data(view: ViewState, sc: Scenario, trace: Trace) -> tuple[Callable[[], str], Callable[[], str]]:
    """The downloads' data, made when asked for. They hold the replay weakly: Streamlit keeps a
    closed tab's session (and these functions) for a while in case it reconnects, and they must
    not keep its replay alive past the session's cache; a replay gone by then is made again."""
    sc_ref, trace_ref = weakref.ref(sc), weakref.ref(trace)

    def toml_data() -> str:
        return session_toml(sc_ref() or build(view)[0])

    def json_data() -> str:
        return session_json(trace_ref() or build(view)[1].trace)

    return toml_data, json_data


def _playground(view: ViewState, sc: Scenario | None, trace: Trace | None) -> None:
    from explorer.tokens import tokenizer_available

    has_tok = tokenizer_available()
    ss = st.session_state
    if sc is not None and not ss.get("px_p_id"):
        ss["px_p_id"] = next_request_id(sc)
    st.markdown("**A new request**")
    kinds = ["Text", "Token spec"] if has_tok else ["Token spec"]
    if ss.get("px_p_kind") not in kinds:
        ss["px_p_kind"] = kinds[0]
    st.radio("Prompt as", kinds, key="px_p_kind", horizontal=True)
    if not has_tok:
        st.caption(
            "Typed text needs SmolLM2-135M's tokenizer, whose model file is not installed here: use a token spec "
            "like `0:480, 1000:1100` (ranges a:b, repeats x*n)."
        )
    st.checkbox("Add an image placeholder", key="px_p_img")
    with st.form("px_arrive", clear_on_submit=False, border=False):
        st.text_input("Request id", key="px_p_id", max_chars=40)
        if ss.get("px_p_kind") == "Text":
            st.text_area(
                "Text (SmolLM2-135M tokens)",
                key="px_p_text",
                max_chars=20_000,
                height=90,
                placeholder="You are a helpful assistant...",
            )
        else:
            st.text_input(
                "Token spec",
                key="px_p_spec",
                placeholder="0:480, 7*20",
                max_chars=2_000,
                help="Comma-separated parts: a:b is the range a..b-1, x*n repeats x n times, a bare number is itself.",
            )
        c1, c2 = st.columns(2)
        c1.text_input("LoRA name", key="px_p_lora", max_chars=64)
        c2.text_input("cache_salt", key="px_p_salt", max_chars=64)
        if ss.get("px_p_img"):
            c1, c2, c3 = st.columns(3)
            c1.text_input("image id", key="px_p_img_id", placeholder="img-1", max_chars=40)
            c2.number_input("offset", key="px_p_img_off", min_value=0, step=1, value=0)
            c3.number_input("length", key="px_p_img_len", min_value=1, step=1, value=16)
        st.checkbox("prompt_logprobs (skips the lookup)", key="px_p_logprobs")
        st.form_submit_button("Arrive", on_click=on_arrive, type="primary")
    st.markdown("**Act on a request**")
    live = live_requests(trace) if trace is not None else []
    if ss.get(K_REQUEST) not in live:
        ss[K_REQUEST] = live[-1] if live else None
    k = bound.key(W_REQUEST, ss[K_REQUEST])
    st.selectbox(
        "Request",
        live,
        index=live.index(ss[K_REQUEST]) if live else None,
        key=k,
        on_change=on_request,
        args=(k,),
        format_func=lambda r: clean(r, 80),
        placeholder="no live request",
    )
    c1, c2 = st.columns(2)
    c1.number_input("admit: chunk (0 = all)", key="px_a_chunk", min_value=0, step=16, value=0)
    c2.number_input("generate: tokens", key="px_a_gen", min_value=1, max_value=MAX_GENERATE, step=1, value=16)
    cols = st.columns(2)
    cols[0].button("Admit", on_click=act, args=("admit",), key="px_b_admit", width="stretch")
    cols[1].button("Generate", on_click=act, args=("generate",), key="px_b_generate", width="stretch")
    cols = st.columns(2)
    cols[0].button("Finish", on_click=act, args=("finish",), key="px_b_finish", width="stretch")
    cols[1].button("Preempt", on_click=act, args=("preempt",), key="px_b_preempt", width="stretch")
    st.checkbox(
        "reset preempts running requests (running = true)",
        key="px_a_running",
        help="Preempt every running request first, last started first, as vLLM's scheduler does on a reset.",
    )
    st.button("Reset the prefix cache", on_click=act, args=("reset",), key="px_b_reset", width="stretch")
    _undo_buttons(view)


def _undo_buttons(view: ViewState) -> None:
    if view.edits:
        st.caption(f"{len(view.edits)} playground step(s), appended after the scenario's own.")
        c1, c2 = st.columns(2)
        c1.button("Undo last", on_click=undo, key="px_b_undo", width="stretch")
        c2.button("Clear all", on_click=clear_edits, key="px_b_clear", width="stretch")
