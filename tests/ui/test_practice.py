"""The practice page in AppTest: a right answer, a wrong one, the score, the reveal, the extras."""

from __future__ import annotations

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

from explorer.practice.generate import generate
from explorer.practice.interview import MISTAKES, RUBRIC
from explorer.practice.question import Question, format_answer
from tests.ui.helpers import app_page

PRACTICE_PAGE = "explorer/ui/pages/practice.py"


def _app(seed: int, kind: str) -> AppTest:
    at = app_page(PRACTICE_PAGE)
    at.session_state["practice_seed"] = seed
    at.session_state["practice_kind"] = kind
    return at.run()


def _score(at: AppTest) -> str:
    return next(m.value for m in at.metric if m.label == "Score this session")


def _answer(at: AppTest, q: Question, text: str) -> AppTest:
    at.text_input(key=f"practice_answer_{q.key}").input(text)
    return at.button(key="practice_check").click().run()


def test_right_answer_scores_and_reveals_the_reason():
    q = generate(11, "hit_length")
    at = _app(11, "hit_length")
    assert not at.exception
    assert any(q.title in s.value for s in at.subheader)
    assert _score(at) == "0 / 0"
    at = _answer(at, q, str(q.answer))
    assert not at.exception
    assert at.success and at.success[0].value.startswith("Right")
    assert _score(at) == "1 / 1"
    shown = "\n".join(m.value for m in at.markdown)
    assert q.explanation[-1] in shown  # the reason, from the step's recorded data


def test_wrong_answer_shows_the_truth_and_counts_once():
    q = generate(12, "hit_length")
    at = _app(12, "hit_length")
    at = _answer(at, q, str(q.answer + 1))
    assert at.error and "the engine says" in at.error[0].value
    assert format_answer("int", q.answer) in at.error[0].value
    assert _score(at) == "0 / 1"
    at.run()  # a rerun does not score the same question again
    assert _score(at) == "0 / 1"


def test_score_accumulates_over_questions_and_kinds():
    q1 = generate(21, "free_queue")
    at = _app(21, "free_queue")
    at = _answer(at, q1, ", ".join(map(str, q1.answer)))
    assert _score(at) == "1 / 1"
    q2 = generate(22, "admission")
    at.session_state["practice_seed"] = 22
    at.session_state["practice_kind"] = "admission"
    at.run()
    at.radio(key=f"practice_answer_{q2.key}").set_value("no" if q2.answer else "yes")
    at = at.button(key="practice_check").click().run()
    assert not at.exception
    assert _score(at) == "1 / 2"


def test_an_empty_answer_is_not_scored():
    at = _app(5, "next_evicted")
    at = at.button(key="practice_check").click().run()
    assert at.warning and _score(at) == "0 / 0"


def test_new_question_draws_a_seed_and_the_address_follows_it():
    at = _app(33, "any")
    assert at.query_params["seed"] in ("33", ["33"]) and "kind" not in at.query_params
    seeds = set()
    for _ in range(3):  # three draws from 2**31 seeds: all equal to 33 has odds of about 2**-93
        at = at.button(key="practice_new").click().run()
        assert not at.exception and at.subheader
        seed = str(at.session_state["practice_seed"])
        assert at.query_params["seed"] in (seed, [seed])  # a copied address opens this question
        seeds.add(seed)
    assert seeds != {"33"}


def test_a_practice_link_opens_the_same_question():
    first = _app(4242, "next_evicted")
    assert first.query_params["kind"] in ("next_evicted", ["next_evicted"])
    again = app_page(PRACTICE_PAGE)
    again.query_params.update({"seed": "4242", "kind": "next_evicted"})
    again.run()
    assert not again.exception
    assert again.subheader[0].value == first.subheader[0].value
    assert again.session_state["practice_seed"] == 4242


def test_interview_rubric_mistakes_and_value_of_a_hit():
    at = _app(1, "mistake")
    assert not at.exception
    text = "\n".join(m.value for m in at.markdown)
    for r in RUBRIC:
        assert r.level in text
    assert len([e for e in at.expander if e.label in {m.statement for m in MISTAKES}]) == len(MISTAKES)
    table = at.table[0].value
    cells = table.to_string()
    for v in ("32.5 µs", "39.0 ms", "32.2 ms", "83%"):
        assert v in cells
