"""vLLM 0.33.0's metric families (design section 15): `prompt_tokens_cached_by_source`,
`admission_rejections`, `num_requests_kv_fetch_by_stage` with a connector, and the "KV fetch"
log part, behind the release switch; 0.31.0's exposition has none of them. The conformance
tier compares both releases' expositions with vLLM's own loggers."""

from __future__ import annotations

from explorer.cli import main
from explorer.core.metrics import CACHE_HIT_SOURCES, PrefixCacheStats
from explorer.core.sched.output import KV_FETCH_STAGES
from explorer.metrics.replay import recorder_at
from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario
from explorer.scenario.parse_release import with_release
from explorer.view.stage_state import exported_metrics_html
from tests.metrics.helpers import LABELS, LESSON, REPO, sample

GOLDEN = REPO / "tests" / "scenario" / "golden" / "engine_steps"
ASYNC_LOAD = GOLDEN / "connector_async_load_async.toml"
NEW_FAMILIES = (
    "vllm:prompt_tokens_cached_by_source",
    "vllm:admission_rejections",
    "vllm:num_requests_kv_fetch_by_stage",
)


def source_labels(source: str) -> str:
    return f'{{engine="0",model_name="explorer",source="{source}"}}'


def trace_at(path, vllm: str):
    return replay(with_release(load_scenario(path), vllm), record=False)


def test_0_31_exports_none_of_0_33s_families():
    text = recorder_at(trace_at(ASYNC_LOAD, "0.31.0")).exposition()
    assert not any(name in text for name in NEW_FAMILIES)
    assert "KV fetch" not in " ".join(recorder_at(trace_at(ASYNC_LOAD, "0.31.0"), 1).log().lines)


def test_metrics_under_0_33_counts_every_hit_token_once_by_source(capsys):
    for path in (LESSON, ASYNC_LOAD):
        assert main(["metrics", str(path), "--vllm", "0.33.0"]) == 0
        text = capsys.readouterr().out
        by_source = {
            s: sample(text, "vllm:prompt_tokens_cached_by_source_total", source_labels(s)) for s in CACHE_HIT_SOURCES
        }
        local = sample(text, "vllm:prefix_cache_hits_total")
        external = sample(text, "vllm:external_prefix_cache_hits_total")
        assert by_source["device"] == local
        assert by_source["external_unspecified"] == external  # the static connector names no tier
        assert sum(by_source.values()) == local + external
    assert by_source["external_unspecified"] > 0  # the async load's golden hits the connector
    assert local == 0 and by_source["host"] == by_source["p2p"] == by_source["disk"] == 0
    # A replay has no frontend queue limits: the counter exists per reason, without an engine label.
    for reason in ("max_num_queued_reqs", "max_num_queued_tokens"):
        assert f'vllm:admission_rejections_total{{model_name="explorer",reason="{reason}"}} 0.0' in text


def test_the_kv_fetch_gauge_and_log_part_follow_an_async_load():
    trace = trace_at(ASYNC_LOAD, "0.33.0")
    seen = []
    for k in range(1, len(trace.steps) + 1):
        rec = recorder_at(trace, k)
        text = rec.exposition()
        stages = [
            int(sample(text, "vllm:num_requests_kv_fetch_by_stage", LABELS[:-1] + f',stage="{st}"}}'))
            for st in KV_FETCH_STAGES
        ]
        line = rec.log().text
        if any(stages):
            waiting, loading, loaded = stages
            assert f"KV fetch: {waiting} waiting to start, {loading} in progress, {loaded} completed waiting" in line
        else:
            assert "KV fetch" not in line
        seen.append(tuple(stages))
    # The load is reported done in the update of the step that started it: the update shows
    # A loaded and not yet running; A then runs and nothing is pending.
    assert (0, 0, 1) in seen and seen[-1] == (0, 0, 0)
    assert "vllm:num_requests_kv_fetch_by_stage" not in recorder_at(trace_at(LESSON, "0.33.0")).exposition()


def test_a_split_that_does_not_add_up_counts_as_unattributed():
    stats = PrefixCacheStats()
    stats.record(100, 64, preempted=False, hits_by_source={"host": 32})
    stats.record(100, 16, preempted=False, hits_by_source={"host": 16})
    stats.record(100, 16, preempted=True, hits_by_source={"host": 16})  # preempted: not split
    assert stats.hits_by_source == {"external_unspecified": 64, "host": 16}
    assert stats.hits == 80


def test_the_metrics_panel_shows_the_cached_by_source_totals_under_0_33():
    trace = trace_at(ASYNC_LOAD, "0.33.0")
    body = str(exported_metrics_html(trace, len(trace.steps), 5))
    external = int(sample(recorder_at(trace).exposition(), "vllm:external_prefix_cache_hits_total"))
    assert "prompt tokens cached by source" in body and f"external_unspecified {external:,}" in body
    assert "vllm:prompt_tokens_cached_by_source" in body
    old = trace_at(ASYNC_LOAD, "0.31.0")
    assert "cached by source" not in str(exported_metrics_html(old, len(old.steps), 5))
