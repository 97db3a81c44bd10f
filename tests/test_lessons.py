"""Every lesson replays with all its expectations met, and reads as a lesson.

A lesson is ``lessons/NN_slug.toml`` (the scenario) plus ``lessons/NN_slug.md`` (the
narrative). The scenario's `expect` checks pin the numbers the narrative teaches; the
conformance tier replays the same files through vLLM's own classes.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario
from explorer.scenario.records import CachedBlock, HashedBlock
from tests.cli_run import run_explorer
from tests.step_records import evictions, touched_ids

REPO = Path(__file__).resolve().parents[1]
LESSONS = REPO / "lessons"
TOMLS = sorted(LESSONS.glob("*.toml"))
NAME = re.compile(r"^\d\d_[a-z0-9_]+$")
CITATION = re.compile(r"vllm/[\w/]+\.py:\d+")


def _id(p: Path) -> str:
    return p.stem


def test_there_are_lessons():
    numbers = {p.stem[:2] for p in TOMLS}
    assert {f"{n:02d}" for n in range(1, 14)} <= numbers


@pytest.mark.parametrize("path", TOMLS, ids=_id)
def test_lesson_replays_with_every_expect_met(path):
    trace = replay(load_scenario(path))
    assert trace.expect_failures == []
    assert sum(len(s.op.expect) for s in trace.steps) >= 5, "a lesson pins its numbers with expect"


@pytest.mark.parametrize("path", TOMLS, ids=_id)
def test_lesson_has_markdown_and_notes(path):
    assert NAME.match(path.stem), f"{path.name}: lesson files are named NN_slug"
    md = path.with_suffix(".md")
    assert md.exists(), f"{path.name} has no {md.name}"
    text = md.read_text(encoding="utf-8")
    assert text.startswith("# "), f"{md.name} starts with its title"
    assert len(text.split("\n\n")) >= 4, f"{md.name} is a narrative of a few paragraphs"
    scenario = load_scenario(path)
    notes = [op.note for op in scenario.ops if op.note]
    assert len(notes) >= 3, f"{path.name}: steps need notes to show beside their panels"
    assert scenario.title and scenario.description.strip()


@pytest.mark.parametrize("path", [p for p in TOMLS if p.stem[:2] != "00"], ids=_id)
def test_lesson_cites_vllm_source_lines(path):
    text = path.with_suffix(".md").read_text(encoding="utf-8")
    assert CITATION.search(text), f"{path.stem}.md cites no vllm file:line"
    assert "0.31.0" in text


def test_lessons_name_no_machine_paths():
    for p in LESSONS.iterdir():
        if p.suffix in (".md", ".toml") and p.stem[:2] != "00":
            text = p.read_text(encoding="utf-8")
            assert "/work/" not in text and "/tmp/" not in text and "/home/" not in text, p.name


def test_run_command_exits_zero_for_every_lesson():
    """`python -m explorer run FILE` is the contract: exit 0 when every expect holds."""
    for path in TOMLS:
        proc = run_explorer("run", str(path), cwd=REPO)
        assert proc.returncode == 0, f"{path.name}: exit {proc.returncode}\n{proc.stderr}"


# ---- numbers a narrative states that `expect` cannot express --------------------------------


def _trace(stem: str):
    return replay(load_scenario(LESSONS / f"{stem}.toml"))


def test_kv_events_block0_is_the_spec_test_vector():
    trace = _trace("09_kv_events")
    admit = trace.steps[1]
    stored = admit.events[0]
    assert admit.of(HashedBlock) == () and trace.steps[0].of(HashedBlock)[0].hash.hex() == (
        "fe8fa5dda3210d0ca2031e37cbe3b001186773cd1c710beb2d45fcb51d434798"
    )
    assert trace.none_hash.hex() == "066b1e8987e027138e98701c46128929378935f9b6cd1549105ae6b4f0d71198"
    assert stored.block_hashes[0] == 3262291359910021016
    assert stored.parent_block_hash is None
    b_stored = trace.steps[3].events[0]
    assert b_stored.parent_block_hash == stored.block_hashes[1]


def test_extra_keys_image_offsets_are_relative_to_the_block():
    trace = _trace("02_extra_keys")
    cat = next(s for s in trace.steps if s.op.op == "arrive" and s.op.id == "cat")
    mm = [[k for k in (b.extra_keys or ()) if k[0] == "mm"] for b in cat.of(HashedBlock)]
    assert mm[:4] == [[("mm", "cat-photo", 8)], [("mm", "cat-photo", -8)], [("mm", "cat-photo", -24)], []]
    salted = next(s for s in trace.steps if s.op.op == "arrive" and s.op.id == "tenant1")
    assert salted.of(HashedBlock)[0].extra_keys == (("cache_salt", "tenant-1"),)
    assert all(b.extra_keys is None for b in salted.of(HashedBlock)[1:])


def test_when_hashed_duplicate_and_never_cached_last_block():
    trace = _trace("05_when_hashed")
    last = trace.steps[-1]
    cached = last.of(CachedBlock)
    assert [c.block_id for c in cached] == [8] and cached[0].duplicate_of == (3,)
    gen = trace.steps[6]
    assert [h.index for h in gen.of(HashedBlock)] == [3] and gen.of(CachedBlock) == ()


def test_metrics_window_restarts_at_reset_but_totals_do_not():
    trace = _trace("10_metrics")
    after_b = trace.snapshot_at(4)
    assert after_b.window_requests == 2 and after_b.window_hit_rate == 96 / 200
    final = trace.final
    assert final.window_requests == 1 and final.window_hit_rate == 0.0
    assert (final.stats["hits"], final.stats["queries"]) == (96, 300)
    assert (final.stats["preempted_hits"], final.stats["preempted_queries"]) == (96, 203)


def test_design_doc_time7_evicts_nothing():
    trace = _trace("12_design_doc_example")
    time7 = trace.steps[-1]
    assert touched_ids(time7) == [1, 2, 3] and evictions(time7) == []
    cached_ids = {i for _, ids in trace.final.cached for i in ids}
    assert {4, 6} <= cached_ids
