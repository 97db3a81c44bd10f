"""A tracker without records (a trace replay's sweep) gives every lookup the same reasons as
one with records; only `evicted_by` is missing. Both hear the same replays side by side: the
lessons, the goldens and random scenarios with resets, failed loads and the CPU tier (where
the set of evicted keys turns into records at the first removal of another cause)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import explorer.scenario.engine as manager_engine
import explorer.scenario.engine_steps as engine_steps
from explorer.core.kv_cache_observer import KVCacheObserver
from explorer.miss.reasons import Miss, MissTracker
from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario, parse_scenario_dict
from explorer.scenario.recorder import StepError
from vllm_drivers.engine_step_scenarios import (
    random_connector_raw_scenario,
    random_offloading_raw_scenario,
    random_raw_scenario,
)

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "lessons").glob("*.toml")) + sorted((ROOT / "tests/scenario/golden").rglob("*.toml"))


class _Twin(MissTracker):
    """A tracker with records that passes every report to a twin without, and compares."""

    # lookups compared; of them with a first block evicted; and after a reset or failed load
    compared: list[int] = [0, 0, 0]

    def __init__(self, block_size: int) -> None:
        super().__init__(block_size)
        self.lean = MissTracker(block_size, records=False)

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name == "step" and hasattr(self, "lean"):
            self.lean.step = value

    def take(self) -> dict[str, Miss]:
        full, lean = super().take(), self.lean.take()
        assert full.keys() == lean.keys()
        for rid, m in full.items():
            o = lean[rid]
            assert (o.tokens, o.block_reasons, o.first_miss, o.first_miss_block) == (
                m.tokens,
                m.block_reasons,
                m.first_miss,
                m.first_miss_block,
            ), rid
            assert o.evicted_by is None
            _Twin.compared[0] += 1
            _Twin.compared[1] += m.evicted_by is not None
            _Twin.compared[2] += self.lean._ever() is self.lean._removed
        return full


def _forward(name: str) -> Any:
    def call(self: _Twin, *args: Any) -> Any:
        getattr(self.lean, name)(*args)
        return getattr(MissTracker, name)(self, *args)

    return call


for _name in dir(KVCacheObserver):
    if _name.startswith("on_") and _name in MissTracker.__dict__:
        setattr(_Twin, _name, _forward(_name))


@pytest.fixture
def twin(monkeypatch):
    monkeypatch.setattr(manager_engine, "MissTracker", _Twin)
    monkeypatch.setattr(engine_steps, "MissTracker", _Twin)
    _Twin.compared = [0, 0, 0]
    return _Twin


def test_lessons_and_goldens(twin):
    for path in FILES:
        replay(load_scenario(path))
    assert twin.compared[0] > 250 and twin.compared[1] > 20 and twin.compared[2] > 10, twin.compared


@pytest.mark.parametrize("seed", range(4))
def test_random_engine_steps_with_resets_and_failed_loads(twin, seed):
    replayed = 0
    for raw in (
        random_raw_scenario(seed),
        random_raw_scenario(seed, hybrid=True),
        random_connector_raw_scenario(seed),
        random_offloading_raw_scenario(seed),
    ):
        try:
            replay(parse_scenario_dict(raw, "<random>"))
        except StepError:  # a draw the mirror refuses (the fidelity tier's business)
            continue
        replayed += 1
    assert replayed >= 3 and twin.compared[0] > 0, twin.compared
