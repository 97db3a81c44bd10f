"""Practice: predict first, then see what the engine does.

Questions come from explorer.practice (random small scenarios, reproducible from the seed shown
on the page). The page keeps the score in st.session_state; nothing is stored at module level,
because one server serves every browser session.
"""

from __future__ import annotations

import contextlib
import secrets
from pathlib import Path

import streamlit as st
from streamlit.errors import StreamlitPageNotFoundError

from explorer.miss.sentence import REASON_LABELS
from explorer.numbers import is_int
from explorer.practice.generate import generate
from explorer.practice.hit_value import hit_value_rows, load_measurements, max_hit_for, measured_summary
from explorer.practice.hits import q_mistake
from explorer.practice.interview import FOLLOW_UPS, MISTAKES, MISTAKES_BY_NAME, RUBRIC
from explorer.practice.question import KIND_LABELS, KINDS, MAX_SEED, Question, Score, format_answer
from explorer.practice.why_miss import CHOICES as WHY_CHOICES
from explorer.scenario.write import scenario_to_toml
from explorer.ui import bound
from explorer.ui.address import follow
from explorer.ui.explorer_session import open_link_params
from explorer.ui.lesson_files import lesson_title
from explorer.ui.text import error, success

DOCS_DIR = Path(__file__).resolve().parents[3] / "docs"
# Other pages, by the paths app.py registers them under.
EXPLORER_PAGE = "explorer/ui/pages/explorer.py"
LESSONS_PAGE = "explorer/ui/pages/lessons.py"

K_SEED = "practice_seed"  # the question's seed (shown by a number input bound to it)
K_KIND = "practice_kind"  # the kind of question (shown by a select box bound to it)
W_SEED, W_KIND = "practice_w_seed", "practice_w_kind"
K_SCORE = "practice_score"
K_REVEALED = "practice_revealed"  # question key -> (correct, message)
ANY = "any"


def _score() -> Score:
    if K_SCORE not in st.session_state:
        st.session_state[K_SCORE] = Score()
    return st.session_state[K_SCORE]


def _revealed() -> dict:
    if K_REVEALED not in st.session_state:
        st.session_state[K_REVEALED] = {}
    return st.session_state[K_REVEALED]


def _new_seed() -> None:
    st.session_state[K_SEED] = secrets.randbelow(MAX_SEED + 1)


def _on_widget(name: str, k: str, target: str) -> None:
    """A bound widget's change, unless the report is stale (explorer.ui.bound)."""
    if bound.is_current(name, k) and st.session_state.get(k) is not None:
        st.session_state[target] = st.session_state[k]


def _init() -> None:
    if K_SEED not in st.session_state:
        seed = None
        raw = st.query_params.get("seed")
        if raw is not None and is_int(raw) and 0 <= int(raw) <= MAX_SEED:
            seed = int(raw)
        kind = st.query_params.get("kind")
        if kind in KINDS:
            st.session_state[K_KIND] = kind
        st.session_state[K_SEED] = seed if seed is not None else secrets.randbelow(MAX_SEED + 1)
    st.session_state.setdefault(K_KIND, ANY)


def _open_in_explorer(q: Question) -> None:
    from explorer.ui.state import encode_blob

    blob = encode_blob({"name": f"practice-{q.kind}-{q.seed}.toml", "toml": scenario_to_toml(q.scenario)})
    with contextlib.suppress(StreamlitPageNotFoundError):  # the page run alone (a test), no navigation
        st.page_link(
            EXPLORER_PAGE,
            label="Open this scenario in the explorer",
            icon=":material/open_in_new:",
            query_params=open_link_params(up=blob, step=str(q.step_index + 1)),
        )


def _question_block() -> None:
    c1, c2, c3 = st.columns([2, 1, 1], vertical_alignment="bottom")
    kinds = [ANY, *KINDS]
    if st.session_state[K_KIND] not in kinds:
        st.session_state[K_KIND] = ANY
    k = bound.key(W_KIND, st.session_state[K_KIND])
    c1.selectbox(
        "Kind of question",
        kinds,
        index=kinds.index(st.session_state[K_KIND]),
        key=k,
        on_change=_on_widget,
        args=(W_KIND, k, K_KIND),
        format_func=lambda k: "Any (the seed picks)" if k == ANY else KIND_LABELS[k],
    )
    k = bound.key(W_SEED, int(st.session_state[K_SEED]))
    c2.number_input(
        "Seed",
        min_value=0,
        max_value=MAX_SEED,
        value=int(st.session_state[K_SEED]),
        step=1,
        key=k,
        on_change=_on_widget,
        args=(W_SEED, k, K_SEED),
        help="The same seed and kind always give the same question: share it to reproduce one.",
    )
    c3.button("New question", key="practice_new", on_click=_new_seed, icon=":material/casino:")

    seed = int(st.session_state[K_SEED])
    kind = st.session_state[K_KIND]
    q = generate(seed, None if kind == ANY else kind)

    st.subheader(q.title)
    st.caption(
        f"{KIND_LABELS[q.kind]} · seed {seed} · block size {q.scenario.engine.block_size}, "
        f"{q.scenario.engine.num_blocks} blocks (block 0 is the null block)"
    )
    if q.mistake:
        st.markdown(f"**The mistake:** {q.mistake}")
    with st.expander("What happened so far", expanded=True):
        st.code("\n".join(q.setup) if q.setup else "(nothing yet)", language=None, wrap_lines=True)
    st.markdown("**State before the step**")
    st.markdown("\n".join(f"- {line}" for line in q.state))
    st.markdown(f"**Now:** {q.asked}.")
    st.markdown(q.question)

    revealed = _revealed().get(q.key)
    answer_key = f"practice_answer_{q.key}"
    if q.answer_format == "bool":
        st.radio(
            "Your answer", ["yes", "no"], index=None, key=answer_key, horizontal=True, disabled=revealed is not None
        )
    elif q.answer_format == "reason":  # why_miss: one of the reasons a lookup's record gives
        st.radio(
            "Your answer",
            list(WHY_CHOICES),
            index=None,
            key=answer_key,
            format_func=lambda r: f"{r}: {REASON_LABELS[r]}",
            disabled=revealed is not None,
        )
    else:
        st.text_input("Your answer", key=answer_key, placeholder=q.input_hint, disabled=revealed is not None)

    if revealed is None and st.button("Check my answer", key="practice_check", type="primary"):
        raw = st.session_state.get(answer_key)
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            st.warning("Enter an answer first: the point is to predict before you see.")
        else:
            verdict = q.check(raw)
            _score().record(q.key, verdict.correct)
            _revealed()[q.key] = (verdict.correct, verdict.message)
            revealed = _revealed()[q.key]
    if revealed is not None:
        _reveal(q, *revealed)

    score = _score()
    st.metric("Score this session", score.text, help="Each question counts once: its first answer.")


def _reveal(q: Question, correct: bool, message: str) -> None:
    (success if correct else error)(message)
    if q.mistaken_answer is not None:
        st.markdown(
            f"The common mistake would answer **{format_answer(q.answer_format, q.mistaken_answer)}**; "
            f"the engine gives **{format_answer(q.answer_format, q.answer)}**. "
            f"{MISTAKES_BY_NAME[_mistake_name(q)].correction}"
        )
    st.markdown("**Why**")
    st.markdown("\n".join(f"- {line}" for line in q.explanation))
    st.markdown("**What the engine did in this step**")
    st.code(q.asked_text(), language=None, wrap_lines=True)
    if q.lesson:
        st.page_link(
            LESSONS_PAGE,
            label=f"Lesson {lesson_title(q.lesson)}",
            icon=":material/school:",
            query_params=open_link_params(lesson=q.lesson),
        )
    _open_in_explorer(q)
    st.download_button(
        "Download this scenario (TOML)",
        scenario_to_toml(q.scenario),
        file_name=f"practice-{q.kind}-{q.seed}.toml",
        mime="application/toml",
        key=f"practice_dl_{q.key}",
    )


def _mistake_name(q: Question) -> str:
    return next(m.name for m in MISTAKES if m.statement == q.mistake)


# ---- the interview walkthrough ------------------------------------------------------------------


def _interview() -> None:
    st.header("The interview walkthrough")
    st.markdown(
        "Lesson 13 replays its worked example. Here: what interviewers ask next, how answers are "
        "scored, and the mistakes that cost points, each shown by a scenario where it gives the wrong number."
    )
    st.subheader("Follow-up questions")
    for _i, f in enumerate(FOLLOW_UPS):
        with st.expander(f.question):
            st.markdown(f.answer)
            if f.lesson:
                st.page_link(
                    LESSONS_PAGE,
                    label=f"Lesson {lesson_title(f.lesson)}",
                    icon=":material/school:",
                    query_params=open_link_params(lesson=f.lesson),
                )
    st.subheader("How answers are scored")
    for r in RUBRIC:
        st.markdown(f"**{r.level}.** {r.summary}")
    st.subheader("Common mistakes")
    for _i, m in enumerate(MISTAKES):
        with st.expander(m.statement):
            demo = q_mistake(0, m.name)
            st.markdown(f"{m.correction}")
            st.code(
                "\n".join((*demo.setup, demo.asked_text())),
                language=None,
                wrap_lines=True,
            )
            st.markdown(
                f"The mistake predicts **{format_answer('int', demo.mistaken_answer)}**; the engine hits "
                f"**{format_answer('int', demo.answer)}**."
            )


# ---- the value of a hit -------------------------------------------------------------------------


def _value_of_a_hit() -> None:
    from explorer.prefill import estimate as E
    from explorer.prefill.configs import MODELS

    st.header("The value of a hit")
    st.markdown(
        "The interview walkthrough's estimate: a prompt token costs about 2 × parameters FLOPs, so "
        "prefill time per token = 2 × parameters / (peak FLOP/s × utilisation), and a hit of *h* tokens "
        "saves *h* of them. The defaults reproduce its table (Llama 3.1 8B on an H100 at 50% of 989 "
        "TFLOP/s). The estimate leaves out attention, whose cost per token grows with the context; the "
        "second column adds it for the model shape you pick."
    )
    c1, c2, c3 = st.columns(3)
    params_b = c1.number_input(
        "Parameters (billions)",
        min_value=0.001,
        max_value=2000.0,
        value=E.WALKTHROUGH_PARAMS / 1e9,
        step=0.1,
        format="%.3f",
        key="hit_params",
    )
    peak_t = c2.number_input(
        "GPU peak (TFLOP/s, dense BF16)",
        min_value=1.0,
        max_value=100000.0,
        value=E.WALKTHROUGH_PEAK_FLOPS / 1e12,
        step=1.0,
        key="hit_peak",
    )
    util = c3.number_input(
        "Utilisation", min_value=0.01, max_value=1.0, value=E.WALKTHROUGH_UTILIZATION, step=0.05, key="hit_util"
    )
    c4, c5, c6 = st.columns(3)
    prompt = int(
        c4.number_input(
            "Prompt tokens", min_value=2, max_value=1_048_576, value=E.WALKTHROUGH_PROMPT, step=16, key="hit_prompt"
        )
    )
    hit = int(
        c5.number_input("Hit tokens", min_value=0, max_value=1_048_576, value=E.WALKTHROUGH_HIT, step=16, key="hit_hit")
    )
    shape_names = list(MODELS)
    default_shape = shape_names.index("llama3-8b-shape") if "llama3-8b-shape" in shape_names else 0
    shape = c6.selectbox("Model shape for the attention term", shape_names, index=default_shape, key="hit_shape")
    cap = max_hit_for(prompt)
    if hit >= prompt or hit % 16:
        st.warning(
            f"A hit is whole blocks of 16 and at most (prompt − 1) // 16 × 16 = {cap:,} tokens here; "
            f"using {min(cap, hit - hit % 16):,}."
        )
        hit = min(cap, hit - hit % 16)
    rows = hit_value_rows(params_b * 1e9, peak_t * 1e12, util, prompt, hit, attention=MODELS[shape])
    st.table(
        {
            "": [r.label for r in rows],
            "walkthrough estimate (dense only)": [r.dense_only for r in rows],
            f"plus attention ({shape})": [r.with_attention for r in rows],
        }
    )
    st.caption(
        "Ideal saving = hit / prompt; attention makes the saving slightly smaller than that, because the "
        "recomputed tokens at the end attend to the whole context."
    )
    measurements = load_measurements(DOCS_DIR)
    st.subheader("Measured")
    if measurements:
        summary = measured_summary(measurements)
        if summary:
            st.markdown(f"**{summary}**. The README's benchmark table quotes the same figures.")
        st.table(
            {
                "source": [m.get("source") for m in measurements],
                "model": [m.get("model") for m in measurements],
                "device": [m.get("device") for m in measurements],
                "prompt": [_num(m.get("prompt_tokens")) for m in measurements],
                "hit": [_num(m.get("hit_tokens")) for m in measurements],
                "full ms": [_num(m.get("full_ms")) for m in measurements],
                "cached ms": [_num(m.get("cached_ms")) for m in measurements],
                "saved": [_pct(m.get("saved_fraction")) for m in measurements],
                "FLOP ideal": [_pct(m.get("flop_ideal_fraction")) for m in measurements],
            }
        )
    else:
        st.markdown(
            "No measurements are checked in yet. Run `python -m explorer prefill --json` to measure a "
            "real prefill with and without a hit on your machine."
        )
    if (DOCS_DIR / "prefill.md").is_file():
        st.markdown("How the measurements were taken: `docs/prefill.md`.")


def _num(v: object) -> str:
    return f"{v:,}" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v or "")


def _pct(v: object) -> str:
    return f"{v:.1%}" if isinstance(v, (int, float)) and not isinstance(v, bool) else ""


def render() -> None:
    _init()
    st.title("Practice")
    st.markdown(
        "Predict first, then see. Each question is a small random scenario; answer, and the explorer runs "
        "the step and shows the truth with the reason."
    )
    _question_block()
    st.divider()
    _interview()
    st.divider()
    _value_of_a_hit()
    # The address names the question shown: a copied address opens this question, not the first one.
    params = {"seed": str(int(st.session_state[K_SEED]))}
    if st.session_state[K_KIND] != ANY:
        params["kind"] = st.session_state[K_KIND]
    follow(params)


# Streamlit runs a page file as __main__; importing it (a test calling render()) draws nothing.
if __name__ == "__main__":
    render()
