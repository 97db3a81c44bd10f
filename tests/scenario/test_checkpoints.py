"""A recorded replay's states come from checkpoints and a cursor (explorer/scenario/checkpoints.py):
every `snapshot_at(k)`, read forwards, backwards and at random, must equal the snapshot the old
way took after every step (a fresh recording engine, snapshotted after each op).

Over every lesson, every golden and random scenarios of each generator kind, with the default
spacing and with a checkpoint every few steps (so that short scenarios copy engines too). The
mutation tests show that the comparison notices a broken forward drive or a checkpoint that
shares the pool with the engine it was copied from.
"""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest

from explorer.core.kv_cache_utils import KVCacheBlock
from explorer.errors import BadInput
from explorer.scenario import checkpoints
from explorer.scenario.checkpoints import States, run_ops, spacing_for
from explorer.scenario.engine import engine_for, replay
from explorer.scenario.parse import load_scenario, parse_scenario_dict
from explorer.scenario.randgen import random_scenario
from explorer.scenario.spec import Scenario
from explorer.scenario.trace import Snapshot, Trace
from tests.conformance.spec_scenarios import random_spec_engine_steps, random_spec_manager
from vllm_drivers.engine_step_scenarios import (
    random_connector_raw_scenario,
    random_offloading_raw_scenario,
    random_raw_scenario,
    under_both_schedulers,
)

ROOT = Path(__file__).resolve().parents[2]
LESSONS = sorted((ROOT / "lessons").glob("*.toml"))
GOLDENS = sorted((ROOT / "tests" / "scenario" / "golden").rglob("*.toml"))


def _random(kind: str, seed: int) -> list[Scenario]:
    if kind in ("mixed", "hybrid"):
        return [parse_scenario_dict(random_scenario(seed, 70, profile=kind), f"<{kind} {seed}>")]
    if kind == "eagle":
        return [parse_scenario_dict(random_spec_manager(seed), f"<eagle {seed}>")]
    raws = {
        "engine": lambda: under_both_schedulers(random_raw_scenario(seed)),
        "engine-hybrid": lambda: under_both_schedulers(random_raw_scenario(seed, hybrid=True)),
        "engine-eagle": lambda: [random_spec_engine_steps(seed)],
        "connector": lambda: [random_connector_raw_scenario(seed)],
        "offloading": lambda: [random_offloading_raw_scenario(seed)],
    }[kind]()
    return [parse_scenario_dict(r, f"<{kind} {seed}>") for r in raws]


RANDOM = [(kind, seed) for kind in ("mixed", "hybrid", "eagle") for seed in range(4)] + [
    (kind, seed)
    for kind in ("engine", "engine-hybrid", "engine-eagle", "connector", "offloading")
    for seed in (1, 2, 3)
]


def every_step_snapshots(scenario: Scenario, hash_seed: str | None, num_ops: int) -> list[Snapshot]:
    """The old way: a recording engine snapshotted after every op."""
    engine = engine_for(scenario, hash_seed)
    snaps = [engine.snapshot()]
    for op in scenario.ops[:num_ops]:
        engine.apply(op)
        snaps.append(engine.snapshot())
    return snaps


def recorded(scenario: Scenario) -> Trace:
    """The page's replay: up to the first op the engine refuses."""
    return run_ops(engine_for(scenario), scenario.ops, catch=BadInput)[0]


def mismatches(trace: Trace, reference: list[Snapshot], seed: int = 0) -> list[str]:
    """Every read of every state, in three orders, against the reference."""
    n = len(trace.steps)
    assert len(reference) == n + 1
    rng = random.Random(seed)
    orders = {
        "forwards": list(range(n + 1)),
        "backwards": list(range(n, -1, -1)),
        "random": [rng.randrange(n + 1) for _ in range(2 * n + 2)],
    }
    bad = []
    for name, ks in orders.items():
        for k in ks:
            if trace.snapshot_at(k) != reference[k]:
                bad.append(f"{name}: state after step {k}")
    for k in range(n + 1):
        s = trace.stats_at(k)
        if (dict(s.stats), s.window_hit_rate, s.window_requests) != (
            dict(reference[k].stats),
            reference[k].window_hit_rate,
            reference[k].window_requests,
        ):
            bad.append(f"stats after step {k}")
    if trace.final != reference[n]:
        bad.append("final")
    return bad


def check(scenario: Scenario) -> int:
    trace = recorded(scenario)
    reference = every_step_snapshots(scenario, trace.hash_seed, len(trace.steps))
    bad = mismatches(trace, reference)
    assert not bad, f"{scenario.source}: {bad[:5]}"
    return len(trace.steps)


@pytest.fixture(params=["default", "dense"])
def spacing(request, monkeypatch):
    """default: max(16, steps / 8); dense: a checkpoint every 3 steps, so every scenario copies."""
    if request.param == "dense":
        monkeypatch.setattr(checkpoints, "MIN_SPACING", 3)
        monkeypatch.setattr(checkpoints, "MAX_CHECKPOINTS", 10_000)
    return request.param


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_every_lesson(path, spacing):
    check(load_scenario(path))


@pytest.mark.parametrize("path", GOLDENS, ids=lambda p: str(p.relative_to(ROOT / "tests" / "scenario" / "golden")))
def test_every_golden(path, spacing):
    check(load_scenario(path))


@pytest.mark.parametrize(("kind", "seed"), RANDOM, ids=[f"{k}-{s}" for k, s in RANDOM])
def test_random_scenarios(kind, seed, spacing):
    for sc in _random(kind, seed):
        check(sc)


def test_the_checkpoints_are_bounded_in_number_not_only_spaced():
    assert spacing_for(10) == 16 and spacing_for(128) == 16 and spacing_for(129) == 17
    assert spacing_for(10_000) == 1_250
    sc = parse_scenario_dict(random_scenario(3, 400, profile="bench", engine={"num_blocks": 200}), "<bench>")
    trace = replay(sc)
    assert isinstance(trace.states, States)
    steps = trace.states.checkpoint_steps
    assert len(steps) <= checkpoints.MAX_CHECKPOINTS and steps == tuple(range(50, 400, 50))
    assert replay(sc, record=False).states is None  # a lean replay keeps only its final state


def test_a_walk_keeps_the_last_two_states_and_shares_what_did_not_change():
    sc = parse_scenario_dict(random_scenario(5, 60), "<random>")
    trace = replay(sc)
    a, b = trace.snapshot_at(20), trace.snapshot_at(21)
    assert trace.snapshot_at(20) is a and trace.snapshot_at(21) is b  # read again: no replay
    c = trace.snapshot_at(22)
    assert c.free_queue is b.free_queue or c.free_queue != b.free_queue  # shared while equal
    assert all(x is y for x, y in zip(b.requests, c.requests) if x == y)


def test_sessions_reading_at_once_read_the_same_states():
    sc = parse_scenario_dict(random_scenario(11, 90, profile="bench", engine={"num_blocks": 80}), "<bench>")
    trace = replay(sc)
    reference = every_step_snapshots(sc, trace.hash_seed, len(trace.steps))
    failures: list[str] = []

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(60):
            k = rng.randrange(len(reference))
            if trace.snapshot_at(k) != reference[k]:
                failures.append(f"reader {seed}: step {k}")

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


def test_the_replay_json_is_what_it_was():
    """to_json reads the final state only: recorded and lean agree, the checkpoints change nothing."""
    for path in LESSONS[:6] + GOLDENS[:6]:
        sc = load_scenario(path)
        assert replay(sc).to_json() == replay(sc, record=False).to_json()


# ---- the proof notices a broken drive or copy ---------------------------------------------------


MUTATION_CASES = [load_scenario(ROOT / "lessons" / "06_free_order_lru.toml"), *_random("engine", 2)[:1]]


def proof_fails(sc: Scenario) -> bool:
    """Whether checking ``sc`` finds a wrong state (or the broken engine breaks on the way)."""
    trace = recorded(sc)
    reference = every_step_snapshots(sc, trace.hash_seed, len(trace.steps))
    try:
        return bool(mismatches(trace, reference))
    except AssertionError:  # the core's own checks (a broken free list)
        return True


def test_a_drive_that_skips_an_op_fails_the_proof(monkeypatch):
    real = States.drive

    def skipping(engine, op):
        if op.index % 7 != 5:
            real(engine, op)

    monkeypatch.setattr(States, "drive", staticmethod(skipping))
    for sc in MUTATION_CASES:
        assert proof_fails(sc), sc.source


def test_a_checkpoint_sharing_the_pool_fails_the_proof(monkeypatch):
    monkeypatch.setattr(checkpoints, "MIN_SPACING", 3)
    monkeypatch.setattr(KVCacheBlock, "__deepcopy__", lambda self, memo: self)
    for sc in MUTATION_CASES:
        assert proof_fails(sc), sc.source
