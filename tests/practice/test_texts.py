"""Practice's words: each hint names what the answer counts, each follow-up links a lesson that
exists, and no text claims a limit the explorer no longer has."""

from __future__ import annotations

from explorer.practice.external import q_async_load_events
from explorer.practice.interview import FOLLOW_UPS
from explorer.ui.lesson_files import list_lessons


def test_the_blockstored_question_asks_for_block_hashes_and_its_hint_says_so():
    q = q_async_load_events(3)
    assert "block hashes" in q.question and q.input_hint.startswith("a number of block hashes")


def test_follow_ups_link_existing_lessons_and_know_the_hybrid_groups():
    stems = {lesson.stem for lesson in list_lessons()}
    for f in FOLLOW_UPS:
        assert f.lesson is None or f.lesson in stems
        assert "single full-attention group" not in f.answer
    hybrid = next(f for f in FOLLOW_UPS if "sliding-window" in f.question)
    assert hybrid.lesson == "16_sliding_window"
