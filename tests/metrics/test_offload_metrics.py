"""The offloading connector's scheduler-side families (design section 11): refused stores, the
chunks each store asked for, and the CPU tier's usage gauges, from the core's reports."""

from __future__ import annotations

from explorer.core.sched.kv_connector.cpu_tier import CPUOffloadingManager, ReqContext
from explorer.metrics.replay import recorder_at
from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario, parse_scenario_dict
from tests.metrics.helpers import LESSON, sample


def offloading_scenario(cpu_blocks: int, prompt_tokens: int) -> dict:
    return {
        "title": "offloading metrics",
        "engine": {
            "block_size": 16,
            "num_blocks": 16,
            "scheduler": "sync",
            "kv_connector": {"kind": "offloading", "cpu_blocks": cpu_blocks},
        },
        "steps": [
            {"op": "arrive", "id": "A", "prompt": f"0:{prompt_tokens}", "output": "7, 8"},
            {"op": "step"},
            {"op": "step"},
            {"op": "step"},
        ],
    }


def exposition(raw: dict) -> str:
    return recorder_at(replay(parse_scenario_dict(raw, "test"), record=False)).exposition()


def test_a_request_larger_than_the_tier_is_refused_at_every_attempt():
    # 6 full prompt blocks, a tier of 4 with nothing to evict: the store is asked for at A's
    # prefill, at its decode and once more after it finished, and refused each time.
    text = exposition(offloading_scenario(cpu_blocks=4, prompt_tokens=100))
    assert sample(text, "vllm:kv_offload_allocation_failure_total") == 3
    assert sample(text, "vllm:kv_offload_cpu_allocation_size_count") == 3
    assert sample(text, "vllm:kv_offload_cpu_allocation_size_sum") == 18
    assert sample(text, "vllm:kv_offload_cpu_cache_usage_perc") == 0


def test_a_store_that_fits_is_asked_for_once_and_never_refused():
    text = exposition(offloading_scenario(cpu_blocks=16, prompt_tokens=100))
    assert sample(text, "vllm:kv_offload_cpu_allocation_size_count") == 1
    assert sample(text, "vllm:kv_offload_cpu_allocation_size_sum") == 6
    # vLLM makes the counter's series only with the first refusal.
    assert "vllm:kv_offload_allocation_failure_total{" not in text
    assert "# TYPE vllm:kv_offload_allocation_failure_total counter" in text


def test_the_tier_reports_chunks_being_written_and_chunks_pinned_by_loads():
    tier = CPUOffloadingManager(4, enable_events=False)
    ctx = ReqContext("A")
    tier.on_new_request(ctx)
    assert tier.prepare_store([b"a", b"b", b"c"], ctx) == ([b"a", b"b", b"c"], [])
    stats = tier.get_stats()
    assert (stats.cpu_cache_usage, stats.cpu_cache_write_usage, stats.cpu_cache_read_usage) == (0.75, 0.75, 0.0)
    assert stats.cpu_allocation_sizes == [3]
    tier.complete_store([b"a", b"b", b"c"])
    tier.prepare_load([b"a", b"b"], ctx)
    stats = tier.get_stats()
    assert (stats.cpu_cache_usage, stats.cpu_cache_write_usage, stats.cpu_cache_read_usage) == (0.5, 0.0, 0.5)
    assert stats.cpu_allocation_sizes == []  # reported once
    tier.complete_load([b"a", b"b"])
    assert tier.get_stats().cpu_cache_usage == 0.0


def test_without_the_offloading_connector_no_offload_family_is_registered():
    text = recorder_at(replay(load_scenario(LESSON), record=False)).exposition()
    assert "vllm:kv_offload_" not in text
