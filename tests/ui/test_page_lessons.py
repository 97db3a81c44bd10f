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
    assert at.query_params["lesson"] in ("13_interview_walkthrough", ["13_interview_walkthrough"])


def test_the_address_follows_the_picked_lesson():
    at = app_page(LESSONS_PAGE)
    at.query_params["lesson"] = "14_engine_step"
    at.run()
    bound(at, "radio", "lessons_w_pick").set_value("16_sliding_window")
    at.run()
    assert not at.exception
    # A teacher copying the address shares lesson 16, not the lesson the page opened with.
    assert at.query_params["lesson"] in ("16_sliding_window", ["16_sliding_window"])
    assert bound(at, "radio", "lessons_w_pick").value == "16_sliding_window"


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


def test_the_course_routes_and_the_lesson_objective_are_drawn():
    from explorer.ui.course import load_course

    at = app_page(LESSONS_PAGE)
    at.query_params["lesson"] = "15_async_hash_later"
    at.run()
    assert not at.exception
    course = load_course()
    html = "\n".join(h.value for h in at.get("html"))
    assert course.lessons["15_async_hash_later"].objective in html and "builds on" in html
    tables = [t for t in at.dataframe if "objective" in t.value.columns]
    assert len(tables) == len(course.routes)
    for t, route in zip(tables, course.routes, strict=True):
        assert list(t.value["objective"]) == [course.lessons[s].objective for s in route.lessons]
