"""The trace generator and the streaming reader: the sample's statistics carry over, and a
streamed replay gives `replay`'s answer."""

from __future__ import annotations

import json

import pytest

from explorer.errors import BadInput
from explorer.miss.sentence import largest_reason_sentence
from explorer.traffic.cli import STREAM_NO_BELADY
from explorer.traffic.generate import generate_trace, stream_trace
from explorer.traffic.trace import load_trace, shipped_trace_path
from tests.cli_run import run_explorer
from tests.traffic.helpers import run_cli, synthetic_lines, trace_of, write


def test_generated_trace_keeps_lengths_rate_and_sharing(tmp_path):
    sample = trace_of(synthetic_lines(300, seed=1))
    out = tmp_path / "g.jsonl"
    generate_trace(out, 3000, seed=2, sample=sample)
    gen = load_trace(out)
    assert len(gen.requests) == 3000
    lengths = {(r.input_length, r.output_length) for r in sample.requests}
    assert all((r.input_length, r.output_length) in lengths for r in gen.requests)
    mean_in = sum(r.input_length for r in sample.requests) / len(sample.requests)
    assert abs(gen.prompt_tokens / 3000 - mean_in) < 0.1 * mean_in
    rate = len(sample.requests) / sample.requests[-1].timestamp
    gen_rate = len(gen.requests) / gen.requests[-1].timestamp
    assert 0.8 < gen_rate / rate < 1.25
    firsts = [r.hash_ids[0] for r in gen.requests]
    assert len(set(firsts)) < len(firsts) / 5, "requests share their leading blocks, as the sample's do"


def test_stream_reads_what_load_reads(tmp_path):
    p = write(tmp_path, synthetic_lines(50, seed=4))
    assert tuple(stream_trace(p)) == load_trace(p).requests
    assert tuple(stream_trace(p, limit=7)) == load_trace(p, limit=7).requests
    bad = write(tmp_path, ['{"timestamp": 0}'], name="bad.jsonl")
    with pytest.raises(BadInput, match="line 1"):
        list(stream_trace(bad))


def test_streamed_replay_equals_replay(tmp_path, capsys):
    p = write(tmp_path, synthetic_lines(80, seed=6))
    for extra in ([], ["--outputs"]):
        rc1, a, _ = run_cli(capsys, "replay", str(p), "--num-blocks", "40", "--json", *extra)
        stream = ("replay", str(p), "--num-blocks", "40", "--json", "--stream", *extra)
        rc2, b, _ = run_cli(capsys, *stream, "--reasons")
        rc3, c, _ = run_cli(capsys, *stream)
        assert rc1 == rc2 == rc3 == 0
        a_, b_, c_ = json.loads(a), json.loads(b), json.loads(c)
        a_.pop("tokens_per_s"), b_.pop("tokens_per_s"), c_.pop("tokens_per_s")
        # A stream cannot know each hash's next reference: Belady is null, the rest is replay's.
        belady = a_.pop("bound_belady")
        assert b_.pop("bound_belady") is None
        assert a_ == b_ and a_["hit_tokens"] > 0 and belady >= a_["hit_tokens"]
        assert sum(b_["miss_tokens"].values()) == b_["prompt_tokens"] - b_["hit_tokens"]
        # Without --reasons the stream keeps nothing per distinct block: the same replay, no reasons.
        assert c_ == {k: v for k, v in b_.items() if k not in ("miss_tokens", "bound_infinite")}


def _generated(tmp_path, n: int):
    out = tmp_path / "g.jsonl"
    generate_trace(out, n, seed=3, sample=load_trace(shipped_trace_path(), limit=200))
    return out


def test_streamed_reasons_and_infinite_bound_equal_replay_on_a_generated_trace(tmp_path):
    p = _generated(tmp_path, 300)
    # a pool small enough that blocks are evicted and long prompts are skipped
    args = ("replay", p, "--num-blocks", "600", "--limit", "250")
    whole, streamed = run_explorer(*args, "--json"), run_explorer(*args, "--json", "--stream", "--reasons")
    assert whole.returncode == streamed.returncode == 0, whole.stderr + streamed.stderr
    a, b = json.loads(whole.stdout), json.loads(streamed.stdout)
    assert b["requests"] == 250 and b["skipped"] == a["skipped"] > 0
    assert {"evicted", "never_cached", "skipped"} <= set(b["miss_tokens"])
    assert b["miss_tokens"] == a["miss_tokens"]
    assert list(b["miss_tokens"]) == list(a["miss_tokens"])  # the reasons' order too
    assert b["bound_infinite"] == a["bound_infinite"] > a["hit_tokens"]
    assert b["bound_belady"] is None
    # the text forms say the same: the largest reason's sentence and the infinite bound
    whole_t, streamed_t = run_explorer(*args), run_explorer(*args, "--stream", "--reasons")
    assert whole_t.returncode == streamed_t.returncode == 0
    sentence = largest_reason_sentence(a["miss_tokens"])
    assert sentence in whole_t.stdout
    lines = streamed_t.stdout.splitlines()
    assert sentence in lines
    infinite = f"infinite {a['bound_infinite'] / a['prompt_tokens']:.2%} (not vLLM)"
    assert infinite in whole_t.stdout and f"bounds: {infinite}" in lines
    shown = ", ".join(f"{k} {v:,}" for k, v in a["miss_tokens"].items())
    assert f"missed tokens by reason: {shown}" in lines
    assert lines[-1] == STREAM_NO_BELADY


def test_stream_help_says_belady_is_not_streamed():
    out = run_explorer("replay", "--help")
    assert out.returncode == 0
    text = " ".join(out.stdout.split())
    assert "bound_belady is null" in text and "distinct blocks, not its requests" in text
    assert "bounded memory" in text
