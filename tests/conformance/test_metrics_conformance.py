"""Our exposition and log line against vLLM 0.31.0's own Scheduler + OutputProcessor +
PrometheusStatLogger + LoggingStatLogger, for the same run (design section 11).

The oracle is ``vllm_metrics_driver.py`` (vLLM's classes, wired as AsyncLLM wires them); our
side is ``explorer.metrics`` on our replay's trace. Compared: after every `step` op (only an
update changes a metric), the samples that changed since the step before; after the last op, every sample, every family's type and help text; and the log line
(its level and text), with the loggers' clock at one pace per step on both sides. Samples compare
as sets: ``*_created``, the timing histograms and ``vllm:cache_config_info`` excluded
(``exposition_samples.py``). Cases: the engine-step goldens, the engine-step lessons and
random scenarios under both schedulers. A missing vLLM fails, as the whole tier does.
"""

from __future__ import annotations

import pytest

from explorer.errors import BadInput
from explorer.metrics.replay import MetricsRecorder
from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario, parse_scenario_dict
from tests.conformance.engine_step_scenarios import random_connector_raw_scenario
from tests.conformance.exposition_samples import deltas, parse
from tests.conformance.oracle import VllmOracle
from tests.conformance.sched_oracle import HERE, golden_paths
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
    if mine["log"] != theirs["log"]:
        out.append(f"log: ours {mine['log']} vLLM {theirs['log']}")
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


def test_random_scenarios_match_vllm_under_both_schedulers(metrics_oracle):
    scenarios = [
        parse_scenario_dict(raw, f"random engine steps seed {seed} ({raw['engine']['scheduler']})")
        for seed in RANDOM_SEEDS
        for raw in both_schedulers(seed)
    ]
    answers = metrics_oracle.replay_many(normalized(sc) for sc in scenarios)
    differing = {}
    seen = {"preemptions": 0.0, "hits": 0.0, "finished": 0.0}
    for sc, theirs in zip(scenarios, answers, strict=True):
        assert "error" not in theirs, (sc.source, theirs)
        diffs = differences(ours(sc), theirs)
        if diffs:
            differing[sc.source] = diffs[:3]
        s = theirs["final"]["samples"]
        seen["preemptions"] += s['vllm:num_preemptions_total{engine="0",model_name="explorer"}']
        seen["hits"] += s['vllm:prefix_cache_hits_total{engine="0",model_name="explorer"}']
        seen["finished"] += s['vllm:request_prefill_kv_computed_tokens_count{engine="0",model_name="explorer"}']
    assert differing == {}, f"{len(differing)} of {len(scenarios)} scenarios differ: {differing}"
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
    answers = metrics_oracle.replay_many(normalized(sc) for sc in scenarios)
    differing = {}
    external = 0.0
    for sc, theirs in zip(scenarios, answers, strict=True):
        assert "error" not in theirs, (sc.source, theirs)
        diffs = differences(ours(sc), theirs)
        if diffs:
            differing[sc.source] = diffs[:3]
        external += theirs["final"]["samples"][
            'vllm:external_prefix_cache_hits_total{engine="0",model_name="explorer"}'
        ]
    assert differing == {}, f"{len(differing)} of {len(scenarios)} scenarios differ: {differing}"
    assert external > 0
