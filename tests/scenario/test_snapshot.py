"""Snapshots share what did not change with the previous one, and say exactly what a fresh copy says.

Before, each snapshot copied every live request's hash tuple, so a recorded replay of N arrivals
held N^2/2 request copies; now unchanged pieces are the same objects (issue 13).
"""

from __future__ import annotations

import tracemalloc

import pytest

from explorer.scenario.engine import GROUP_0, ScenarioEngine, replay
from explorer.scenario.parse import parse_scenario_dict
from explorer.scenario.randgen import random_scenario
from explorer.scenario.snapshot import Snapshots


@pytest.mark.parametrize("seed", range(20))
def test_a_shared_snapshot_equals_a_fresh_one_at_every_step(seed):
    sc = parse_scenario_dict(random_scenario(seed, 80), "<random>")
    engine = ScenarioEngine(sc)
    assert engine.snapshot() == Snapshots(engine.manager, GROUP_0).take(
        engine.requests.values(), engine.totals.as_dict(), engine.window
    )
    for op in sc.ops:
        engine.apply(op)
        fresh = Snapshots(engine.manager, GROUP_0).take(
            engine.requests.values(), engine.totals.as_dict(), engine.window
        )
        assert engine.snapshot() == fresh, op.label


def arrivals(n: int, tokens: int) -> dict:
    steps = [{"op": "arrive", "id": f"r{i}", "prompt": f"{i * tokens}:{(i + 1) * tokens}"} for i in range(n)]
    return {"engine": {"num_blocks": 100}, "steps": steps}


def test_unchanged_pieces_are_the_same_objects():
    trace = replay(parse_scenario_dict(arrivals(5, 64)))
    snaps = [trace.snapshot_at(k) for k in range(1, len(trace.steps) + 1)]
    for before, after in zip(snaps, snaps[1:]):
        assert after.blocks is before.blocks  # an arrive touches no block
        assert after.free_queue is before.free_queue
        for old, new in zip(before.requests, after.requests):
            assert new is old  # the requests already there did not change
    admitted = replay(
        parse_scenario_dict({**arrivals(2, 64), "steps": arrivals(2, 64)["steps"] + [{"op": "admit", "id": "r0"}]})
    )
    n = len(admitted.steps)
    a, b = admitted.snapshot_at(n - 1), admitted.snapshot_at(n)
    assert b.blocks is not a.blocks and b.blocks != a.blocks
    changed = sum(1 for x, y in zip(a.blocks, b.blocks) if x is not y)
    assert changed == 4  # the four blocks r0 took; every other pair is shared
    assert b.requests[1] is a.requests[1]  # r1 did not change
    assert b.requests[0].block_hashes is a.requests[0].block_hashes  # r0 changed, its hashes did not


def _peak_bytes(n: int) -> int:
    sc = parse_scenario_dict(arrivals(n, 1024))
    tracemalloc.start()
    try:
        replay(sc)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_recorded_replay_grows_linearly_with_live_requests():
    small, large = _peak_bytes(100), _peak_bytes(200)
    # copying every live request's 64 hashes into every snapshot would quadruple; sharing doubles
    assert large < 2.6 * small, (small, large)
