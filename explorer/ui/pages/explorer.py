"""The explorer page: a scenario (plus the user's edits) replayed to step k and drawn.

Top to bottom: the stepper, the NOW line (op, vLLM function with its 0.31.0 file:line, what
happened in numbers), the six phase panels of this step (hashing, lookup, touch + allocate,
caching, free, eviction; only those that happened), then the state after the step, always
visible: the block pool, the free queue, the hash map, the block tables, the KV event log and
the metrics. The sidebar holds the scenario picker, engine settings, the playground, files and
presenter mode. The whole view lives in the URL, so a link opens the same step.

The page never touches an engine: every rerun replays (cached per session) and renders a
frozen snapshot.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import streamlit as st

from explorer.errors import BadInput
from explorer.scenario import Scenario
from explorer.trace import Trace
from explorer.ui import explain
from explorer.ui.history import block_history, changed_blocks
from explorer.ui.state import (
    DEFAULT_LESSON,
    MAX_EDITS,
    MAX_GENERATE,
    MAX_UPLOAD_BYTES,
    UI_LIMITS,
    Replayed,
    ViewState,
    base_bytes,
    effective_scenario,
    from_query,
    list_lessons,
    live_requests,
    needs_drawn_seed,
    next_request_id,
    parse_base,
    replay_key,
    replay_until_error,
    session_json,
    session_toml,
    to_query,
)
from explorer.ui.style import page_css
from explorer.viz import html as vh
from explorer.viz.figures import heat_strip

SPEEDS = {"0.5x": 3.0, "1x": 1.5, "2x": 0.75, "4x": 0.35}
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


def _view() -> ViewState:
    return st.session_state[K_VIEW]


def _set_view(view: ViewState) -> None:
    st.session_state[K_VIEW] = view


def _error(msg: str) -> None:
    st.session_state.setdefault(K_ERRORS, []).append(msg)


def _init_session() -> None:
    if K_VIEW in st.session_state:
        return
    try:
        params = {k: st.query_params.get(k) for k in st.query_params}
    except Exception:
        params = {}
    view, errors = from_query(params)
    for e in errors:
        _error(e + " It was ignored.")
    _set_view(view)
    st.session_state[K_CACHE] = OrderedDict()
    _sync_widgets(view, None)


def _sync_widgets(view: ViewState, scenario: Scenario | None) -> None:
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


def _base_scenario(view: ViewState) -> Scenario:
    source, raw = base_bytes(view)
    return _cached("base:" + replay_key(source, raw, {}, (), None), lambda: parse_base(source, raw))


def _build(view: ViewState) -> tuple[Scenario, Replayed]:
    """The view's scenario and its replay (cached per scenario, settings, edits and seed)."""
    source, raw = base_bytes(view)
    key = replay_key(source, raw, view.engine, view.edits, view.drawn_seed)

    def make():
        base = _base_scenario(view)
        sc = effective_scenario(base, view.engine, view.edits, view.drawn_seed)
        return sc, replay_until_error(sc)

    return _cached("trace:" + key, make)


def _ensure_seed(view: ViewState) -> ViewState:
    """xxhash without a seed draws one, once per browser session (kept in the view and URL)."""
    if view.drawn_seed:
        return view
    try:
        base = _base_scenario(view)
        probe = base.with_engine(**view.engine) if view.engine else base
    except BadInput:
        return view
    if needs_drawn_seed(probe):
        view = view.with_(drawn_seed=probe.engine.resolve_seed())
        _set_view(view)
    return view


# ---- callbacks (run before the script, so they may set widget keys) ---------------------------


def _on_lesson() -> None:
    choice = st.session_state[W_LESSON]
    if choice == UPLOADED:
        return
    view = _view().with_(lesson=choice, upload=None, engine={}, edits=(), step=0, block=None)
    _set_view(view)
    _sync_widgets(view, None)


def _on_engine() -> None:
    view = _view()
    try:
        base = _base_scenario(view)
    except BadInput as e:
        _error(str(e))
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
    _set_view(view.with_(engine=engine))


def _on_step() -> None:
    _set_view(_view().with_(step=int(st.session_state[W_STEP])))


def _go(delta: int | None = None, to: int | None = None) -> None:
    view = _view()
    n = st.session_state.get("px_n_steps", 0)
    k = to if to is not None else view.step + (delta or 0)
    k = max(0, min(n, k))
    _set_view(view.with_(step=k))
    st.session_state[W_STEP] = k


def _on_block() -> None:
    v = st.session_state.get(W_BLOCK)
    _set_view(_view().with_(block=None if v is None else int(v)))


def _on_block_click() -> None:
    res = st.session_state.get("px_click")
    value = getattr(res, "block", None) if res is not None else None
    if isinstance(res, dict):
        value = res.get("block")
    if isinstance(value, int) and value >= 0:
        _set_view(_view().with_(block=value))
        st.session_state[W_BLOCK] = value


def _close_history() -> None:
    _set_view(_view().with_(block=None))
    st.session_state[W_BLOCK] = None


def _on_presenter(value: bool | None = None) -> None:
    v = st.session_state[W_PRESENTER] if value is None else value
    _set_view(_view().with_(presenter=bool(v)))
    st.session_state[W_PRESENTER] = bool(v)


def _new_seed() -> None:
    view = _view()
    from explorer.scenario import EngineConfig

    _set_view(view.with_(drawn_seed=EngineConfig(hash_algo="xxhash").resolve_seed()))


def _add_edit(step: dict[str, Any]) -> bool:
    """Append a playground step if the scenario still replays with it; else say why."""
    view = _view()
    if len(view.edits) >= MAX_EDITS:
        _error(f"The playground holds at most {MAX_EDITS} steps: undo or clear some first.")
        return False
    candidate = view.with_(edits=view.edits + (step,))
    try:
        sc, rep = _build(candidate)
    except BadInput as e:
        _error(str(e))
        return False
    if rep.error is not None:
        _error(rep.error)
        return False
    n = len(rep.trace.steps)
    _set_view(candidate.with_(step=n))
    st.session_state[W_STEP] = n
    return True


def _on_arrive() -> None:
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


def _act(op: str) -> None:
    ss = st.session_state
    rid = ss.get("px_a_req")
    if op == "reset":
        step: dict[str, Any] = {"op": "reset", "running": bool(ss.get("px_a_running"))}
    else:
        if not rid:
            _error("Pick a live request first (arrive one above).")
            return
        step = {"op": op, "id": rid}
        if op == "admit" and int(ss.get("px_a_chunk") or 0) > 0:
            step["tokens"] = int(ss["px_a_chunk"])
        if op == "generate":
            n = int(ss.get("px_a_gen") or 1)
            if not 1 <= n <= MAX_GENERATE:
                _error(f"Generate 1 to {MAX_GENERATE} tokens at a time.")
                return
            base = 90_000 + 1_000 * len(_view().edits)
            step["tokens"] = f"{base}:{base + n}"
    if _add_edit(step):
        ss[K_NOTICE] = f"{op} {rid or ''} added as step {_view().step}."


def _undo() -> None:
    view = _view()
    if view.edits:
        _set_view(view.with_(edits=view.edits[:-1]))
        _go(to=10**9)


def _clear_edits() -> None:
    _set_view(_view().with_(edits=(), step=0))
    st.session_state[W_STEP] = 0


def _on_upload() -> None:
    f = st.session_state.get("px_w_upload")
    if f is None:
        return
    size = getattr(f, "size", None)
    if size is not None and size > MAX_UPLOAD_BYTES:
        _error(f"{f.name}: {size:,} bytes, more than the upload limit of {MAX_UPLOAD_BYTES // 1024} KiB.")
        return
    raw = f.getvalue()
    if len(raw) > MAX_UPLOAD_BYTES:
        _error(f"{f.name}: {len(raw):,} bytes, more than the upload limit of {MAX_UPLOAD_BYTES // 1024} KiB.")
        return
    name = Path(f.name).name[:120] or "upload.toml"
    candidate = _view().with_(lesson=None, upload=(name, raw), engine={}, edits=(), step=0, block=None)
    try:
        sc, rep = _build(candidate)
    except BadInput as e:
        _error(str(e))
        return
    except Exception as e:
        _error(f"{name}: cannot be read as a scenario ({type(e).__name__}).")
        return
    if rep.error is not None:
        _error(rep.error)
        return
    _set_view(candidate)
    _sync_widgets(candidate, sc)
    st.session_state[K_NOTICE] = f"Loaded {name}: {sc.title} ({len(sc.ops)} steps)."


# ---- drawing ----------------------------------------------------------------------------------


@st.cache_resource
def _click_component():
    """A script-only component: a click on any block chip opens that block's history."""
    js = """
export default function (component) {
  const { setTriggerValue } = component;
  const onClick = (e) => {
    const el = e.target && e.target.closest ? e.target.closest('[data-px-block]') : null;
    if (!el) return;
    const id = parseInt(el.getAttribute('data-px-block'), 10);
    if (!Number.isNaN(id)) setTriggerValue('block', id);
  };
  document.addEventListener('click', onClick, true);
  document.body.setAttribute('data-px-click-ready', '1');
  return () => document.removeEventListener('click', onClick, true);
}
"""
    return st.components.v2.component("px_block_click", js=js)


def _sidebar(view: ViewState, base: Scenario | None, sc: Scenario | None, trace: Trace | None) -> None:
    sb = st.sidebar
    lessons = list_lessons()
    options = ([UPLOADED] if view.upload is not None else []) + lessons
    if st.session_state.get(W_LESSON) not in options:
        st.session_state[W_LESSON] = options[0] if options else None
    sb.selectbox(
        "Lesson / scenario",
        options,
        key=W_LESSON,
        on_change=_on_lesson,
        format_func=lambda o: f"Uploaded: {view.upload[0]}" if o == UPLOADED and view.upload else o,
        help="Scenarios from lessons/*.toml, or the file you uploaded.",
    )

    eng = base.engine if base is not None else None
    with sb.expander("Engine settings", expanded=False, key="px_x_engine"):
        if eng is not None:
            for wkey, ekey in ENGINE_WIDGETS.items():
                st.session_state.setdefault(wkey, view.engine.get(ekey, getattr(eng, ekey)))
            st.number_input("Block size (tokens)", min_value=1, max_value=1024, step=1, key=W_BS, on_change=_on_engine)
            st.number_input(
                "Number of blocks (block 0 is the null block)",
                min_value=2,
                max_value=UI_LIMITS.max_blocks,
                step=1,
                key=W_NB,
                on_change=_on_engine,
            )
            from explorer.core.hashing import HASH_ALGOS

            st.selectbox("Hash algorithm", HASH_ALGOS, key=W_ALGO, on_change=_on_engine)
            st.text_input(
                "Hash seed (PYTHONHASHSEED)",
                key=W_SEED,
                on_change=_on_engine,
                placeholder="empty: vLLM's default",
                max_chars=256,
            )
            st.toggle("Prefix caching", key=W_PC, on_change=_on_engine)
            if trace is not None:
                if trace.hash_seed is None:
                    st.caption("Prefix caching is off: no hasher, no seed.")
                elif (
                    sc is not None
                    and view.drawn_seed
                    and sc.engine.hash_seed == view.drawn_seed
                    and not view.engine.get("hash_seed")
                ):
                    st.caption(
                        f"xxhash without a seed: vLLM draws a random one. This session drew `{view.drawn_seed[:16]}...` and keeps it (and puts it in the link), so the hashes stay put."
                    )
                    st.button("Draw a new seed", on_click=_new_seed, key="px_b_newseed")
                else:
                    st.caption(f"Seed: `{trace.hash_seed[:40]}`")
            if view.engine:
                st.caption("Changed: " + ", ".join(f"{k} = {v!r}" for k, v in view.engine.items()))

    with sb.expander("Playground", expanded=bool(view.edits), key="px_x_playground"):
        _playground(view, sc, trace)

    with sb.expander("Files", expanded=False, key="px_x_files"):
        st.file_uploader(
            "Upload a scenario (.toml)",
            type=["toml"],
            key="px_w_upload",
            on_change=_on_upload,
            max_upload_size=1,
            help=f"At most {MAX_UPLOAD_BYTES // 1024} KiB.",
        )
        if sc is not None and trace is not None:
            stem = Path(view.upload[0]).stem if view.upload else (view.lesson or "session")
            st.download_button(
                "Download the session as a scenario (TOML)",
                data=lambda: session_toml(sc),
                file_name=f"{stem}-session.toml",
                mime="application/toml",
                key="px_dl_toml",
                on_click="ignore",
            )
            st.download_button(
                "Download the replay (JSON)",
                data=lambda: session_json(trace),
                file_name=f"{stem}-replay.json",
                mime="application/json",
                key="px_dl_json",
                on_click="ignore",
            )

    sb.toggle(
        "Presenter mode",
        key=W_PRESENTER,
        on_change=_on_presenter,
        help="Hides the sidebar and enlarges the panels for a projector.",
    )


def _playground(view: ViewState, sc: Scenario | None, trace: Trace | None) -> None:
    try:
        from explorer.tokens import tokenizer_available

        has_tok = tokenizer_available()
    except Exception:
        has_tok = False
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
        st.form_submit_button("Arrive", on_click=_on_arrive, type="primary")
    st.markdown("**Act on a request**")
    live = live_requests(trace) if trace is not None else []
    if ss.get("px_a_req") not in live:
        ss["px_a_req"] = live[-1] if live else None
    st.selectbox("Request", live, key="px_a_req", placeholder="no live request")
    c1, c2 = st.columns(2)
    c1.number_input("admit: chunk (0 = all)", key="px_a_chunk", min_value=0, step=16, value=0)
    c2.number_input("generate: tokens", key="px_a_gen", min_value=1, max_value=MAX_GENERATE, step=1, value=16)
    cols = st.columns(2)
    cols[0].button("Admit", on_click=_act, args=("admit",), key="px_b_admit", width="stretch")
    cols[1].button("Generate", on_click=_act, args=("generate",), key="px_b_generate", width="stretch")
    cols = st.columns(2)
    cols[0].button("Finish", on_click=_act, args=("finish",), key="px_b_finish", width="stretch")
    cols[1].button("Preempt", on_click=_act, args=("preempt",), key="px_b_preempt", width="stretch")
    st.checkbox(
        "reset preempts running requests (running = true)",
        key="px_a_running",
        help="Preempt every running request first, last started first, as vLLM's scheduler does on a reset.",
    )
    st.button("Reset the prefix cache", on_click=_act, args=("reset",), key="px_b_reset", width="stretch")
    if view.edits:
        st.caption(f"{len(view.edits)} playground step(s), appended after the scenario's own.")
        c1, c2 = st.columns(2)
        c1.button("Undo last", on_click=_undo, key="px_b_undo", width="stretch")
        c2.button("Clear all", on_click=_clear_edits, key="px_b_clear", width="stretch")


def _stepper(view: ViewState, n: int, presenter: bool) -> None:
    cols = st.columns([0.6, 0.75, 5.9, 1.6, 0.6, 1.2, 1.1], vertical_alignment="bottom")
    cols[0].button(
        "",
        icon=":material/first_page:",
        key="px_b_first",
        on_click=_go,
        kwargs={"to": 0},
        help="First: before step 1",
        disabled=view.step == 0,
        width="stretch",
    )
    cols[1].button(
        "",
        icon=":material/chevron_left:",
        key="px_b_back",
        on_click=_go,
        kwargs={"delta": -1},
        help="Back one step (Left arrow)",
        shortcut="Left",
        disabled=view.step == 0,
        width="stretch",
    )
    if n > 0:
        cols[2].slider(
            f"Step {view.step} of {n}",
            min_value=0,
            max_value=n,
            key=W_STEP,
            on_change=_on_step,
            help="0 = before the first step. Keys: Left and Right arrows.",
        )
    else:
        cols[2].caption("This scenario has no steps yet: add some in the playground.")
    cols[3].button(
        "Next",
        icon=":material/chevron_right:",
        icon_position="right",
        key="px_b_next",
        on_click=_go,
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
        on_click=_go,
        kwargs={"to": n},
        help="Last step",
        disabled=view.step >= n,
        width="stretch",
    )
    cols[5].toggle("Play", key=W_PLAY, disabled=n == 0)
    cols[6].selectbox("Speed", list(SPEEDS), index=1, key=W_SPEED, label_visibility="collapsed")


def _autoplay(n: int) -> None:
    ss = st.session_state
    if not ss.get(W_PLAY):
        return
    if _view().step >= n:
        ss["px_stop_play"] = True
        return
    interval = SPEEDS.get(ss.get(W_SPEED) or "1x", 1.5)
    ss["px_rendered_at"] = time.monotonic()

    @st.fragment(run_every=interval)
    def _tick() -> None:
        if time.monotonic() - st.session_state.get("px_rendered_at", 0.0) < interval * 0.8:
            return  # this is the page's own run, not a tick
        view = _view()
        last = st.session_state.get("px_n_steps", 0)
        if view.step < last:
            _set_view(view.with_(step=view.step + 1))
            st.session_state["px_pending_step"] = view.step + 1
            if view.step + 1 >= last:
                st.session_state["px_stop_play"] = True  # the toggle switches off at the last step
            st.rerun(scope="app")

    _tick()


def _refs_line(refs) -> str:
    return " ".join(
        f"<span class='px-ref'>{vh._e(r.func)} <span class='px-loc'>{vh._e(r.loc)}</span></span>" for r in refs
    )


def _now_box(trace: Trace, k: int, base_ops: int) -> None:
    now = explain.now(trace, k)
    n = len(trace.steps)
    origin = ' <span class="px-tag">playground</span>' if k > base_ops else ""
    extra = ""
    failures: tuple[str, ...] = ()
    if k > 0:
        step = trace.steps[k - 1]
        if step.op.note:
            extra += f'<div class="px-note" data-px-note="1"><b>Lesson:</b> {vh._e(step.op.note)}</div>'
        if step.op.expect:
            failures = step.expect_failures
            if not failures:
                extra += (
                    '<div class="px-checks" data-px-checks="ok">&#10003; lesson checks hold: '
                    + vh._e(", ".join(f"{key} = {_short(v)}" for key, v in step.op.expect.items()))
                    + "</div>"
                )
    st.html(
        f'<div class="px-now" data-px-now="{k}"><div class="px-headline">Step {k} of {n}: {vh._e(now.headline)}{origin}</div>'
        f'<div class="px-refs">{_refs_line(now.refs)}</div><div class="px-now-text">{vh._e(now.text)}</div>{extra}</div>'
    )
    for f in failures:
        st.warning(f"Lesson check failed: {f}")


def _short(v: object) -> str:
    s = json.dumps(v) if not isinstance(v, str) else v
    return s if len(s) <= 40 else s[:37] + "..."


def _panels(trace: Trace, k: int, changed: set[int], selected: int | None) -> None:
    panels = explain.panels(trace, k)
    st.html(vh.phase_strip_html({p.key: p.summary for p in panels}, explain.PANEL_TITLES))
    if k == 0:
        return
    step = trace.steps[k - 1]
    before, after = trace.snapshot_at(k - 1), trace.snapshot_at(k)
    eng = trace.scenario.engine
    bs = eng.block_size
    ints = eng.int_block_hashes
    for p in panels:
        with st.container(border=True, key=f"px_panel_{p.key}"):
            st.html(
                f'<div class="px-panel-head" data-px-panel="{p.key}">{p.number} · {vh._e(p.title)}</div>'
                f'<div class="px-refs">{_refs_line(p.refs)}</div>'
            )
            st.markdown(p.text)
            body = ""
            if p.key == "hashing" and eng.enable_prefix_caching:
                req = after.request(step.op.id) or before.request(step.op.id)
                n = len(step.op.prompt) if step.op.op == "arrive" else (req.num_tokens if req else 0)
                parent = None
                if step.hashed and step.hashed[0].index > 0 and req is not None:
                    parent = req.block_hashes[step.hashed[0].index - 1]
                st.html(vh.hashing_html(step, trace.none_hash, parent, n, bs, ints, _snippets(step)))
                if len(step.hashed) > 1:
                    with st.expander(f"All {len(step.hashed):,} digests in full"):
                        st.html(vh.digest_table_html(step.hashed, ints))
            elif p.key == "lookup":
                body = vh.lookup_html(step, step.lookup.num_tokens // bs, bs)
            elif p.key == "allocate":
                body = vh.allocate_html(step, before, after, changed, selected)
            elif p.key == "caching":
                body = vh.caching_html(step, after, changed, selected, ints)
            elif p.key == "free":
                body = vh.free_html(step, after, changed, selected)
            elif p.key == "eviction":
                body = vh.eviction_html(step, before, after, changed, selected, ints)
            if body:
                st.html(body)


def _snippets(step) -> dict[int, str]:
    """Token text of the first blocks of a typed prompt (shown on the hash cards)."""
    if step.op.op != "arrive" or not step.op.text or not step.hashed:
        return {}
    try:
        from explorer.tokens import token_strings

        out = {}
        for hb in list(step.hashed[:20]) + list(step.hashed[-4:]):
            out[hb.index] = "".join(token_strings(step.op.prompt[hb.start : hb.end]))
        return out
    except Exception:
        return {}


def _state_views(trace: Trace, k: int, changed: set[int], selected: int | None) -> None:
    snap = trace.snapshot_at(k)
    prev = trace.snapshot_at(k - 1) if k > 0 else None
    step = trace.steps[k - 1] if k > 0 else None
    n = len(snap.blocks)
    st.subheader(f"Block pool after step {k}" if k else "Block pool before step 1", anchor="pool")
    st.html(vh.legend_html() + vh.pool_summary_html(snap))
    if vh.grid_mode(n) == "strip":
        ev = st.plotly_chart(
            heat_strip(snap, changed, selected),
            key="px_strip",
            on_select="rerun",
            selection_mode="points",
            config={"displayModeBar": False},
        )
        pts = getattr(getattr(ev, "selection", None), "points", None) or []
        if pts:
            cd = pts[0].get("customdata")
            if isinstance(cd, int) and cd != selected:
                selected = cd
                _set_view(_view().with_(block=cd))
        st.caption(
            "One cell per block, 100 blocks a row, coloured by state; an open square marks a block this step changed. "
            "Hover for id, ref_cnt and hash; click a marked block (or type its id below) for its history."
        )
        if changed:
            from explorer.scenario_cli import id_ranges

            ids = sorted(changed)
            chips = "".join(vh.snap_chip(snap, b, changed, selected, "full") for b in ids) if len(ids) <= 60 else ""
            st.html(
                f'<div class="px-row" data-px-changed="{len(ids)}"><span class="px-rowlabel">changed by this step ({len(ids):,} blocks):</span>'
                + (chips or f"<code>{vh._e(id_ranges(ids)[1:-1])}</code>")
                + "</div>"
            )
    else:
        st.html(vh.pool_grid_html(snap, changed, selected))
    c1, c2 = st.columns([1, 3], vertical_alignment="bottom")
    c1.number_input(
        "Block history: block id",
        min_value=0,
        max_value=n - 1,
        step=1,
        key=W_BLOCK,
        on_change=_on_block,
        placeholder="click a block",
        help="Click any block chip on the page, or type its id.",
    )
    if selected is not None and 0 <= selected < n:
        with st.container(border=True, key="px_history"):
            hc1, hc2 = st.columns([6, 1])
            hc1.markdown(f"**History of block {selected}** (every step of the scenario; later steps greyed)")
            hc2.button("Close", on_click=_close_history, key="px_b_close_hist")
            st.html(vh.history_html(block_history(trace, selected), k))

    st.subheader("Free queue", anchor="free-queue")
    st.caption(
        f"{snap.num_free_blocks:,} free blocks. get_new_blocks pops from the head; free_blocks puts unhashed blocks at the head and hashed ones at the tail."
    )
    st.html(vh.free_queue_html(snap, changed, selected))

    c1, c2 = st.columns([3, 2])
    with c1:
        st.subheader("Requests and their block tables", anchor="requests")
        st.html(vh.requests_html(snap, changed, selected))
    with c2:
        st.subheader("Metrics", anchor="metrics")
        _metrics(trace, k)

    c1, c2 = st.columns(2)
    with c1:
        st.subheader("Hash map", anchor="hash-map")
        st.caption(f"{len(snap.cached):,} hashes cached. One hash may map to several blocks: vLLM keeps duplicates.")
        st.html(vh.hash_map_html(snap, step, prev, selected, int_hashes=trace.scenario.engine.int_block_hashes))
    with c2:
        st.subheader("KV event log", anchor="events")
        st.html(vh.event_log_html(trace, k))
        if step is not None and step.events:
            with st.expander(f"This step's {len(step.events)} event(s) as vLLM's msgpack decodes them"):
                from explorer.core.events import event_to_json

                evs = [event_to_json(e) for e in step.events[:20]]
                for e in evs:
                    if isinstance(e.get("token_ids"), list) and len(e["token_ids"]) > 32:
                        e["token_ids"] = e["token_ids"][:16] + [f"... {len(e['token_ids'])} in all"]
                st.json(evs, expanded=True)


def _metrics(trace: Trace, k: int) -> None:
    snap = trace.snapshot_at(k)
    prev = trace.snapshot_at(k - 1) if k > 0 else snap
    s, p = snap.stats, prev.stats
    rate = s["hits"] / s["queries"] if s["queries"] else 0.0
    c = st.columns(2)
    c[0].metric("Queries (tokens)", f"{s['queries']:,}", delta=(s["queries"] - p["queries"]) or None)
    c[1].metric("Hits (tokens)", f"{s['hits']:,}", delta=(s["hits"] - p["hits"]) or None)
    c = st.columns(2)
    c[0].metric("Hit rate (total)", f"{rate:.1%}")
    c[1].metric(
        f"Window ({snap.window_requests} req.)",
        f"{snap.window_hit_rate:.1%}",
        help="vLLM's logged rate: the last ~1000 requests (CachingMetrics), preempted ones excluded.",
    )
    st.caption(
        explain.metrics_sentence(trace, k)
        + f" Preempted: {s['preempted_requests']} requests, {s['preempted_hits']:,} of {s['preempted_queries']:,} tokens hit."
    )
    st.html(
        f'<div class="px-refs">{_refs_line((explain.REFS["record_stats"], explain.REFS["prefix_cache_stats"], explain.REFS["caching_metrics"]))}</div>'
    )
    st.html(vh.svg_img(vh.hit_rate_svg(trace, k), f"Hit rate after each step, total and windowed; step {k} marked."))


def _share_link(view: ViewState) -> None:
    q, warnings = to_query(view)
    for w in warnings:
        st.caption(w)
    try:
        base = (st.context.url or "").split("?")[0]
    except Exception:
        base = ""
    with st.sidebar.expander("Share this view", key="px_x_share"):
        st.code(f"{base}?{urlencode(q)}", language=None, wrap_lines=True)
        st.caption("The link holds the scenario, settings, playground steps, the step and presenter mode.")


def _sync_url(view: ViewState) -> None:
    q, _ = to_query(view)
    try:
        current = {k: st.query_params.get(k) for k in st.query_params}
        if current != q:
            st.query_params.from_dict(q)
    except Exception:
        pass


def render() -> None:
    _init_session()
    ss = st.session_state
    if ss.pop("px_stop_play", False):
        ss[W_PLAY] = False
    pending = ss.pop("px_pending_step", None)
    if pending is not None:
        ss[W_STEP] = pending
    view = _ensure_seed(_view())
    page_css(view.presenter)

    base: Scenario | None = None
    sc: Scenario | None = None
    rep: Replayed | None = None
    try:
        base = _base_scenario(view)
        sc, rep = _build(view)
    except BadInput as e:
        _error(str(e))
    if rep is None and (view.engine or view.edits):
        # Settings or edits that cannot be used: keep the scenario, drop them, say so.
        fallback = view.with_(engine={}, edits=())
        try:
            base = _base_scenario(fallback)
            sc, rep = _build(fallback)
            _set_view(fallback)
            view = fallback
            _sync_widgets(view, sc)
            ss.pop(W_BLOCK, None)
            ss[W_BLOCK] = view.block
        except BadInput as e:
            _error(str(e))
    if rep is None and (view.upload is not None or view.lesson != DEFAULT_LESSON):
        fallback = ViewState(drawn_seed=view.drawn_seed)
        try:
            base = _base_scenario(fallback)
            sc, rep = _build(fallback)
            _set_view(fallback)
            view = fallback
            _sync_widgets(view, sc)
        except BadInput as e:
            _error(str(e))

    trace = rep.trace if rep is not None else None
    _sidebar(view, base, sc, trace)
    view = _view()

    for msg in ss.pop(K_ERRORS, []):
        st.error(msg)
    notice = ss.pop(K_NOTICE, None)
    if notice:
        st.toast(notice)
    if trace is None:
        st.info("Pick a lesson in the sidebar.")
        return

    n = len(trace.steps)
    ss["px_n_steps"] = n
    if view.step > n or view.step < 0:
        view = view.with_(step=max(0, min(n, view.step)))
        _set_view(view)
        ss[W_STEP] = view.step
    if ss.get(W_STEP) != view.step:
        ss[W_STEP] = view.step
    if view.block is not None and not 0 <= view.block < len(trace.initial.blocks):
        view = view.with_(block=None)
        _set_view(view)
        ss[W_BLOCK] = None
    k = view.step

    title = sc.title if sc else ""
    eng = trace.scenario.engine
    seed = (
        "caching off"
        if trace.hash_seed is None
        else f"{eng.hash_algo}, seed {trace.hash_seed[:24]!r}{'...' if len(trace.hash_seed) > 24 else ''}, NONE_HASH {trace.none_hash.hex()[:12]}..."
    )
    st.html(
        f'<div class="px-title"><span class="px-title-main">{vh._e(title)}</span> '
        f'<span class="px-title-sub">{vh._e(trace.scenario.source)} · block size {eng.block_size} · {eng.num_blocks:,} blocks · {vh._e(seed)}</span></div>'
    )
    if rep.error:
        st.error(f"The replay stopped: {rep.error}. The steps before it are shown.")
    if view.presenter:
        st.button(
            "Leave presenter mode",
            icon=":material/close_fullscreen:",
            on_click=_on_presenter,
            args=(False,),
            key="px_b_leave_presenter",
            type="tertiary",
        )

    _stepper(view, n, view.presenter)
    changed = changed_blocks(trace, k)
    selected = view.block
    base_ops = len(base.ops) if base is not None else n
    _now_box(trace, k, base_ops)
    _panels(trace, k, changed, selected)
    _state_views(trace, k, changed, selected)

    if not view.presenter:
        _share_link(_view())
    _click_component()(key="px_click", on_block_change=_on_block_click)
    _autoplay(n)
    _sync_url(_view())


render()
