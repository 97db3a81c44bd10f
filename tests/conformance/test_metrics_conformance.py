"""Our exposition and log line against vLLM 0.31.0's own Scheduler + OutputProcessor +
PrometheusStatLogger + LoggingStatLogger, for the same run (design section 11).

The oracle is ``vllm_metrics_driver.py`` (vLLM's classes, wired as AsyncLLM wires them); our
side is ``explorer.metrics`` on our replay's trace. Compared: after every `step` op (only an
update changes a metric), the samples that changed since the step before; after the last op,
every sample, every family's type and help text; and the log line (its level and text) and,
with speculative decoding, the SpecDecoding metrics line after it, with the loggers' clock at
one pace per step on both sides. Samples compare
as sets: ``*_created``, the timing histograms, ``vllm:cache_config_info`` and the offloading
connector's transfer and lookup-delay families excluded (``exposition_samples.py``). Cases: the
engine-step goldens, the engine-step lessons, random scenarios under both schedulers, random
static-connector, random offloading and random speculative scenarios. A missing vLLM fails, as the whole tier does.
"""

from __future__ import annotations

import pytest

from explorer.errors import BadInput
from explorer.metrics.replay import MetricsRecorder
from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario, parse_scenario_dict
from tests.conformance.engine_step_scenarios import (
    random_connector_raw_scenario,
    random_offloading_raw_scenario,
    under_both_schedulers,
)
from tests.conformance.exposition_samples import OFFLOAD_EXCLUDED, deltas, parse
from tests.conformance.oracle import VllmOracle
from tests.conformance.sched_oracle import HERE, golden_paths
from tests.conformance.spec_scenarios import random_spec_engine_steps
from tests.conformance.test_engine_steps_conformance import ENGINE_STEP_LESSONS, both_schedulers

pytestmark = pytest.mark.conformance

PACE = 0.5
REQUIRED = {
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
    "vllm:external_prefix_cache_queries",
    "vllm:external_prefix_cache_hits",
    "vllm:kv_cache_usage_perc",
    "vllm:num_preemptions",
    "vllm:prompt_tokens",
    "vllm:prompt_tokens_by_source",
    "vllm:prompt_tokens_cached",
    "vllm:request_prefill_kv_computed_tokens",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
}
RANDOM_SEEDS = range(25)
CONNECTOR_SEEDS = range(20)
OFFLOADING_SEEDS = range(40)
SPEC_SEEDS = range(40)
OFFLOAD_EXPORTED = {
    "vllm:kv_offload_allocation_failure",
    "vllm:kv_offload_cpu_allocation_size",
    "vllm:kv_offload_cpu_cache_usage_perc",
    "vllm:kv_offload_cpu_cache_write_usage_perc",
    "vllm:kv_offload_cpu_cache_read_usage_perc",
}
SERIES = '{engine="0",model_name="explorer"}'


class VllmMetricsOracle(VllmOracle):
    driver = HERE / "vllm_metrics_driver.py"


@pytest.fixture(scope="module")
def metrics_oracle():
    oracle = VllmMetricsOracle()
    try:
        yield oracle
    finally:
        oracle.close()


def normalized(scenario) -> dict:
    d = scenario.normalized(scenario.engine.hash_seed or None)
    d["metrics"] = {"pace": PACE}
    return d


def ours(scenario) -> dict:
    """Our answer in the driver's shape; the log line as vLLM prints it on the CPU oracle."""
    trace = replay(scenario, record=False)
    rec = MetricsRecorder.for_scenario(scenario, PACE, device_type="cpu")
    texts = []
    for step in trace.steps:
        rec.feed(step)
        if step.op.op == "step":
            texts.append(rec.exposition())
    samples, families = parse(rec.exposition())
    line = rec.log()
    return {
        "deltas": deltas(texts),
        "final": {"samples": samples, "families": families},
        "log": {"level": line.level, "text": line.text},
        "spec_log": None if line.spec_decoding is None else {"level": line.level, "text": line.spec_decoding},
    }


def differences(mine: dict, theirs: dict) -> list[str]:
    out = []
    for i, (a, b) in enumerate(zip(mine["deltas"], theirs["deltas"], strict=True)):
        if a != b:  # i counts step ops
            keys = sorted(set(a) ^ set(b) | {k for k in set(a) & set(b) if a[k] != b[k]})
            out.append(f"step op {i}: " + "; ".join(f"{k}: ours {a.get(k)} vLLM {b.get(k)}" for k in keys[:4]))
    for part in ("samples", "families"):
        a, b = mine["final"][part], theirs["final"][part]
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                out.append(f"final {part} {k}: ours {a.get(k)} vLLM {b.get(k)}")
    for part in ("log", "spec_log"):
        if mine[part] != theirs[part]:
            out.append(f"{part}: ours {mine[part]} vLLM {theirs[part]}")
    return out


def test_we_export_every_family_the_contract_names():
    scenario = load_scenario(ENGINE_STEP_LESSONS[0])
    assert set(ours(scenario)["final"]["families"]) >= REQUIRED


@pytest.mark.parametrize("path", golden_paths() + ENGINE_STEP_LESSONS, ids=lambda p: p.stem)
def test_exposition_and_log_line_match_vllm(metrics_oracle, path):
    scenario = load_scenario(path)
    theirs = metrics_oracle.replay(normalized(scenario))
    assert set(theirs["final"]["families"]) >= REQUIRED
    assert differences(ours(scenario), theirs) == []


def vllm_answers_equal_ours(metrics_oracle, scenarios) -> list:
    """vLLM's answers for the scenarios, each first checked equal to ours (its first three
    differences named when not): the random tests then count what the scenarios exercised."""
    answers = metrics_oracle.replay_many(normalized(sc) for sc in scenarios)
    differing = {}
    for sc, theirs in zip(scenarios, answers, strict=True):
        assert "error" not in theirs, (sc.source, theirs)
        diffs = differences(ours(sc), theirs)
        if diffs:
            differing[sc.source] = diffs[:3]
    assert differing == {}, f"{len(differing)} of {len(scenarios)} scenarios differ: {differing}"
    return answers


def test_random_scenarios_match_vllm_under_both_schedulers(metrics_oracle):
    scenarios = [
        parse_scenario_dict(raw, f"random engine steps seed {seed} ({raw['engine']['scheduler']})")
        for seed in RANDOM_SEEDS
        for raw in both_schedulers(seed)
    ]
    seen = {"preemptions": 0.0, "hits": 0.0, "finished": 0.0}
    for theirs in vllm_answers_equal_ours(metrics_oracle, scenarios):
        s = theirs["final"]["samples"]
        seen["preemptions"] += s['vllm:num_preemptions_total{engine="0",model_name="explorer"}']
        seen["hits"] += s['vllm:prefix_cache_hits_total{engine="0",model_name="explorer"}']
        seen["finished"] += s['vllm:request_prefill_kv_computed_tokens_count{engine="0",model_name="explorer"}']
    assert all(v >= 50 for v in seen.values()), seen


def test_random_connector_scenarios_match_vllm(metrics_oracle):
    """The external_* counters, external_kv_transfer and the external window rate with a KV
    connector (design section 10), under both schedulers; scenarios we refuse are left out."""
    scenarios = []
    for seed in CONNECTOR_SEEDS:
        raw = random_connector_raw_scenario(seed)
        for sched in ("async", "sync"):
            raw["engine"]["scheduler"] = sched
            try:
                sc = parse_scenario_dict(raw, f"random connector seed {seed} ({sched})")
                replay(sc, record=False)
            except BadInput:
                continue
            scenarios.append(sc)
    assert len(scenarios) >= 20
    external = 0.0
    for theirs in vllm_answers_equal_ours(metrics_oracle, scenarios):
        external += theirs["final"]["samples"][
            'vllm:external_prefix_cache_hits_total{engine="0",model_name="explorer"}'
        ]
    assert external > 0


def offload_families(families) -> set[str]:
    return {f for f in families if f.startswith("vllm:kv_offload_")}


def test_offloading_families_are_exported_or_excluded_by_name(metrics_oracle):
    """With the offloading connector vLLM registers exactly the families we export plus those we
    leave out: nothing of vLLM's is dropped unnamed, and every excluded name exists."""
    scenario = load_scenario(HERE.parent / "scenario/golden/engine_steps/offloading_larger_than_cpu_tier.toml")
    theirs = metrics_oracle.replay(normalized(scenario))
    assert offload_families(theirs["registered"]) == OFFLOAD_EXPORTED | OFFLOAD_EXCLUDED
    mine = ours(scenario)["final"]
    assert offload_families(mine["families"]) == OFFLOAD_EXPORTED == offload_families(theirs["final"]["families"])
    assert mine["samples"][f"vllm:kv_offload_allocation_failure_total{SERIES}"] > 0
    assert differences(ours(scenario), theirs) == []


def test_random_offloading_scenarios_match_vllm(metrics_oracle):
    """The offloading connector's scheduler-side families (and every other sample) on random
    offloading scenarios under both schedulers: tiers too small for a request (refused stores),
    evictions, loads pinning chunks (read usage) and stores in flight (write usage)."""
    scenarios = [
        parse_scenario_dict(raw, f"random offloading seed {seed} ({raw['engine']['scheduler']})")
        for seed in OFFLOADING_SEEDS
        for raw in under_both_schedulers(random_offloading_raw_scenario(seed))
    ]
    seen = {"failures": 0.0, "stores": 0.0, "write_usage": 0, "read_usage": 0}
    for theirs in vllm_answers_equal_ours(metrics_oracle, scenarios):
        s = theirs["final"]["samples"]
        seen["failures"] += s.get(f"vllm:kv_offload_allocation_failure_total{SERIES}", 0.0)
        seen["stores"] += s.get(f"vllm:kv_offload_cpu_allocation_size_count{SERIES}", 0.0)
        for d in theirs["deltas"]:
            seen["write_usage"] += d.get(f"vllm:kv_offload_cpu_cache_write_usage_perc{SERIES}", 0.0) > 0
            seen["read_usage"] += d.get(f"vllm:kv_offload_cpu_cache_read_usage_perc{SERIES}", 0.0) > 0
    assert all(v >= 10 for v in seen.values()), seen


def test_the_speculative_goldens_log_the_spec_decoding_line_as_vllm(metrics_oracle):
    paths = [p for p in golden_paths() + ENGINE_STEP_LESSONS if load_scenario(p).speculative is not None]
    assert len(paths) >= 4
    for path in paths:
        scenario = load_scenario(path)
        theirs = metrics_oracle.replay(normalized(scenario))
        assert theirs["spec_log"] is not None, path
        assert ours(scenario)["spec_log"] == theirs["spec_log"], path


def test_random_speculative_scenarios_match_vllm(metrics_oracle):
    """The SpecDecoding metrics line (and every sample, the spec-decode counters included) on
    random speculative engine-step scenarios, every drafting method (the generator draws the sync scheduler)."""
    scenarios = [parse_scenario_dict(random_spec_engine_steps(s), f"spec engine steps seed {s}") for s in SPEC_SEEDS]
    logged = sum(theirs["spec_log"] is not None for theirs in vllm_answers_equal_ours(metrics_oracle, scenarios))
    assert logged >= len(scenarios) // 2, logged
