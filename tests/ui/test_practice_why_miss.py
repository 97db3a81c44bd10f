"""The practice page's "why did this block miss?" in AppTest: the reasons offered as choices,
the record's reason scored right, another one wrong, the record's sentence revealed."""

from __future__ import annotations

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

from explorer.practice.generate import generate
from explorer.practice.why_miss import CHOICES
from tests.ui.helpers import app_page

PRACTICE_PAGE = "explorer/ui/pages/practice.py"


def _app(seed: int) -> AppTest:
    at = app_page(PRACTICE_PAGE)
    at.session_state["practice_seed"] = seed
    at.session_state["practice_kind"] = "why_miss"
    return at.run()


def _score(at: AppTest) -> str:
    return next(m.value for m in at.metric if m.label == "Score this session")


@pytest.mark.parametrize("right", [True, False])
def test_the_record_grades_the_answer(right):
    seed = 2
    q = generate(seed, "why_miss")
    at = _app(seed)
    assert not at.exception
    radio = at.radio(key=f"practice_answer_{q.key}")
    assert len(radio.options) == len(CHOICES)
    pick = q.answer if right else next(c for c in CHOICES if c != q.answer)
    at = radio.set_value(pick).run()
    at = at.button(key="practice_check").click().run()
    assert not at.exception
    if right:
        assert at.success and at.success[0].value.startswith("Right")
        assert _score(at) == "1 / 1"
    else:
        said = at.error[0].value.replace("\\", "").replace("\u2060", "")  # as Markdown shows it
        assert f"the engine says {q.answer}" in said
        assert _score(at) == "0 / 1"
    shown = "\n".join(m.value for m in at.markdown)
    assert f"Block {q.block}" in shown and "The lookup's record" in shown
