"""`explorer metrics`: the exposition, the log line, bad input, the per-step numbers and the
`expect` keys on exported values."""

from __future__ import annotations

import signal
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from explorer.cli import main
from explorer.metrics.frontend import OutputProcessor
from explorer.metrics.replay import points, promql, recorder_at, step_rate, step_rates
from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario
from tests.metrics.helpers import LABELS, LESSON, REPO, sample, start_server, wait_for_line

ENGINE_STEP_FILES = [
    p
    for p in sorted((REPO / "lessons").glob("*.toml"))
    + sorted((REPO / "tests/scenario/golden/engine_steps").glob("*.toml"))
    if load_scenario(p).sched is not None
]


def test_metrics_prints_the_exposition_then_the_log_line(capsys):
    assert main(["metrics", str(LESSON)]) == 0
    out = capsys.readouterr().out
    body, last = out.rstrip("\n").rsplit("\n", 1)
    assert sample(body, "vllm:prefix_cache_queries_total") == 300
    assert sample(body, "vllm:prefix_cache_hits_total") == 96
    assert sample(body, "vllm:num_preemptions_total") == 2
    by = '{engine="0",model_name="explorer",source="%s"}'
    assert sample(body, "vllm:prompt_tokens_by_source_total", by % "local_compute") == 204
    assert sample(body, "vllm:prompt_tokens_by_source_total", by % "local_cache_hit") == 96
    assert sample(body, "vllm:prompt_tokens_cached_total") == 96
    assert sample(body, "vllm:request_prefill_kv_computed_tokens_count") == 3
    assert sample(body, "vllm:request_prefill_kv_computed_tokens_sum") == 204
    assert "# TYPE vllm:kv_cache_usage_perc gauge" in body
    assert "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens." in body
    # 6 step ops of 1 s: 204 computed prompt tokens, 10 generated; no "Preemptions" in 0.31.0.
    assert last == (
        "Engine 000: Avg prompt throughput: 34.0 tokens/s, Avg generation throughput: 1.7 tokens/s, "
        "Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%"
    )


def test_pace_divides_the_throughput(capsys):
    assert main(["metrics", str(LESSON), "--pace", "0.5"]) == 0
    assert "Avg prompt throughput: 68.0 tokens/s" in capsys.readouterr().out.splitlines()[-1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([str(REPO / "lessons/00_two_chat_turns.toml")], "manager-level scenario"),
        ([str(LESSON), "--pace", "0"], "--pace: expected seconds in [0.01, 3600]"),
        ([str(LESSON), "--pace", "4000"], "more than the limit 3600"),
        ([str(LESSON), "--pace", "nan"], "finite"),
        ([str(LESSON), "--serve", "65536"], "more than the limit 65,535"),
        ([str(LESSON), "--serve", "-5"], "a port in [0, 65535]"),
        ([str(LESSON), "--serve", "８０"], "ASCII digits"),
        (["no-such-file.toml"], "no such file"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, args, message):
    assert main(["metrics", *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and message in err


@pytest.mark.parametrize("path", ENGINE_STEP_FILES, ids=lambda p: p.stem)
def test_the_expect_keys_are_the_exported_values(path: Path):
    """A step's metric_* / log_hit_rate (what `expect` compares) are what the exposition and the
    logger say after that step."""
    trace = replay(load_scenario(path), record=False)
    by = '{engine="0",model_name="explorer",source="%s"}'
    for k, step in enumerate(trace.steps):
        if step.op.op != "step":
            continue
        rec = recorder_at(trace, k + 1)
        text, m = rec.exposition(), step.engine_step.metrics
        assert m["metric_queries"] == sample(text, "vllm:prefix_cache_queries_total")
        assert m["metric_hits"] == sample(text, "vllm:prefix_cache_hits_total")
        assert m["metric_preemptions"] == sample(text, "vllm:num_preemptions_total")
        assert m["metric_external_queries"] == sample(text, "vllm:external_prefix_cache_queries_total")
        assert m["metric_external_hits"] == sample(text, "vllm:external_prefix_cache_hits_total")
        for source, n in m["metric_prompt_tokens_by_source"].items():
            assert n == sample(text, "vllm:prompt_tokens_by_source_total", by % source)
        line = rec.log().text
        shown = line.split("Prefix cache hit rate: ")[1].split(",")[0] if "Prefix cache hit rate" in line else ""
        assert m["log_hit_rate"] == shown


def test_a_failed_metric_expectation_is_reported():
    text = LESSON.read_text().replace("metric_hits = 96, metric_prompt", "metric_hits = 95, metric_prompt", 1)
    from explorer.scenario.parse import parse_scenario_text

    trace = replay(parse_scenario_text(text, "edited"), record=False)
    assert any("expected metric_hits = 95, got 96" in f for f in trace.expect_failures)


def test_points_show_the_three_rates_apart():
    pts = points(replay(load_scenario(LESSON), record=False))
    last = pts[-1]
    assert (last.queries, last.hits, last.preemptions) == (300, 96, 2)
    assert last.total_rate == 96 / 300 and last.window_rate == 0.0
    d = next(k for k, p in enumerate(pts) if p.queries == 300)
    assert step_rate(pts, d, 1) == 0.0  # the last step: D's 100 tokens, no hit
    assert step_rate(pts, d, 10) == 96 / 300  # back to the start
    after_b = next(k for k, p in enumerate(pts) if p.hits == 96)
    assert step_rate(pts, after_b, 1) == 96 / 100 and pts[after_b].window_rate == 96 / 200
    assert step_rate(pts, after_b + 2, 1) is None  # the step after the reset: no first admission
    assert pts[after_b + 2].window_rate is None  # the reset emptied the window
    assert [p.by_source for p in pts if p.op == "step"][1] == (104, 96, 0)


def test_promql_texts():
    assert promql("2m")[0] == (
        "sum(rate(vllm:prefix_cache_hits_total[2m])) / sum(rate(vllm:prefix_cache_queries_total[2m]))"
    )


def test_a_preemption_counts_with_the_next_output_and_an_abort_is_not_finished():
    from explorer.core.metrics import PrefillStats
    from explorer.core.request import EngineCoreEventType
    from explorer.core.sched.output import EngineCoreOutput, EngineCoreOutputs

    fe = OutputProcessor()
    fe.add_request("A", 10, 3)
    fe.add_request("B", 10, 3)
    ps = PrefillStats()
    ps.set(10, 4, 0)
    it = fe.process_outputs(EngineCoreOutputs([EngineCoreOutput("A", [1], None, ps, [EngineCoreEventType.PREEMPTED])]))
    assert it is not None and it.num_preempted_reqs == 1 and it.prompt_token_stats.local_cache_hit == 4
    assert fe.abort_request("B") and not fe.abort_request("B")
    it = fe.process_outputs(
        EngineCoreOutputs([EngineCoreOutput("A", [2], "length"), EngineCoreOutput("B", [], "abort")])
    )
    assert it is not None and [f.num_preemptions for f in it.finished_requests] == [1]
    assert it.finished_requests[0].num_cached_tokens == 4
    assert fe.process_outputs(EngineCoreOutputs([])) is None


def test_serve_answers_on_loopback_and_ends_cleanly_on_ctrl_c():
    proc, port = start_server(LESSON, 0.05)
    try:
        wait_for_line(proc, "replay done")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as r:
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            text = r.read().decode()
        assert sample(text, "vllm:prefix_cache_hits_total") == 96
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other")
        assert e.value.code == 404
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "stopped" in err and "Traceback" not in err and out == ""


def test_serve_on_a_port_in_use_is_bad_input(capsys):
    proc, port = start_server(LESSON, 5)
    try:
        assert main(["metrics", str(LESSON), "--serve", str(port)]) == 2
        assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert proc.returncode == 0


@pytest.mark.parametrize("path", ENGINE_STEP_FILES, ids=lambda p: p.stem)
def test_step_rates_is_step_rate_at_every_op(path: Path):
    pts = points(replay(load_scenario(path), record=False))
    for n in (1, 2, 5, 1000):
        assert step_rates(pts, n) == [step_rate(pts, k, n) for k in range(len(pts))]
        assert step_rates(pts, n, external=True) == [step_rate(pts, k, n, external=True) for k in range(len(pts))]


def test_spec_decode_counters_are_exported_with_speculative_decoding_only():
    """SpecDecodingProm's families, from the core's SpecDecodingStats (design section 11)."""
    golden = REPO / "tests" / "scenario" / "golden" / "engine_steps"
    trace = replay(load_scenario(golden / "eagle_drafts_sync.toml"), record=False)
    text = recorder_at(trace).exposition()
    drafts = sample(text, "vllm:spec_decode_num_drafts_total")
    draft_tokens = sample(text, "vllm:spec_decode_num_draft_tokens_total")
    accepted = sample(text, "vllm:spec_decode_num_accepted_tokens_total")
    k = trace.scenario.speculative.num_speculative_tokens
    per_pos = [
        sample(text, "vllm:spec_decode_num_accepted_tokens_per_pos_total", LABELS[:-1] + f',position="{p}"}}')
        for p in range(k)
    ]
    assert drafts > 0 and draft_tokens == drafts * k and 0 < accepted < draft_tokens
    assert sum(per_pos) == accepted and per_pos == sorted(per_pos, reverse=True)
    plain = recorder_at(replay(load_scenario(LESSON), record=False)).exposition()
    assert "vllm:spec_decode" not in plain
