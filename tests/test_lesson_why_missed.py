"""Lesson 21 ("Why did this request miss?") meets the reasons it names, each where its text
and its notes say, and its records add up (design section 14)."""

from __future__ import annotations

from pathlib import Path

from explorer.miss.reasons import REASONS
from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario
from tests.step_records import evictions

LESSON = Path(__file__).resolve().parents[1] / "lessons" / "21_why_it_missed.toml"
# The reasons the lesson's own engine shows; the text sends the reader to the lessons that
# show the others.
MET_HERE = {
    "never_cached",
    "last_token",
    "partial_block",
    "not_yet_cached",
    "evicted",
    "reset",
    "skipped",
    "failed_load",
    "behind_miss",
}
ELSEWHERE = {
    "window": "16_sliding_window",
    "eagle_drop": "17_speculative_decoding",
    "failed_load": "18_external_tier",
    "other_keys": "02_extra_keys",
}


def _lookups():
    trace = replay(load_scenario(LESSON))
    return trace, [(k, rid, m) for k, s in enumerate(trace.steps, 1) for rid, m in (s.misses or {}).items()]


def test_the_lesson_meets_every_reason_it_names():
    trace, lookups = _lookups()
    assert trace.expect_failures == []
    met = {r for _, _, m in lookups for r in m.tokens}
    assert met == MET_HERE
    text = LESSON.with_suffix(".md").read_text(encoding="utf-8")
    for r in MET_HERE | set(ELSEWHERE):
        assert f"`{r}`" in text, r
    # other_instance is the Router's (a fleet of engines); the text names it too
    assert set(REASONS) - MET_HERE - set(ELSEWHERE) == {"other_instance"}
    assert "`other_instance`" in text


def test_g_alone_fails_its_load_and_h_is_gone_before_it():
    trace = replay(load_scenario(LESSON))
    failed = trace.steps[28]  # the step whose update reads the batch that ran G's load
    es = failed.engine_step
    assert failed.op.op == "step" and es is not None and es.finished == ("G",)
    reports = [r for r in es.connector if r.kind == "failed"]
    assert [(r.request_id, r.num_tokens, len(r.evicted)) for r in reports] == [("G", 16, 1)]
    assert [type(e).__name__ for e in failed.events] == ["BlockRemoved"]
    assert trace.steps[27].op.op == "abort" and trace.steps[27].op.id == "H"


def test_the_other_lessons_meet_the_reasons_this_one_points_to():
    root = LESSON.parent
    for reason, stem in ELSEWHERE.items():
        trace = replay(load_scenario(root / f"{stem}.toml"))
        records = [s.miss for s in trace.steps if s.miss] + [m for s in trace.steps for m in (s.misses or {}).values()]
        assert any(reason in m.tokens for m in records), (reason, stem)


def test_each_lookup_is_where_the_text_says():
    trace, lookups = _lookups()
    by = {(k, rid): m for k, rid, m in lookups}
    assert by[(3, "A")].tokens == {"last_token": 16, "never_cached": 80}
    assert by[(3, "B")].tokens == {"partial_block": 10, "not_yet_cached": 64} and by[(3, "B")].hit_tokens == 32
    d = by[(13, "D")]
    assert d.first_miss == "evicted" and d.first_miss_block == 5
    assert d.evicted_by is not None and (d.evicted_by.step + 1, d.evicted_by.request_id) == (9, "C")
    assert evictions(trace.steps[8])  # C's allocation popped cached blocks
    assert by[(19, "E")].tokens == {"partial_block": 3, "reset": 96}
    assert by[(19, "F")].tokens == {"skipped": 40}
    # G's sync load counts its 32 tokens at once; H hits them, computes blocks 2-3 and is aborted
    g, h = by[(27, "G")], by[(27, "H")]
    assert (g.external_tokens, g.tokens) == (32, {"partial_block": 8})
    assert h.hit_tokens == 32 and h.tokens == {"last_token": 16, "never_cached": 32}
    assert trace.steps[27].op.op == "abort"
    # the failed load drops block 1's hash; H's blocks 2-3 stay cached behind the hole
    z = by[(31, "Z")]
    assert z.hit_tokens == 16 and z.tokens == {"last_token": 16, "behind_miss": 32, "failed_load": 16}
    assert z.first_miss == "failed_load" and z.first_miss_block == 1
    assert z.block_reasons == (None, "failed_load", "behind_miss", "behind_miss", "last_token")
    for m in by.values():
        assert sum(m.tokens.values()) == m.num_tokens - m.hit_tokens - m.external_tokens
