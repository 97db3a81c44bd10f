"""The KV connector (design section 10) against vLLM 0.31.0's real Scheduler, field by field.

The goldens of tests/scenario/golden/engine_steps/connector_*.toml (the verified vectors of
spec part 2 rules 53-59) run with the other engine-step goldens in
test_engine_steps_conformance.py; here: that they exist, and random connector scenarios
(``random_connector_raw_scenario``) under both schedulers. vLLM's side is its own Scheduler
with our test connector (vllm_static_connector.py) and the worker played by the driver. A
scenario both sides refuse at the same step (an order vLLM takes from a set, or the played
model asked for a token past ``output``) counts as agreeing, but most must replay. A missing
vLLM fails, as the whole tier does.
"""

from __future__ import annotations

import re

import pytest

from explorer.errors import BadInput
from explorer.scenario.engine import replay
from explorer.scenario.parse import parse_scenario_dict
from tests.conformance.oracle import at_release, compare, seeds_for
from tests.conformance.sched_oracle import golden_paths
from vllm_drivers.engine_step_scenarios import random_connector_raw_scenario, under_both_schedulers

pytestmark = pytest.mark.conformance

SEEDS = range(150)


def scenarios(oracle=None) -> list:
    """The random batch, under ``oracle``'s release (the full batch under 0.31.0)."""
    out = []
    for seed in SEEDS if oracle is None else seeds_for(oracle, SEEDS, 40):
        for r in under_both_schedulers(random_connector_raw_scenario(seed)):
            sc = parse_scenario_dict(r, f"random connector seed {seed} ({r['engine']['scheduler']})")
            out.append(sc if oracle is None else at_release(sc, oracle))
    return out


def test_there_are_connector_goldens_for_every_verified_vector():
    names = {p.stem for p in golden_paths() if p.stem.startswith("connector_")}
    assert {
        "connector_async_load_sync",
        "connector_async_load_async",
        "connector_full_async_hit",
        "connector_sync_load",
        "connector_failed_load_fail_sync",
        "connector_failed_load_fail_async",
        "connector_failed_load_recompute_sync",
        "connector_failed_load_recompute_async",
        "connector_reset_external",
        "connector_proposal_example",
    } <= names


def test_random_connector_scenarios_match_vllm(vllm_sched_oracle):
    scs = scenarios(vllm_sched_oracle)
    answers = vllm_sched_oracle.replay_many(sc.normalized(sc.engine.hash_seed or None) for sc in scs)
    differing, refused = {}, 0
    seen = {"async_load": 0, "sync_load": 0, "no_external": 0, "finished": 0, "evicted": 0, "external_hits": 0}
    for sc, theirs in zip(scs, answers, strict=True):
        try:
            mine = replay(sc, record=False).to_json()
        except BadInput as e:
            # Refused by both, at the same step (ours counts from 1, the driver from 0).
            m = re.search(r"step (\d+) \(step\)", str(e))
            t = re.search(r"step (\d+) \(step\)", theirs.get("error", ""))
            assert m and t and int(m.group(1)) == int(t.group(1)) + 1, (sc.source, str(e), theirs)
            refused += 1
            continue
        assert "error" not in theirs, (sc.source, theirs)
        diffs = compare(mine, theirs)
        if diffs:
            differing[sc.source] = diffs[:5]
        for step in mine["steps"]:
            for rid, n in step.get("external", {}).items():
                load_async = rid not in step["scheduled"]
                seen["async_load" if load_async and n else "sync_load" if n else "no_external"] += 1
            seen["finished"] += len(step.get("finished", ()))
            seen["evicted"] += sum(e["type"] == "BlockRemoved" for e in step["events"])
        seen["external_hits"] += mine["final"]["stats"]["external_hits"] > 0
    assert differing == {}, f"{len(differing)} of {len(scs)} scenarios differ: {differing}"
    assert refused <= len(scs) // 10, refused
    assert all(n >= (10 if vllm_sched_oracle.vllm == "0.31.0" else 2) for n in seen.values()), seen
