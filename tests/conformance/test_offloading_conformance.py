"""The offloading connector (design section 10) against vLLM 0.31.0's and 0.33.0's own
OffloadingConnector (0.33.0's CPU tier ranks chunks per request: the request_scoped_cpu_lru
switch).

vLLM's side is its real Scheduler / AsyncScheduler with its real ``OffloadingConnector``
scheduler side (``OffloadingConnectorScheduler`` over ``CPUOffloadingManager``, LRU), built on
the CPU by vLLM's connector factory; the driver plays the worker (vllm_offloading.py). The
goldens of tests/scenario/golden/engine_steps/offloading_*.toml run with the other engine-step
goldens in test_engine_steps_conformance.py; here: that they exist, and random offloading
scenarios (``random_offloading_raw_scenario``) under both schedulers and each release, compared
field by field with zero differences, and drawn so that every behaviour the connector has is exercised. A
missing vLLM fails, as the whole tier does.
"""

from __future__ import annotations

from collections import Counter

import pytest

from explorer.scenario.engine import replay
from explorer.scenario.ops import EngineReset
from explorer.scenario.parse import load_scenario, parse_scenario_dict
from tests.conformance.oracle import at_release, compare, refusal
from tests.conformance.sched_oracle import golden_paths
from vllm_drivers.engine_step_scenarios import random_offloading_raw_scenario, under_both_schedulers

pytestmark = pytest.mark.conformance

SEEDS = range(120)


def scenarios() -> list:
    """The random batch (engine.vllm unset: 0.31.0)."""
    out = []
    for seed in SEEDS:
        for r in under_both_schedulers(random_offloading_raw_scenario(seed)):
            out.append(parse_scenario_dict(r, f"random offloading seed {seed} ({r['engine']['scheduler']})"))
    return out


def test_both_releases_replay_the_offloading_scenarios():
    scs = scenarios()[::8]
    scs += [load_scenario(p) for p in golden_paths() if p.stem.startswith("offloading_")]
    for sc in scs:
        assert refusal(sc, "0.31.0") is None, sc.source
        line = refusal(sc, "0.33.0")
        # the one thing 0.33.0 refuses here: a KV connector with drafts under the sync scheduler
        assert line is None or ("speculative decoding" in line and sc.speculative is not None), sc.source


def test_there_are_offloading_goldens():
    names = {p.stem for p in golden_paths() if p.stem.startswith("offloading_")}
    assert {
        "offloading_back_from_cpu",
        "offloading_back_from_cpu_async",
        "offloading_larger_than_cpu_tier",
        "offloading_cpu_lru_eviction",
        "offloading_store_pending_none",
    } <= names


def test_random_offloading_scenarios_match_vllm(vllm_sched_oracle):
    scs = [at_release(sc, vllm_sched_oracle) for sc in scenarios()]
    answers = vllm_sched_oracle.replay_many(sc.normalized(sc.engine.hash_seed or None) for sc in scs)
    differing = {}
    seen: Counter[str] = Counter()
    for sc, theirs in zip(scs, answers, strict=True):
        assert "error" not in theirs, (sc.source, theirs)
        trace = replay(sc)  # recorded: the connector's reports say what was exercised
        diffs = compare(trace.to_json(), theirs)
        if diffs:
            differing[sc.source] = diffs[:5]
        for step in trace.steps:
            es = step.engine_step
            if es is None:
                continue
            for report in es.connector:
                if report.kind == "lookup" and report.num_external_tokens is None:
                    seen["lookup_none"] += 1
                elif report.kind == "cpu_load":
                    seen["cpu_load"] += 1
                elif report.kind == "cpu_store":
                    seen["store_refused" if report.refused else "cpu_store"] += 1
                    seen["cpu_evicted"] += bool(report.cpu_evicted)
            seen["cpu_events"] += sum(getattr(e, "medium", None) == "CPU" for e in step.events)
        seen["reset_external"] += sum(isinstance(op, EngineReset) and op.external for op in sc.ops)
    assert differing == {}, f"{len(differing)} of {len(scs)} scenarios differ: {differing}"
    for what in (
        "lookup_none",
        "cpu_load",
        "cpu_store",
        "store_refused",
        "cpu_evicted",
        "cpu_events",
        "reset_external",
    ):
        assert seen[what] >= 10, seen
