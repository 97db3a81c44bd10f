"""The manager's invariants (tests/core/invariants.py) after every op of random hybrid
scenarios, manager-level and engine steps: free queue + in use = the pool, ref counts equal
the block tables holding each block (null blocks apart), the hash map (partial tail entries
included) consistent with the blocks, nulls only leading a window group's table, and the KV
events a subscriber mirrors equal to what the pool caches."""

from __future__ import annotations

import pytest

from explorer.scenario.engine import ScenarioEngine
from explorer.scenario.engine_steps import EngineStepReplay
from explorer.scenario.parse import parse_scenario_dict
from explorer.scenario.randgen import random_scenario
from tests.core.invariants import EventMirror, check_invariants
from vllm_drivers.engine_step_scenarios import random_raw_scenario


@pytest.mark.parametrize("seed", range(60))
def test_invariants_hold_after_every_op_of_a_random_hybrid_scenario(seed):
    sc = parse_scenario_dict(random_scenario(seed, 60, profile="hybrid"), f"hybrid seed {seed}")
    engine = ScenarioEngine(sc, "0" if sc.engine.hash_algo.startswith("xxhash") else None, record=False)
    mirror = EventMirror()
    for op in sc.ops:
        step = engine.apply(op)
        check_invariants(engine.manager, engine.requests.values())
        if sc.engine.events and sc.engine.enable_prefix_caching:
            mirror.apply(step.events)
            mirror.check(engine.manager)


@pytest.mark.parametrize("seed", range(30))
def test_invariants_hold_after_every_engine_step_of_a_random_hybrid_scenario(seed):
    sc = parse_scenario_dict(random_raw_scenario(seed, hybrid=True), f"hybrid steps seed {seed}")
    engine = EngineStepReplay(sc, sc.engine.hash_seed or None, record=False)
    for op in sc.ops:
        engine.apply(op)
        check_invariants(engine.manager, engine.scheduler.requests.values())
