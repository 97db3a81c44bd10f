"""Scenario caps counted before the work: tokens per op and in all, full blocks, arrivals, resets,
max_model_len, file bytes, and the block entries a replay's snapshots hold (issue 13)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from explorer.errors import BadInput
from explorer.scenario.budget import snapshot_cells
from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario, parse_scenario_bytes, parse_scenario_dict, with_engine
from explorer.scenario.randgen import random_scenario
from explorer.scenario.spec import CLI_LIMITS, MAX_MODEL_LEN, Limits

LESSONS = sorted((Path(__file__).resolve().parents[2] / "lessons").glob("*.toml"))


def arrive(rid, prompt):
    return {"op": "arrive", "id": rid, "prompt": prompt}


def test_the_total_is_checked_before_an_op_is_expanded():
    """The second op would expand to 16M tokens: refused with the total far below, and nothing
    of that size is ever allocated."""
    limits = Limits(max_total_tokens=100)
    raw = {
        "engine": {"max_model_len": MAX_MODEL_LEN},
        "steps": [
            arrive("A", "0:60"),
            {"op": "admit", "id": "A"},
            {"op": "sample", "id": "A", "tokens": f"0*{MAX_MODEL_LEN - 60}"},
        ],
    }
    tracemalloc.start()
    try:
        with pytest.raises(
            BadInput,
            match=r"step 3 \(sample A\): tokens: 16,777,156 more tokens would bring the scenario to 16,777,216 tokens in all, more than the limit 100",
        ):
            parse_scenario_dict(raw, "s.toml", Limits(max_total_tokens=100, max_prompt_tokens=MAX_MODEL_LEN))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20  # 16M expanded tokens would be over 128 MiB
    with pytest.raises(BadInput, match="in all"):
        parse_scenario_dict({"steps": [arrive("A", "0:60"), arrive("B", "0:41")]}, "s.toml", limits)
    assert len(parse_scenario_dict({"steps": [arrive("A", "0:60"), arrive("B", "0:40")]}, "s", limits).ops) == 2


def test_max_model_len_is_capped_and_does_not_lift_the_per_op_cap():
    with pytest.raises(
        BadInput,
        match=r"engine.max_model_len: 9223372036854775807 is out of range: expected an integer in \[1, 16777216\]",
    ):
        parse_scenario_dict({"engine": {"max_model_len": 2**63 - 1}})
    raw = {"engine": {"max_model_len": MAX_MODEL_LEN}, "steps": [arrive("A", "0*300000000")]}
    with pytest.raises(BadInput, match=r"expands to 300,000,000 tokens, more than the prompt limit = 2,097,152"):
        parse_scenario_dict(raw)
    raw["steps"] = [arrive("A", "1"), {"op": "generate", "id": "A", "tokens": "0*300000000"}]
    with pytest.raises(
        BadInput, match=r"generate A\): tokens: expands to 300,000,000 tokens, more than the limit per op"
    ):
        parse_scenario_dict(raw)
    raw = {"engine": {"max_model_len": 100}, "steps": [arrive("A", "0:101")]}
    with pytest.raises(BadInput, match=r"expands to 101 tokens, more than max_model_len = 100"):
        parse_scenario_dict(raw)


def test_full_blocks_are_capped_by_block_size():
    limits = Limits(max_full_blocks=10)
    ok = {"engine": {"block_size": 1}, "steps": [arrive("A", "0:10")]}
    assert parse_scenario_dict(ok, "s", limits).ops
    # a sample grows a live request: 9 + 2 tokens at block size 1 are 11 full blocks
    grow = {"engine": {"block_size": 1}, "steps": [arrive("A", "0:9"), {"op": "sample", "id": "A", "tokens": "1:3"}]}
    with pytest.raises(BadInput, match="11 full 1-token blocks in all, more than the limit 10"):
        parse_scenario_dict(grow, "s", limits)
    # at block size 16 the same tokens fill no block
    assert parse_scenario_dict({**grow, "engine": {"block_size": 16}}, "s", limits).ops


def test_arrivals_and_reset_walks_are_capped():
    steps = [arrive(f"r{i}", "1") for i in range(4)]
    with pytest.raises(BadInput, match=r"step 4 \(arrive r3\): more than the limit of 3 arrive steps"):
        parse_scenario_dict({"steps": steps}, "s", Limits(max_arrivals=3))
    resets = {"engine": {"num_blocks": 100}, "steps": [{"op": "reset"}] * 11}
    with pytest.raises(BadInput, match="these resets walk 1,100 blocks in all, more than the limit 1,000"):
        parse_scenario_dict(resets, "s", Limits(max_reset_blocks=1000))


def test_blocks_steps_and_bytes_are_capped():
    with pytest.raises(
        BadInput, match=r"engine.num_blocks: 4000000 is out of range: expected an integer in \[2, 524288\]"
    ):
        parse_scenario_dict({"engine": {"num_blocks": 4_000_000}})
    with pytest.raises(BadInput, match="3 steps, more than the limit 2"):
        parse_scenario_dict({"steps": [{"op": "reset"}] * 3}, "s", Limits(max_steps=2))
    with pytest.raises(BadInput, match="11 bytes is more than the 10-byte limit for a scenario"):
        parse_scenario_bytes(b"title = 'x'", "s.toml", Limits(max_file_bytes=10))


def test_engine_changes_are_checked_under_the_limits_given():
    sc = parse_scenario_dict({"steps": [arrive("A", "0:16")]})
    with pytest.raises(BadInput, match="num_blocks"):
        with_engine(sc, Limits(max_blocks=10), num_blocks=20)
    assert with_engine(sc, num_blocks=20).engine.num_blocks == 20


def _actual_cells(trace, record: bool) -> int:
    """What the snapshots of a replay hold: the pool's blocks and each live request's blocks."""
    if record:  # every step's state, as its readers see it
        snaps = [trace.snapshot_at(k) for k in range(len(trace.steps) + 1)]
    else:
        snaps = [trace.initial, trace.final]
    return sum(len(s.blocks) + sum(max(len(r.block_ids), len(r.block_hashes)) + 1 for r in s.requests) for s in snaps)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("record", [True, False])
def test_snapshot_cells_bound_what_the_snapshots_hold(seed, record):
    sc = parse_scenario_dict(random_scenario(seed, 60), "<random>")
    trace = replay(sc, record=record)
    assert _actual_cells(trace, record) <= snapshot_cells(sc, record)


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_every_lesson_is_far_inside_the_snapshot_budget(path):
    sc = load_scenario(path)
    cells = snapshot_cells(sc, True)
    assert _actual_cells(replay(sc), True) <= cells < CLI_LIMITS.max_snapshot_cells // 100


def test_a_replay_over_the_snapshot_budget_is_refused_before_it_starts():
    sc = parse_scenario_dict({"engine": {"num_blocks": 1000}, "steps": [{"op": "reset"}] * 9})
    limits = Limits(max_snapshot_cells=9_999)
    with pytest.raises(
        BadInput,
        match=r"replaying 9 steps on 1,000 blocks with a snapshot of every step would hold 10,000 block entries",
    ):
        replay(sc, limits=limits)
    assert replay(sc, record=False, limits=limits).final.num_free_blocks == 999  # lean: 2,000 entries
    assert len(replay(sc, upto=8, limits=limits).steps) == 8
