"""Conformance tier: our replay against vLLM 0.31.0's own classes, field by field.

Every scenario is replayed twice: by our engine (explorer.scenario.engine.replay) and by vLLM's
BlockPool / KVCacheManager / Request driven by ``vllm_driver.py`` in ``.venv-vllm`` (one
driver process for the whole session). The two replay JSONs (design section 5) must be equal:
every step's outcome, hit, new blocks and events; the final free queue, every block's ref_cnt
and hash, the hash map with its duplicates, the live requests, the stats, the reset outcomes,
NONE_HASH and the seed it came from.

Scenarios: every checked-in golden scenario (tests/scenario/golden/*.toml), every lesson scenario
(lessons/*.toml), both globbed at collection time, and a few hundred random valid scenarios
from explorer.scenario.randgen with fixed seeds, sent to the driver as one pipelined batch.

Seeds: a scenario with an explicit seed, or an xxhash scenario without one (given a seed of the
shape vLLM would draw, derived from the scenario: oracle.drawn_seed), sends that seed to vLLM, so
both sides hash from the same NONE_HASH. A
sha256 scenario without a seed sends none, so vLLM's own default ("vllm-none-hash") is used and
compared with ours.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario, parse_scenario_dict
from explorer.scenario.randgen import random_scenario
from explorer.scenario.spec import Scenario
from tests.conformance.oracle import RELEASES, VllmOracle, at_release, compare, drawn_seed

pytestmark = pytest.mark.conformance

REPO = Path(__file__).resolve().parents[2]
GOLDEN = sorted((REPO / "tests" / "scenario" / "golden").glob("*.toml"))
# Manager-level lessons; the engine-step ones are compared with vLLM's scheduler in
# test_engine_steps_conformance.py.
LESSONS = [p for p in sorted((REPO / "lessons").glob("*.toml")) if load_scenario(p).sched is None]

RANDOM_SEEDS = range(300)
# 0.33.0 shares every manager-level rule but EAGLE's (covered by the goldens and the spec tier):
# a smaller random batch keeps the suite fast.
RANDOM_SEEDS_BY_RELEASE = {"0.31.0": RANDOM_SEEDS, "0.33.0": range(60)}
RANDOM_CASES = [pytest.param(r, s, id=f"{r}-{s}") for r in RELEASES for s in RANDOM_SEEDS_BY_RELEASE[r]]
RANDOM_OPS = (20, 90)  # ops per random scenario: seed-drawn in this range
MAX_SHOWN = 25


def _vllm_seed(scenario: Scenario) -> tuple[str | None, str | None]:
    """(seed for our replay, seed for vLLM's): see the module docstring."""
    cfg = scenario.engine
    if not cfg.enable_prefix_caching:
        return None, None
    if cfg.hash_seed:
        return cfg.hash_seed, cfg.hash_seed
    if cfg.hash_algo.startswith("xxhash"):
        drawn = drawn_seed(scenario)  # a seed of the shape vLLM draws, the same every run
        return drawn, drawn
    return None, None  # vLLM's default, and ours


def _ours(scenario: Scenario, seed: str | None) -> dict:
    trace = replay(scenario, hash_seed=seed)
    if seed is not None:
        assert trace.hash_seed == seed
    return trace.to_json()


def _report(name: str, diffs: list[str]) -> str:
    shown = "\n  ".join(diffs[:MAX_SHOWN])
    more = f"\n  ... and {len(diffs) - MAX_SHOWN} more" if len(diffs) > MAX_SHOWN else ""
    return f"{name}: {len(diffs)} difference(s) from vLLM:\n  {shown}{more}"


def _check_file(vllm_oracle, path: Path) -> None:
    scenario = at_release(load_scenario(path), vllm_oracle)
    ours_seed, vllm_seed = _vllm_seed(scenario)
    ours = _ours(scenario, ours_seed)
    theirs = vllm_oracle.replay(scenario.normalized(vllm_seed))
    diffs = compare(ours, theirs)
    assert not diffs, _report(str(path.relative_to(REPO)), diffs)


# ---- checked-in scenarios -----------------------------------------------------------------


def test_golden_scenarios_exist():
    assert GOLDEN, "no tests/scenario/golden/*.toml: the conformance tier needs at least one golden scenario"


def test_lesson_scenarios_exist():
    assert LESSONS, "no lessons/*.toml: the conformance tier needs at least one lesson scenario"


@pytest.mark.parametrize("path", GOLDEN, ids=[p.name for p in GOLDEN])
def test_golden_scenario_matches_vllm(vllm_oracle, path):
    _check_file(vllm_oracle, path)


@pytest.mark.parametrize("path", LESSONS, ids=[p.name for p in LESSONS])
def test_lesson_scenario_matches_vllm(vllm_oracle, path):
    _check_file(vllm_oracle, path)


# ---- random scenarios ---------------------------------------------------------------------


def random_case(seed: int) -> dict:
    """The raw random scenario of one seed (its length is drawn from the seed too)."""
    lo, hi = RANDOM_OPS
    return random_scenario(seed, lo + (seed * 7919) % (hi - lo + 1))


def results_beside_vllm(vllm_oracle, scenarios: dict) -> dict:
    """key -> (our replay JSON, vLLM's answer) for each scenario. vLLM's side goes as one
    pipelined batch from a thread (the driver replays in its own process) while we replay ours
    here."""
    scenarios = {key: at_release(sc, vllm_oracle) for key, sc in scenarios.items()}
    cases = {key: (sc, *_vllm_seed(sc)) for key, sc in scenarios.items()}
    answers: list = []
    failure: list[BaseException] = []

    def ask() -> None:
        try:
            answers.extend(vllm_oracle.replay_many(sc.normalized(vs) for sc, _, vs in cases.values()))
        except BaseException as exc:  # re-raised below, in the test's thread
            failure.append(exc)

    asker = threading.Thread(target=ask, name="vllm-batch")
    asker.start()
    ours = {key: _ours(sc, os_) for key, (sc, os_, _) in cases.items()}
    asker.join()
    if failure:
        raise failure[0]
    return {key: (ours[key], theirs) for key, theirs in zip(cases, answers)}


class RandomResults:
    """release -> seed -> (our replay JSON, vLLM's answer), each release's batch replayed on
    first use."""

    def __init__(self, oracles) -> None:
        self.oracles = oracles
        self.by_release: dict[str, dict] = {}

    def __call__(self, release: str) -> dict:
        if release not in self.by_release:
            oracle = self.oracles.get(VllmOracle, release)
            seeds = RANDOM_SEEDS_BY_RELEASE[release]
            self.by_release[release] = results_beside_vllm(
                oracle, {seed: parse_scenario_dict(random_case(seed), f"random seed {seed}") for seed in seeds}
            )
        return self.by_release[release]


@pytest.fixture(scope="module")
def random_results(vllm_oracles):
    return RandomResults(vllm_oracles)


@pytest.mark.parametrize(("release", "seed"), RANDOM_CASES)
def test_random_scenario_matches_vllm(random_results, release, seed):
    ours, theirs = random_results(release)[seed]
    assert "error" not in theirs, f"random seed {seed} (vLLM {release}): vLLM raised: {theirs['error']}"
    diffs = compare(ours, theirs)
    assert not diffs, _report(f"random seed {seed} (vLLM {release})", diffs)


def test_random_scenarios_cover_the_features(random_results):
    random_results = random_results("0.31.0")
    """The random batch exercises what it is meant to: a guard against a generator drifting
    into only easy cases."""
    seen = {"ok_false": 0, "hit": 0, "reset_refused": 0, "reset_ok": 0, "removed": 0, "stored": 0, "cleared": 0}
    ops: set[str] = set()
    for ours, _ in random_results.values():
        for step in ours["steps"]:
            ops.add(step["op"])
            if step["op"] in ("admit", "decode", "generate") and not step["ok"]:
                seen["ok_false"] += 1
            if step.get("hit_tokens"):
                seen["hit"] += 1
            if step["op"] == "reset":
                seen["reset_ok" if step["ok"] else "reset_refused"] += 1
            for ev in step["events"]:
                key = {"BlockStored": "stored", "BlockRemoved": "removed", "AllBlocksCleared": "cleared"}[ev["type"]]
                seen[key] += 1
    assert ops == {"arrive", "admit", "sample", "decode", "generate", "finish", "preempt", "reset"}
    assert all(n >= 20 for n in seen.values()), seen
