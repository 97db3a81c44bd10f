"""Our engine-step replay against vLLM 0.31.0's own Scheduler and AsyncScheduler, field by field.

The mirror (explorer/core/sched/, replayed by explorer/scenario/engine_steps.py) and the oracle
(vllm_sched_driver.py, vLLM's real scheduler on the CPU) read the same normalized scenario; every
step's scheduled tokens, outputs, preemptions, finished requests, events and step stats, and the
final state, must agree. Cases: the goldens of tests/scenario/golden/engine_steps/ (against the
live oracle and against vLLM's recorded answers), and a few hundred seeds of the oracle's random
generator, each under both schedulers. A missing vLLM fails, as the whole tier does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario, parse_scenario_dict
from tests.conformance.oracle import at_release, compare, modelled_cases, seeds_for
from tests.conformance.sched_oracle import golden_paths, oracle_kind, read_expected
from vllm_drivers.engine_step_scenarios import random_raw_scenario, under_both_schedulers

pytestmark = pytest.mark.conformance

GOLDEN = golden_paths()
REPO = Path(__file__).resolve().parents[2]
ENGINE_STEP_LESSONS = [p for p in sorted((REPO / "lessons").glob("*.toml")) if load_scenario(p).sched is not None]
RANDOM_SEEDS = range(300)
# Each (release, golden) that release models; a scenario refused as not modelled under a release
# would be left out by name here (oracle.refusal), and a test asserts there is none.
GOLDEN_CASES = modelled_cases(GOLDEN, load_scenario)
LESSON_CASES = modelled_cases(ENGINE_STEP_LESSONS, load_scenario)


def ours(scenario) -> dict:
    return replay(scenario, record=False).to_json()


def both_schedulers(seed: int) -> list[dict]:
    """The generator's scenario for ``seed``, as drawn and under the other scheduler."""
    return under_both_schedulers(random_raw_scenario(seed))


def test_there_are_goldens_for_both_schedulers():
    kinds = {load_scenario(p).sched.scheduler for p in GOLDEN}
    assert len(GOLDEN) >= 7 and kinds == {"sync", "async"}


def _ids(case) -> str:
    return f"{case[0]}-{case[1].stem}"


def test_every_golden_and_lesson_compares_under_both_releases():
    """No golden or lesson is refused as not modelled under either release (a KV connector with
    drafts under the sync scheduler, offloading_with_drafts, compares under 0.33.0 too)."""
    cases = {*GOLDEN_CASES, *LESSON_CASES}
    paths = [*GOLDEN, *ENGINE_STEP_LESSONS]
    assert all((r, p) in cases for r in ("0.31.0", "0.33.0") for p in paths)
    joined = [p.stem for p in paths if (sc := load_scenario(p)).connector is not None and sc.speculative is not None]
    assert "offloading_with_drafts" in joined and len(joined) >= 3, joined


@pytest.mark.parametrize("case", GOLDEN_CASES, ids=_ids)
def test_golden_matches_vllm_field_by_field(vllm_oracles, case):
    release, path = case
    scenario = load_scenario(path)
    vllm_sched_oracle = vllm_oracles.get(oracle_kind(scenario), release)  # drafts under async: their driver
    scenario = at_release(scenario, vllm_sched_oracle)
    trace = replay(scenario, record=False)
    if vllm_sched_oracle.vllm == "0.31.0":  # a golden's expects pin 0.31.0's numbers (EAGLE's drop)
        assert trace.expect_failures == []
    mine = trace.to_json()
    assert compare(mine, vllm_sched_oracle.replay(scenario.normalized(scenario.engine.hash_seed or None))) == []
    if vllm_sched_oracle.vllm == "0.31.0":  # the recorded answers are 0.31.0's
        assert compare(mine, read_expected(path)) == []


def test_there_are_engine_step_lessons():
    assert {p.stem[:2] for p in ENGINE_STEP_LESSONS} >= {"14", "15"}


@pytest.mark.parametrize("case", LESSON_CASES, ids=_ids)
def test_engine_step_lesson_matches_vllm_field_by_field(vllm_oracles, case):
    release, path = case
    scenario = load_scenario(path)
    vllm_sched_oracle = vllm_oracles.get(oracle_kind(scenario), release)
    scenario = at_release(scenario, vllm_sched_oracle)
    trace = replay(scenario, record=False)
    assert trace.expect_failures == []
    theirs = vllm_sched_oracle.replay(scenario.normalized(scenario.engine.hash_seed or None))
    assert compare(trace.to_json(), theirs) == []
    assert replay(scenario).to_json() == trace.to_json()


def test_the_recorded_golden_replays_the_same_as_the_lean_one():
    for path in GOLDEN:
        scenario = load_scenario(path)
        assert replay(scenario).to_json() == ours(scenario), path.stem


def test_random_engine_step_scenarios_match_vllm_under_both_schedulers(vllm_sched_oracle):
    scenarios = [
        at_release(
            parse_scenario_dict(raw, f"random engine steps seed {seed} ({raw['engine']['scheduler']})"),
            vllm_sched_oracle,
        )
        for seed in seeds_for(vllm_sched_oracle, RANDOM_SEEDS, 60)
        for raw in both_schedulers(seed)
    ]
    assert {sc.sched.scheduler for sc in scenarios} == {"sync", "async"}
    answers = vllm_sched_oracle.replay_many(sc.normalized(sc.engine.hash_seed or None) for sc in scenarios)
    differing = {}
    for sc, theirs in zip(scenarios, answers, strict=True):
        assert "error" not in theirs, (sc.source, theirs)
        diffs = compare(ours(sc), theirs)
        if diffs:
            differing[sc.source] = diffs[:5]
    assert differing == {}, f"{len(differing)} of {len(scenarios)} scenarios differ: {differing}"


def test_the_random_scenarios_exercise_what_the_scheduler_decides():
    """The seeds are worth comparing: they preempt, finish, chunk, share the budget, reset."""
    seen = {"preempted": 0, "finished": 0, "multi": 0, "no_update": 0, "reset_refused": 0, "hits": 0}
    for seed in RANDOM_SEEDS:
        for raw in both_schedulers(seed):
            for step in ours(parse_scenario_dict(raw))["steps"]:
                if step["op"] == "reset" and not step["ok"]:
                    seen["reset_refused"] += 1
                if step["op"] != "step":
                    continue
                seen["preempted"] += len(step["preempted"])
                seen["finished"] += len(step["finished"])
                seen["multi"] += len(step["scheduled"]) > 1
                seen["no_update"] += step["step_stats"] is None
                seen["hits"] += (step["step_stats"] or {}).get("hits", 0)
    assert all(n >= 50 for n in seen.values()), seen
