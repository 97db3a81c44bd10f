"""``vllm:cache_config_info`` against vLLM's own PrometheusStatLogger, under 0.31.0 and 0.33.0
(design sections 11 and 15): the family's type, help text and its one sample (every label and
the value 1) as our exporter writes it equal what vLLM's registry exposes once its engine is
initialized for the same engine settings (``vllm_cache_info_driver.py``). Cases: the engine-step
goldens, the engine-step lessons and random engine-step scenarios (both schedulers; block size,
prefix caching, hash algorithm and pool drawn). The metrics tier keeps the family out of its
exposition comparison (``exposition_samples.EXCLUDED_FAMILIES``): it is compared here.
"""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from explorer.metrics.cache_info import FAMILY
from explorer.metrics.replay import MetricsRecorder
from explorer.scenario.parse import load_scenario, parse_scenario_dict
from tests.conformance.oracle import DRIVERS, RELEASES, VllmOracle, at_release, modelled_cases, seeds_for
from tests.conformance.sched_oracle import golden_paths
from tests.conformance.test_engine_steps_conformance import ENGINE_STEP_LESSONS, both_schedulers

pytestmark = pytest.mark.conformance

RANDOM_SEEDS = range(12)


class VllmCacheInfoOracle(VllmOracle):
    driver = DRIVERS / "vllm_cache_info_driver.py"


@pytest.fixture(scope="module", params=RELEASES)
def cache_info_oracle(request, vllm_oracles):
    return vllm_oracles.get(VllmCacheInfoOracle, request.param)


def ours(scenario) -> dict:
    """Our exposition's family, in the driver's shape."""
    text = MetricsRecorder.for_scenario(scenario, device_type="cpu").exposition()
    for family in text_string_to_metric_families(text):
        if family.name == FAMILY:
            samples = [{"labels": dict(s.labels), "value": s.value} for s in family.samples]
            return {"type": family.type, "help": family.documentation, "samples": samples}
    return {"error": f"{FAMILY} is not exported"}


def answers_equal_ours(oracle, scenarios) -> list[dict]:
    scenarios = [at_release(sc, oracle) for sc in scenarios]
    answers = oracle.replay_many(sc.normalized(sc.engine.hash_seed or None) for sc in scenarios)
    differing = {sc.source: (ours(sc), theirs) for sc, theirs in zip(scenarios, answers, strict=True)}
    differing = {k: v for k, v in differing.items() if v[0] != v[1]}
    assert differing == {}, f"{len(differing)} of {len(scenarios)} differ, first: {next(iter(differing.items()))}"
    return answers


@pytest.mark.parametrize("release", RELEASES)
def test_goldens_and_lessons_match_vllm(vllm_oracles, release):
    paths = [p for r, p in modelled_cases(golden_paths() + ENGINE_STEP_LESSONS, load_scenario) if r == release]
    answers = answers_equal_ours(vllm_oracles.get(VllmCacheInfoOracle, release), [load_scenario(p) for p in paths])
    assert len(answers) >= 30
    assert all(a["samples"][0]["value"] == 1.0 for a in answers)
    # The labels that follow the scenario vary across the cases, so the comparison can fail.
    pools = {a["samples"][0]["labels"]["num_gpu_blocks"] for a in answers}
    sizes = {a["samples"][0]["labels"]["block_size"] for a in answers}
    assert len(pools) >= 5 and len(sizes) >= 2


def test_the_label_set_differs_between_the_releases(vllm_oracles):
    path = ENGINE_STEP_LESSONS[0]
    names = {}
    for release in RELEASES:
        oracle = vllm_oracles.get(VllmCacheInfoOracle, release)
        names[release] = set(
            oracle.replay(at_release(load_scenario(path), oracle).normalized(None))["samples"][0]["labels"]
        )
    assert names[RELEASES[0]] - names[RELEASES[1]] == {"user_specified_mamba_block_size"}
    assert names[RELEASES[1]] - names[RELEASES[0]] == {
        "simple_cpu_offload_num_blocks",
        "hash_block_size",
        "cache_hit_alignment_tokens",
    }


def test_random_scenarios_match_vllm(cache_info_oracle):
    scenarios = [
        parse_scenario_dict(raw, f"random engine steps seed {seed} ({raw['engine']['scheduler']})")
        for seed in seeds_for(cache_info_oracle, RANDOM_SEEDS, 6)
        for raw in both_schedulers(seed)
    ]
    answers = answers_equal_ours(cache_info_oracle, scenarios)
    seen = {
        (lb["enable_prefix_caching"], lb["prefix_caching_hash_algo"])
        for a in answers
        for lb in [a["samples"][0]["labels"]]
    }
    assert len(seen) >= 2, seen
