"""Practice in a real browser: answer two questions (one right, one wrong) and watch the score.

Uses the shared e2e fixtures (the app under `streamlit run` on loopback, Debian's chromium).
The test computes each question's answer itself, from the seed the page shows.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from explorer.practice.generate import generate
from explorer.practice.question import format_answer
from tests.e2e.conftest import shot, wait_idle

pytestmark = pytest.mark.e2e


def _score(page) -> str:
    metric = page.get_by_test_id("stMetric").filter(has_text="Score this session")
    return metric.get_by_test_id("stMetricValue").inner_text().strip()


def _seed(page) -> int:
    return int(page.get_by_role("spinbutton", name="Seed").input_value())


def _answer(page, text: str) -> None:
    box = page.get_by_label("Your answer")
    box.fill(text)
    box.press("Enter")  # commit the text input before the button click
    wait_idle(page)
    page.get_by_role("button", name="Check my answer").click()
    wait_idle(page)


def test_answer_two_questions_right_then_wrong(px_page, px_app_url):
    page = px_page
    page.goto(f"{px_app_url}/practice?seed=11&kind=hit_length")
    page.get_by_text("Score this session").wait_for()
    wait_idle(page)
    assert _score(page) == "0 / 0"

    q1 = generate(_seed(page), "hit_length")
    expect(page.get_by_role("heading", name=q1.title)).to_be_visible()
    _answer(page, str(q1.answer))
    expect(page.get_by_text(re.compile(r"^Right"))).to_be_visible()
    expect(page.get_by_text(q1.explanation[-1])).to_be_visible()  # the reason is shown
    assert _score(page) == "1 / 1"
    shot(page, "practice-right", full=True)

    page.get_by_role("button", name="New question").click()
    expect(page.get_by_text(re.compile(r"^Right"))).to_have_count(0)
    wait_idle(page)
    q2 = generate(_seed(page), "hit_length")
    _answer(page, str(q2.answer + 1))
    verdict = page.get_by_text(re.compile(r"^Not quite"))
    expect(verdict).to_be_visible()
    assert format_answer("int", q2.answer) in verdict.inner_text()
    assert _score(page) == "1 / 2"
    shot(page, "practice-wrong", full=True)
