"""The miss reasons (design section 14) against the same reasons read from vLLM's own state.

vllm_miss_driver.py replays each manager-level scenario through vLLM's KVCacheManager and
classifies every lookup from vLLM's objects (the request's block hashes, the pool's hash map,
the running requests, the pool's pops, resets and cached blocks); our replay classifies from
the core's reports. The two answers must be equal whole, each admit's ``miss`` included, on
every golden and manager-level lesson with a miss and on random scenarios of every
manager-level kind (the plain generator, its hybrid profile, speculative decoding).

Every reason the manager level can produce must occur: ``failed_load`` needs a KV connector
and ``other_instance`` the Router, neither of which a manager-level scenario has.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from explorer.miss.reasons import REASONS
from explorer.scenario.parse import load_scenario, parse_scenario_dict
from explorer.scenario.randgen import random_scenario
from tests.conformance.miss_oracle import VllmMissOracle
from tests.conformance.oracle import RELEASES, compare, modelled_cases, refusal
from tests.conformance.spec_scenarios import random_spec_manager
from tests.conformance.test_conformance import random_case, results_beside_vllm

pytestmark = pytest.mark.conformance

REPO = Path(__file__).resolve().parents[2]
# Every reason of section 14 but two: failed_load needs a KV connector, other_instance the Router.
MANAGER_REASONS = set(REASONS) - {"failed_load", "other_instance"}
# kind -> (seeds under 0.31.0, seeds under 0.33.0). Speculative scenarios run under 0.31.0 only:
# 0.33.0 has no EAGLE drop (lookahead hashes instead), and a scenario drawn for 0.31.0 may leave
# a fully hit prompt nothing to compute there (the spec tier checks both sides refuse it).
RANDOM_KINDS = {
    "plain": (range(100), range(30)),
    "hybrid": (range(30), range(10)),
    "spec": (range(30), range(0)),
}


def _files() -> list[Path]:
    golden = sorted((REPO / "tests" / "scenario" / "golden").glob("*.toml"))
    lessons = [p for p in sorted((REPO / "lessons").glob("*.toml")) if load_scenario(p).sched is None]
    return golden + lessons


def _raw(kind: str, seed: int) -> dict:
    if kind == "plain":
        return random_case(seed)
    if kind == "hybrid":
        return random_scenario(seed, 60, profile="hybrid")
    return random_spec_manager(seed)


def _misses(answer: dict) -> list[dict]:
    return [s["miss"] for s in answer["steps"] if s["op"] == "admit" and s.get("miss")]


class Results:
    """release -> name -> (our replay JSON, vLLM's), each release's batch asked once."""

    def __init__(self, oracles) -> None:
        self.oracles = oracles
        self.by_release: dict[str, dict] = {}

    def __call__(self, release: str) -> dict:
        if release not in self.by_release:
            oracle = self.oracles.get(VllmMissOracle, release)
            scenarios = {}
            for path in _files():
                sc = load_scenario(path)
                if refusal(sc, release) is None:
                    scenarios[path.name] = sc
            for kind, seeds in RANDOM_KINDS.items():
                for seed in seeds[RELEASES.index(release)]:
                    name = f"{kind} seed {seed}"
                    sc = parse_scenario_dict(_raw(kind, seed), name)
                    if refusal(sc, release) is None:
                        scenarios[name] = sc
            self.by_release[release] = results_beside_vllm(oracle, scenarios)
        return self.by_release[release]


@pytest.fixture(scope="module")
def results(vllm_oracles):
    return Results(vllm_oracles)


def test_files_with_a_miss_exist():
    assert len(modelled_cases(_files(), load_scenario)) > 10


@pytest.mark.parametrize("release", RELEASES)
def test_miss_records_match_vllms_state(results, release):
    differing = {}
    compared = 0
    for name, (ours, theirs) in results(release).items():
        assert "error" not in theirs, f"{name} (vLLM {release}): vLLM raised: {theirs['error']}"
        if not _misses(ours) and not _misses(theirs):
            continue  # nothing looked up: the plain conformance tier compares it
        compared += 1
        diffs = compare(ours, theirs)
        if diffs:
            differing[name] = diffs[:4]
    assert not differing, f"{len(differing)} of {compared} differ from vLLM:\n" + "\n".join(
        f"{k}: {v}" for k, v in list(differing.items())[:20]
    )
    assert compared >= (150 if release == RELEASES[0] else 50), compared


def test_every_manager_level_reason_occurs(results):
    """Each reason the manager level can produce occurs a few times in vLLM's records, and as
    the first miss of some lookup."""
    tokens: Counter[str] = Counter()
    first: Counter[str] = Counter()
    evicted_by = 0
    for _, theirs in results(RELEASES[0]).values():
        for m in _misses(theirs):
            tokens.update({r: 1 for r in m["tokens"]})
            first[m["first_miss"]] += 1
            evicted_by += m["evicted_by"] is not None
    assert set(tokens) == MANAGER_REASONS, set(tokens) ^ MANAGER_REASONS
    assert all(tokens[r] >= 3 for r in MANAGER_REASONS), tokens
    assert evicted_by >= 3
    assert len(first) >= 8, first
