"""The lessons page in AppTest: pick a lesson, read it, link it to the explorer."""

from __future__ import annotations

import pytest

pytest.importorskip("streamlit")
from explorer.ui.lesson_files import list_lessons
from tests.ui.helpers import app_page, bound

LESSONS_PAGE = "explorer/ui/pages/lessons.py"


def test_every_lesson_is_listed_with_its_title():
    lessons = list_lessons()
    stems = [lesson.stem for lesson in lessons]
    assert "03_lookup_cap" in stems and "13_interview_walkthrough" in stems
    assert all(not lesson.title.startswith("#") for lesson in lessons)


def test_pick_a_lesson_and_read_it():
    at = app_page(LESSONS_PAGE).run()
    assert not at.exception
    bound(at, "radio", "lessons_w_pick").set_value("03_lookup_cap")
    at.run()
    assert not at.exception
    text = "\n".join(m.value for m in at.markdown)
    assert "The lookup and its cap" in text and "1,184" in text


def test_the_url_preselects_a_lesson_and_next_moves_on():
    at = app_page(LESSONS_PAGE)
    at.query_params["lesson"] = "12_design_doc_example"
    at.run()
    assert not at.exception
    assert bound(at, "radio", "lessons_w_pick").value == "12_design_doc_example"
    at.button(key="lessons_next").click().run()
    assert bound(at, "radio", "lessons_w_pick").value == "13_interview_walkthrough"


def test_a_later_link_to_another_lesson_wins_over_the_last_pick():
    at = app_page(LESSONS_PAGE).run()
    bound(at, "radio", "lessons_w_pick").set_value("02_extra_keys")
    at.run()
    at.query_params["lesson"] = "05_when_hashed"
    at.run()
    assert bound(at, "radio", "lessons_w_pick").value == "05_when_hashed"
    bound(at, "radio", "lessons_w_pick").set_value("06_free_order_lru")
    at.run()  # the same link does not pull the reader back
    assert bound(at, "radio", "lessons_w_pick").value == "06_free_order_lru"
