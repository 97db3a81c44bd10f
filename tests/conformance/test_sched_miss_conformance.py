"""Engine-step miss reasons (design section 14: ``misses`` on each step) against the same
reasons read from vLLM's own Scheduler (vllm_sched_miss_driver.py), whole answers compared.

Cases: every engine-step golden and lesson, random engine-step scenarios under both schedulers,
and random scenarios with the test connector and with the offloading connector. A scenario vLLM
refuses (the played model asked for a token past ``output``) must be refused by ours as well.
``behind_miss`` is rare: in one pool a hash's last copy is popped only after those of the
blocks behind it (a request frees its blocks tail first), unless a failed load drops a hash from
the middle of a chain. Lesson 21 does that (a request that shared the failed block is aborted
before the failure is known), so every reason an engine step can give is met, both releases.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from explorer.errors import BadInput
from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario, parse_scenario_dict
from tests.conformance.miss_oracle import VllmSchedMissOracle
from tests.conformance.oracle import RELEASES, at_release, compare, refusal
from tests.conformance.sched_oracle import VllmSchedOracle, golden_paths, oracle_kind
from vllm_drivers.engine_step_scenarios import (
    random_connector_raw_scenario,
    random_offloading_raw_scenario,
    random_raw_scenario,
    under_both_schedulers,
)

pytestmark = pytest.mark.conformance

REPO = Path(__file__).resolve().parents[2]
SEEDS = {"0.31.0": range(60), "0.33.0": range(20)}


def _asked(sc, release: str) -> bool:
    """Modelled under the release, and not drafts under the async scheduler: those need the
    async-drafts driver's played model runner, which the miss driver does not carry (the
    async-drafts tier compares them)."""
    return refusal(sc, release) is None and oracle_kind(sc) is VllmSchedOracle


def _cases(oracle) -> dict:
    release = oracle.vllm
    lessons = [p for p in sorted((REPO / "lessons").glob("*.toml")) if load_scenario(p).sched is not None]
    out = {}
    for path in [*golden_paths(), *lessons]:
        sc = load_scenario(path)
        if _asked(sc, release):
            out[path.name] = sc
    for seed in SEEDS[release]:
        for raw in under_both_schedulers(random_raw_scenario(seed)):
            name = f"seed {seed} ({raw['engine']['scheduler']})"
            out[name] = parse_scenario_dict(raw, name)
    for seed in SEEDS[release][:30]:
        for kind, draw in (
            ("connector", random_connector_raw_scenario),
            ("offloading", random_offloading_raw_scenario),
        ):
            sc = parse_scenario_dict(draw(seed), f"{kind} seed {seed}")
            if _asked(sc, release):
                out[sc.source] = sc
    return {k: at_release(sc, oracle) for k, sc in out.items()}


@pytest.mark.parametrize("release", RELEASES)
def test_engine_step_misses_match_vllms_scheduler(vllm_oracles, release):
    oracle = vllm_oracles.get(VllmSchedMissOracle, release)
    cases = _cases(oracle)
    answers = oracle.replay_many(sc.normalized(sc.engine.hash_seed or None) for sc in cases.values())
    differing = {}
    reasons: Counter[str] = Counter()
    lookups = refused = 0
    for (name, sc), theirs in zip(cases.items(), answers, strict=True):
        if "error" in theirs:  # a scenario vLLM refuses (the played model asked past `output`)
            with pytest.raises(BadInput):  # ours refuses it as well
                replay(sc, record=False)
            refused += 1
            continue
        ours = replay(sc, record=False).to_json()
        for step in theirs["steps"]:
            for m in (step.get("misses") or {}).values():
                lookups += 1
                reasons.update(m["tokens"].keys())
        diffs = compare(ours, theirs)
        if diffs:
            differing[name] = diffs[:4]
    assert not differing, f"{len(differing)} of {len(cases)} differ:\n" + "\n".join(
        f"{k}: {v}" for k, v in list(differing.items())[:20]
    )
    assert refused < len(cases) // 10, refused
    met = {"never_cached", "evicted", "reset", "failed_load", "skipped", "other_keys", "not_yet_cached", "window"}
    met |= {"partial_block", "last_token", "behind_miss"}
    assert lookups > (1000 if release == RELEASES[0] else 300) and met <= set(reasons), (lookups, reasons)
