"""The course: every lesson has an objective and a duration, each route fits its length, and a
lesson in a route comes after every lesson it builds on (so no lesson leans on one not yet met)."""

from __future__ import annotations

import re

from explorer.ui.course import load_course
from explorer.ui.lesson_files import list_lessons

COURSE = load_course()
STEMS = [lesson.stem for lesson in list_lessons()]


def test_every_lesson_is_in_the_course_and_nothing_else():
    assert sorted(COURSE.lessons) == sorted(STEMS)
    for c in COURSE.lessons.values():
        assert c.objective and "\n" not in c.objective and 1 <= c.minutes <= 20
        assert all(b in COURSE.lessons and b != c.stem for b in c.builds_on)


def test_a_lesson_builds_only_on_earlier_lessons():
    for c in COURSE.lessons.values():
        assert all(STEMS.index(b) < STEMS.index(c.stem) for b in c.builds_on), c.stem


def test_each_route_fits_its_length_and_meets_prerequisites_first():
    assert {r.minutes for r in COURSE.routes} == {45, 90}
    for r in COURSE.routes:
        total = COURSE.route_minutes(r)
        assert r.minutes - 5 <= total <= r.minutes, (r.name, total)
        for i, stem in enumerate(r.lessons):
            for b in COURSE.lessons[stem].builds_on:
                assert b in r.lessons[:i], f"route {r.name}: {stem} builds on {b}, which comes later or not at all"


def test_lessons_cite_only_vllm_source_and_documents_in_the_repository():
    # "spec part 2, rule 72" names a document a reader of the lessons does not have.
    for stem in STEMS:
        for suffix in (".md", ".toml"):
            text = (list_lessons()[STEMS.index(stem)].md.with_suffix(suffix)).read_text(encoding="utf-8")
            assert not re.search(r"spec part|\brules? \d", text, re.IGNORECASE), (stem, suffix)
