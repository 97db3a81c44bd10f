"""Our exposition and log line against vLLM's own Scheduler + OutputProcessor +
PrometheusStatLogger + LoggingStatLogger, for the same run (design section 11), under 0.31.0
and under 0.33.0 (design section 15: 0.33.0's families, `prompt_tokens_cached_by_source`,
`admission_rejections`, `num_requests_kv_fetch_by_stage` with a connector, and its "KV fetch"
log part). Our side replays each scenario under the oracle's release (`at_release`).

The oracle is ``vllm_metrics_driver.py`` (vLLM's classes, wired as AsyncLLM wires them); our
side is ``explorer.metrics`` on our replay's trace. Compared: after every `step` op (only an
update changes a metric), the samples that changed since the step before; after the last op,
every sample, every family's type and help text; and the log line (its level and text) and,
with speculative decoding, the SpecDecoding metrics line after it, with the loggers' clock at
one pace per step on both sides. Samples compare
as sets: ``*_created``, the timing histograms, ``vllm:cache_config_info`` and the offloading
connector's transfer and lookup-delay families excluded (``exposition_samples.py``). Cases: the
engine-step goldens, the engine-step lessons, random scenarios under both schedulers, random
static-connector, random offloading and random speculative scenarios (the random batches
smaller under 0.33.0, `seeds_for`; under 0.33.0 without its ``vllm:kv_offload_config_info``,
whose labels hold the CPU tier's size in bytes, which the explorer does not model). A missing
vLLM of either release fails, as the whole tier does.
"""

from __future__ import annotations

import pytest

from explorer.errors import BadInput
from explorer.metrics.cli import load_trace
from explorer.metrics.replay import MetricsRecorder
from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario, parse_scenario_dict
from explorer.scenario.parse_release import with_release
from tests.conformance.fidelity_scenarios import random_offloading_groups_raw_scenario
from tests.conformance.oracle import DRIVERS, HERE, RELEASES, VllmOracle, at_release, modelled_cases, refusal, seeds_for
from tests.conformance.sched_oracle import (
    VllmSchedAsyncConnectorDraftsOracle,
    VllmSchedAsyncDraftsOracle,
    VllmSchedOffloadingGroupsOracle,
    golden_paths,
    oracle_kind,
)
from tests.conformance.spec_scenarios import random_spec_engine_steps
from tests.conformance.test_engine_steps_conformance import ENGINE_STEP_LESSONS, both_schedulers
from vllm_drivers.engine_step_scenarios import (
    random_connector_raw_scenario,
    random_offloading_raw_scenario,
    under_both_schedulers,
)
from vllm_drivers.exposition_samples import OFFLOAD_EXCLUDED, _kept, deltas, parse

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
# 0.33.0's families, on top of REQUIRED (design section 15).
REQUIRED_033 = {"vllm:prompt_tokens_cached_by_source", "vllm:admission_rejections"}
RANDOM_SEEDS = range(25)
CONNECTOR_SEEDS = range(20)
OFFLOADING_SEEDS = range(40)
OFFLOADING_GROUPS_SEEDS = {"0.31.0": range(12), "0.33.0": range(6)}
SPEC_SEEDS = range(40)
ASYNC_SPEC_SEEDS = range(20)
OFFLOAD_EXPORTED = {
    "vllm:kv_offload_allocation_failure",
    "vllm:kv_offload_cpu_allocation_size",
    "vllm:kv_offload_cpu_cache_usage_perc",
    "vllm:kv_offload_cpu_cache_write_usage_perc",
    "vllm:kv_offload_cpu_cache_read_usage_perc",
}
SERIES = '{engine="0",model_name="explorer"}'


class VllmMetricsOracle(VllmOracle):
    driver = DRIVERS / "vllm_metrics_driver.py"


class VllmMetricsAsyncDraftsOracle(VllmOracle):
    """Drafts under the async scheduler: the metrics driver around the async-drafts played model."""

    driver = DRIVERS / "vllm_metrics_async_drafts_driver.py"


class VllmMetricsAsyncConnectorDraftsOracle(VllmOracle):
    """A KV connector with drafts under the async scheduler: the metrics driver around the
    async connector-drafts played model and worker."""

    driver = DRIVERS / "vllm_metrics_async_connector_drafts_driver.py"


class VllmMetricsOffloadingGroupsOracle(VllmOracle):
    """The offloading connector with kv_cache_groups: the metrics driver around the
    offloading-groups replay (the retention interval where vLLM's connector reads it)."""

    driver = DRIVERS / "vllm_metrics_offloading_groups_driver.py"


def metrics_kind(scenario) -> type[VllmOracle]:
    """The metrics driver a scenario is asked of (as sched_oracle.oracle_kind picks the replay's)."""
    kind = oracle_kind(scenario)
    if kind is VllmSchedOffloadingGroupsOracle:
        return VllmMetricsOffloadingGroupsOracle
    if kind is VllmSchedAsyncConnectorDraftsOracle:
        return VllmMetricsAsyncConnectorDraftsOracle
    return VllmMetricsAsyncDraftsOracle if kind is VllmSchedAsyncDraftsOracle else VllmMetricsOracle


@pytest.fixture(scope="module", params=RELEASES)
def metrics_oracle(request, vllm_oracles):
    """vLLM's metrics driver of one release (one process per release for the session)."""
    return vllm_oracles.get(VllmMetricsOracle, request.param)


def required(release: str) -> set[str]:
    return REQUIRED | (REQUIRED_033 if release != RELEASES[0] else set())


def normalized(scenario) -> dict:
    d = scenario.normalized(scenario.engine.hash_seed or None)
    d["metrics"] = {"pace": PACE}
    return d


def ours(scenario) -> dict:
    """Our answer in the driver's shape; the log line as vLLM prints it on the CPU oracle."""
    trace = replay(scenario, record=False)
    rec = MetricsRecorder.for_scenario(scenario, PACE, device_type="cpu")
    snapshots = []
    for step in trace.steps:
        rec.feed(step)
        if step.op.op == "step":
            snapshots.append(registry_samples(rec.prom.registry))
    samples, families = parse(rec.exposition())
    line = rec.log()
    return {
        "deltas": sample_deltas(snapshots),
        "final": {"samples": samples, "families": families},
        "log": {"level": line.level, "text": line.text},
        "spec_log": None if line.spec_decoding is None else {"level": line.level, "text": line.spec_decoding},
    }


def registry_samples(registry) -> dict[str, float]:
    """What ``parse(generate_latest(registry))[0]`` gives, read from the registry's collected
    samples without writing and parsing the text: the per-step samples of thousands of steps
    (the final exposition is still compared as text, and test_registry_samples_are_the_texts
    proves the two readings equal)."""
    out = {}
    for metric in registry.collect():
        if not _kept(metric.name):
            continue
        for sample in metric.samples:
            if not sample.name.endswith("_created"):
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                out[f"{sample.name}{{{labels}}}"] = float(sample.value)
    return out


def sample_deltas(snapshots: list[dict[str, float]]) -> list[dict[str, float]]:
    """Per snapshot, the samples that changed (or appeared) since the one before (as ``deltas``)."""
    out, before = [], {}
    for now in snapshots:
        out.append({k: v for k, v in now.items() if before.get(k) != v})
        before = now
    return out


def test_registry_samples_are_the_texts():
    """The shortcut ``ours`` takes per step reads what the text exposition says, step by step,
    on a scenario with every family kind (counters, gauges, histograms, the offloading ones)."""
    seed = next(iter(OFFLOADING_SEEDS))
    scenario = parse_scenario_dict(random_offloading_raw_scenario(seed), f"random offloading seed {seed}")
    rec = MetricsRecorder.for_scenario(scenario, PACE, device_type="cpu")
    texts, snapshots = [], []
    for step in replay(scenario, record=False).steps:
        rec.feed(step)
        texts.append(rec.exposition())
        snapshots.append(registry_samples(rec.prom.registry))
    assert [parse(t)[0] for t in texts] == snapshots
    assert deltas(texts) == sample_deltas(snapshots)
    assert any(k.startswith("vllm:kv_offload_") for k in snapshots[-1])
    assert any("_bucket{" in k for k in snapshots[-1]) and any(v > 0 for v in snapshots[-1].values())


# 0.33.0's info gauge of the offloading connector's CPU tier: its labels hold the tier's size in
# bytes, a fact of the driver's KV spec (vllm_offloading.chunk_bytes) the explorer has no model
# of, so the family is left out of both sides (design section 15).
OFFLOAD_CONFIG_INFO = "vllm:kv_offload_config_info"


def _without_offload_config_info(answer: dict) -> dict:
    def keep(samples: dict) -> dict:
        return {k: v for k, v in samples.items() if not k.startswith(OFFLOAD_CONFIG_INFO)}

    final = answer["final"]
    return {
        **answer,
        "deltas": [keep(d) for d in answer["deltas"]],
        "final": {**final, "samples": keep(final["samples"]), "families": keep(final["families"])},
    }


def differences(mine: dict, theirs: dict) -> list[str]:
    mine, theirs = _without_offload_config_info(mine), _without_offload_config_info(theirs)
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


def test_every_engine_step_golden_and_lesson_has_metrics_under_both_releases():
    """`explorer metrics` refuses no scenario for its release's families; what 0.33.0 refuses
    (a KV connector with drafts under the sync scheduler) is refused by the scenario's engine,
    with the same line."""
    for path in [*golden_paths(), *ENGINE_STEP_LESSONS]:
        load_trace(str(path), "0.31.0")
        reason = refusal(load_scenario(path), "0.33.0")
        if reason is None:
            load_trace(str(path), "0.33.0")
            continue
        assert "speculative decoding" in reason, path.stem
        with pytest.raises(BadInput, match="speculative decoding"):
            load_trace(str(path), "0.33.0")


@pytest.mark.parametrize("release", RELEASES)
def test_we_export_every_family_the_contract_names(release):
    scenario = with_release(load_scenario(ENGINE_STEP_LESSONS[0]), release)
    families = set(ours(scenario)["final"]["families"])
    assert families >= required(release)
    assert families.isdisjoint(REQUIRED_033) == (release == RELEASES[0])


CASES = modelled_cases(golden_paths() + ENGINE_STEP_LESSONS, load_scenario)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1].stem}")
def test_exposition_and_log_line_match_vllm(vllm_oracles, case):
    release, path = case
    scenario = load_scenario(path)
    oracle = vllm_oracles.get(metrics_kind(scenario), release)
    scenario = at_release(scenario, oracle)
    theirs = oracle.replay(normalized(scenario))
    assert set(theirs["final"]["families"]) >= required(release)
    assert differences(ours(scenario), theirs) == []


def vllm_answers_equal_ours(metrics_oracle, scenarios) -> list:
    """vLLM's answers for the scenarios, each first checked equal to ours (its first three
    differences named when not): the random tests then count what the scenarios exercised."""
    scenarios = [at_release(sc, metrics_oracle) for sc in scenarios]
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
        for seed in seeds_for(metrics_oracle, RANDOM_SEEDS, 10)
        for raw in both_schedulers(seed)
    ]
    seen = {"preemptions": 0.0, "hits": 0.0, "finished": 0.0}
    for theirs in vllm_answers_equal_ours(metrics_oracle, scenarios):
        s = theirs["final"]["samples"]
        seen["preemptions"] += s['vllm:num_preemptions_total{engine="0",model_name="explorer"}']
        seen["hits"] += s['vllm:prefix_cache_hits_total{engine="0",model_name="explorer"}']
        seen["finished"] += s['vllm:request_prefill_kv_computed_tokens_count{engine="0",model_name="explorer"}']
    floor = 50 if metrics_oracle.vllm == RELEASES[0] else 10  # the smaller 0.33.0 batch: 20 scenarios
    assert all(v >= floor for v in seen.values()), seen


def test_random_connector_scenarios_match_vllm(metrics_oracle):
    """The external_* counters, external_kv_transfer and the external window rate with a KV
    connector (design section 10), under both schedulers; scenarios we refuse are left out."""
    scenarios = []
    for seed in seeds_for(metrics_oracle, CONNECTOR_SEEDS, 10):
        raw = random_connector_raw_scenario(seed)
        for sched in ("async", "sync"):
            raw["engine"]["scheduler"] = sched
            try:
                sc = at_release(parse_scenario_dict(raw, f"random connector seed {seed} ({sched})"), metrics_oracle)
                replay(sc, record=False)
            except BadInput:
                continue
            scenarios.append(sc)
    assert len(scenarios) >= 10
    seen = {"external": 0.0, "kv_fetch": 0.0}
    for theirs in vllm_answers_equal_ours(metrics_oracle, scenarios):
        s = theirs["final"]["samples"]
        seen["external"] += s[f"vllm:external_prefix_cache_hits_total{SERIES}"]
        if metrics_oracle.vllm == RELEASES[0]:
            continue
        # 0.33.0: every hit token is counted once by source (device: local; the static
        # connector names no tier: external_unspecified), and async loads pass the stages.
        by_source = {k: v for k, v in s.items() if k.startswith("vllm:prompt_tokens_cached_by_source_total")}
        assert sum(by_source.values()) == (
            s[f"vllm:prefix_cache_hits_total{SERIES}"] + s[f"vllm:external_prefix_cache_hits_total{SERIES}"]
        )
        assert by_source[source_series("external_unspecified")] == s[f"vllm:external_prefix_cache_hits_total{SERIES}"]
        seen["kv_fetch"] += sum(
            v for d in theirs["deltas"] for k, v in d.items() if k.startswith("vllm:num_requests_kv_fetch_by_stage")
        )
    assert seen["external"] > 0 and (seen["kv_fetch"] > 0) == (metrics_oracle.vllm != RELEASES[0]), seen


def source_series(source: str) -> str:
    return f'vllm:prompt_tokens_cached_by_source_total{{engine="0",model_name="explorer",source="{source}"}}'


def offload_families(families) -> set[str]:
    return {f for f in families if f.startswith("vllm:kv_offload_")}


def test_offloading_families_are_exported_or_excluded_by_name(vllm_oracles):
    """With the offloading connector vLLM registers exactly the families we export plus those we
    leave out: nothing of vLLM's is dropped unnamed, and every excluded name exists (0.31.0's
    families)."""
    metrics_oracle = vllm_oracles.get(VllmMetricsOracle, RELEASES[0])
    scenario = load_scenario(HERE.parent / "scenario/golden/engine_steps/offloading_larger_than_cpu_tier.toml")
    theirs = metrics_oracle.replay(normalized(scenario))
    assert offload_families(theirs["registered"]) == OFFLOAD_EXPORTED | OFFLOAD_EXCLUDED
    mine = ours(scenario)["final"]
    assert offload_families(mine["families"]) == OFFLOAD_EXPORTED == offload_families(theirs["final"]["families"])
    assert mine["samples"][f"vllm:kv_offload_allocation_failure_total{SERIES}"] > 0
    assert differences(ours(scenario), theirs) == []


@pytest.mark.parametrize("release", RELEASES)
def test_random_offloading_scenarios_match_vllm(vllm_oracles, release: str):
    """The offloading connector's scheduler-side families (and every other sample) on random
    offloading scenarios under both schedulers: tiers too small for a request (refused stores),
    evictions, loads pinning chunks (read usage) and stores in flight (write usage)."""
    metrics_oracle = vllm_oracles.get(VllmMetricsOracle, release)
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


@pytest.mark.parametrize("release", RELEASES)
def test_random_offloading_groups_scenarios_match_vllm(vllm_oracles, release: str):
    """The same with hybrid KV cache groups (vllm_metrics_offloading_groups_driver.py): every
    group's stores share the CPU tier, so its allocation sizes and usage count them all."""
    metrics_oracle = vllm_oracles.get(VllmMetricsOffloadingGroupsOracle, release)
    scenarios = [
        parse_scenario_dict(raw, f"random offloading groups seed {seed} ({raw['engine']['scheduler']})")
        for seed in OFFLOADING_GROUPS_SEEDS[release]
        for raw in under_both_schedulers(random_offloading_groups_raw_scenario(seed))
    ]
    assert {metrics_kind(sc) for sc in scenarios} == {VllmMetricsOffloadingGroupsOracle}
    seen = {"failures": 0.0, "stores": 0.0, "external_hits": 0.0, "write_usage": 0}
    for theirs in vllm_answers_equal_ours(metrics_oracle, scenarios):
        s = theirs["final"]["samples"]
        seen["failures"] += s.get(f"vllm:kv_offload_allocation_failure_total{SERIES}", 0.0)
        seen["stores"] += s.get(f"vllm:kv_offload_cpu_allocation_size_count{SERIES}", 0.0)
        seen["external_hits"] += s.get(f"vllm:external_prefix_cache_hits_total{SERIES}", 0.0)
        for d in theirs["deltas"]:
            seen["write_usage"] += d.get(f"vllm:kv_offload_cpu_cache_write_usage_perc{SERIES}", 0.0) > 0
    assert all(v >= 3 for v in seen.values()), seen


def test_the_speculative_goldens_log_the_spec_decoding_line_as_vllm(metrics_oracle, vllm_oracles):
    paths = [
        p
        for p in golden_paths() + ENGINE_STEP_LESSONS
        if load_scenario(p).speculative is not None and refusal(load_scenario(p), metrics_oracle.vllm) is None
    ]
    assert len(paths) >= 4
    for path in paths:
        oracle = vllm_oracles.get(metrics_kind(load_scenario(path)), metrics_oracle.vllm)
        scenario = at_release(load_scenario(path), oracle)
        theirs = oracle.replay(normalized(scenario))
        assert theirs["spec_log"] is not None, path
        assert ours(scenario)["spec_log"] == theirs["spec_log"], path


def test_random_speculative_scenarios_match_vllm(metrics_oracle):
    """The SpecDecoding metrics line (and every sample, the spec-decode counters included) on
    random speculative engine-step scenarios, every drafting method (the generator draws the sync scheduler)."""
    scenarios = [
        parse_scenario_dict(random_spec_engine_steps(s), f"spec engine steps seed {s}")
        for s in seeds_for(metrics_oracle, SPEC_SEEDS, 15)
    ]
    logged = sum(theirs["spec_log"] is not None for theirs in vllm_answers_equal_ours(metrics_oracle, scenarios))
    assert logged >= len(scenarios) // 2, logged


def test_random_speculative_scenarios_under_the_async_scheduler_match_vllm(vllm_oracles, metrics_oracle):
    """The same under the AsyncScheduler (vllm_metrics_async_drafts_driver.py): the spec-decode
    counters count every scheduled draft, placeholders included, as vLLM's do."""
    oracle = vllm_oracles.get(VllmMetricsAsyncDraftsOracle, metrics_oracle.vllm)
    scenarios = [
        parse_scenario_dict(random_spec_engine_steps(s, scheduler="async"), f"async spec engine steps seed {s}")
        for s in seeds_for(oracle, ASYNC_SPEC_SEEDS, 10)
    ]
    logged = sum(theirs["spec_log"] is not None for theirs in vllm_answers_equal_ours(oracle, scenarios))
    assert logged >= len(scenarios) // 2, logged
