"""Practice's words: each hint names what the answer counts, each follow-up links a lesson that
exists, and no text claims a limit the explorer no longer has."""

from __future__ import annotations

import re

from explorer.practice.external import q_async_load_events
from explorer.practice.interview import FOLLOW_UPS
from explorer.practice.spec_decode import q_eagle_hit
from explorer.scenario.engine import replay
from explorer.scenario.records import EagleDropped
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


def test_the_eagle_explanation_names_the_block_index_and_the_block_id_apart():
    dropped = 0
    for seed in range(40):
        q = q_eagle_hit(seed)
        step = replay(q.scenario).steps[q.step_index]
        # "#" means one thing only: the state's mark of a block that holds a hash ("4#")
        words = [q.question, *q.setup, *q.state, q.asked, *q.explanation]
        other = [w for w in words if "#" in re.sub(r"(?<=\d)#|# = holds a hash", "", w)]
        assert not other, (seed, other)
        assert not any("#" in line for line in q.explanation), seed
        drop = step.first(EagleDropped)
        if drop is not None:
            assert any(
                f"(block index {drop.block_index}, block id {drop.block_id})" in line for line in q.explanation
            ), seed
            dropped += 1
        else:
            assert not any("block index" in line for line in q.explanation), seed
    assert 10 <= dropped < 40  # both kinds of question were drawn
