"""Every lookup's reasons sum to the tokens it missed (design section 14), over random
scenarios at both levels and every feature, the lessons and the goldens."""

from __future__ import annotations

from pathlib import Path

import pytest

from explorer.miss.reasons import REASONS
from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario, parse_scenario_dict
from explorer.scenario.randgen import random_scenario
from explorer.scenario.recorder import StepError
from tests.conformance.spec_scenarios import random_spec_engine_steps, random_spec_manager
from vllm_drivers.engine_step_scenarios import (
    random_connector_raw_scenario,
    random_offloading_raw_scenario,
    random_raw_scenario,
)

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "lessons").glob("*.toml")) + sorted((ROOT / "tests/scenario/golden").rglob("*.toml"))


def _lookups(trace):
    """(step, request id, MISS json, hit tokens) of every lookup in the replay."""
    for s in trace.steps:
        d = s.to_json()
        if s.op.op == "admit" and d["miss"] is not None:
            yield s, s.op.id, s.miss
        for rid, m in (s.misses or {}).items():
            yield s, rid, m


def check(trace) -> int:
    n = 0
    for step, rid, m in _lookups(trace):
        n += 1
        missed = m.num_tokens - m.hit_tokens - m.external_tokens
        assert sum(m.tokens.values()) == missed, (step.index, rid, m)
        assert set(m.tokens) <= set(REASONS) and all(v > 0 for v in m.tokens.values())
        if step.op.op == "admit":
            assert m.hit_tokens == step.hit_tokens
        if m.first_miss == "evicted":
            assert m.evicted_by is not None and m.evicted_by.step <= step.index
        if m.first_miss_block is not None:
            assert m.block_reasons[m.first_miss_block] == m.first_miss
    return n


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_lessons_and_goldens(path):
    check(replay(load_scenario(path)))


@pytest.mark.parametrize("seed", range(12))
def test_random_manager_level(seed):
    for profile in ("mixed", "hybrid"):
        raw = random_scenario(seed, 40, profile=profile)
        assert check(replay(parse_scenario_dict(raw, "<random>"))) > 0


@pytest.mark.parametrize("seed", range(6))
def test_random_engine_steps_every_feature(seed):
    raws = [
        random_raw_scenario(seed),
        random_raw_scenario(seed, hybrid=True),
        random_connector_raw_scenario(seed),
        random_offloading_raw_scenario(seed),
        random_spec_engine_steps(seed),
        random_spec_manager(seed),
    ]
    replayed = 0
    for raw in raws:
        try:
            trace = replay(parse_scenario_dict(raw, "<random>"))
        except StepError:  # a draw the mirror refuses (the fidelity tier's business, not ours)
            continue
        check(trace)
        replayed += 1
    assert replayed >= 4
