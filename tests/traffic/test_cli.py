"""`replay` on the command line (design section 4): JSON fields, the summary, and bad input with
exit 2 (explorer.traffic.cli)."""

from __future__ import annotations

import json

import pytest

from explorer.errors import BadInput
from explorer.traffic.trace import MAX_TRACE_BYTES, parse_trace_bytes
from tests.traffic.helpers import BAD_LINES, CONTRACT_KEYS, HAND, assert_bad, cli, line, run_cli, write


def test_cli_json_fields(tmp_path, capsys):
    p = write(tmp_path, HAND)
    rc, out, err = run_cli(capsys, "replay", str(p), "--num-blocks", "10", "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert set(d) == CONTRACT_KEYS
    assert d["block_size"] == 16 and d["num_blocks"] == 10
    assert (d["requests"], d["skipped"], d["prompt_tokens"], d["hit_tokens"]) == (8, 1, 1105, 272)
    assert d["hit_rate"] == pytest.approx(272 / 1105)
    assert d["tokens_per_s"] > 0


def test_cli_limit_and_text_summary(tmp_path, capsys):
    p = write(tmp_path, HAND)
    rc, out, _ = run_cli(capsys, "replay", str(p), "--num-blocks", "10", "--limit", "3", "--json")
    d = json.loads(out)
    assert rc == 0 and d["requests"] == 3 and d["prompt_tokens"] == 184 and d["hit_tokens"] == 32
    rc, out, _ = run_cli(capsys, "replay", str(p), "--num-blocks", "10")
    assert rc == 0 and "hit rate" in out and "24.62%" in out


def test_scheduler_cli(tmp_path, capsys):
    p = write(tmp_path, HAND)
    rc, out, err = run_cli(capsys, "replay", str(p), "--num-blocks", "10", "--policy", "scheduler", "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert set(d) == CONTRACT_KEYS | {"policy", "scheduler", "hits"} and d["policy"] == "scheduler"
    assert d["skipped"] == 1 and len(d["hits"]) == 8 and sum(d["hits"]) == d["hit_tokens"] and d["hits"][5] == 0
    s = d["scheduler"]
    assert (s["scheduler"], s["step_ms"], s["max_num_batched_tokens"], s["max_num_seqs"]) == ("async", 20.0, 2048, 64)
    assert s["steps"] > 0 and s["peak_running"] >= 1 and s["max_queueing_ms"] >= s["mean_queueing_ms"] >= 0
    assert {"preemptions", "last_finish_ms"} <= set(s)
    argv = ["replay", str(p), "--num-blocks", "10", "--policy", "scheduler", "--scheduler", "sync", "--step-ms", "5"]
    rc, out, _ = run_cli(capsys, *argv, "--max-num-batched-tokens", "64")
    assert rc == 0 and "sync scheduler, 64-token budget, a step per 5 ms" in out and "preemptions" in out


def test_all_runs_every_policy(tmp_path, capsys):
    rc, out, err = run_cli(
        capsys, "replay", str(write(tmp_path, HAND)), "--num-blocks", "10", "--policy", "all", "--json"
    )
    assert rc == 0, err
    runs = json.loads(out)["results"]
    assert [r["policy"] for r in runs] == ["vllm", "lru", "unbounded", "scheduler"]
    assert "scheduler" in runs[3] and "scheduler" not in runs[0]


@pytest.mark.parametrize("bad,where,what", [BAD_LINES[i] for i in (0, 2, 5, 7, 8)])
def test_bad_lines_exit_2(tmp_path, bad, where, what):
    assert_bad(cli(str(write(tmp_path, [line([0], 10), bad]))), where, what)


def test_empty_file_exit_2(tmp_path):
    p = tmp_path / "empty.jsonl"
    p.write_text("\n  \n")
    assert_bad(cli(str(p)), "empty trace")


def test_binary_file_exit_2(tmp_path):
    p = tmp_path / "blob.jsonl"
    p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00")
    assert_bad(cli(str(p)), "not a text file")
    p.write_bytes(b'{"a": "\xff\xfe"}\n')
    assert_bad(cli(str(p)), "not a UTF-8 text file")


def test_huge_file_exit_2(tmp_path):
    p = tmp_path / "huge.jsonl"
    with open(p, "wb") as f:
        f.truncate(MAX_TRACE_BYTES + 1)  # sparse: refused before it is read
    assert_bad(cli(str(p)), "limit")
    with pytest.raises(BadInput, match="limit"):
        parse_trace_bytes(b"x" * 101, "upload.jsonl", max_bytes=100)


def test_missing_file_and_bad_options_exit_2(tmp_path):
    assert_bad(cli(str(tmp_path / "nope.jsonl")), "no such file")
    p = write(tmp_path, HAND)
    assert_bad(cli(str(p), "--num-blocks", "1"), "num_blocks")
    assert_bad(cli(str(p), "--num-blocks-list", "100,x"), "'x'")
    assert_bad(cli(str(p), "--concurrent"), "unrecognized arguments")  # replaced by --policy scheduler
    assert_bad(cli(str(p), "--step-ms", "5"), "--step-ms", "only for --policy scheduler")
    assert_bad(cli(str(p), "--policy", "scheduler", "--step-ms", "0"), "positive")
    assert_bad(cli(str(p), "--policy", "scheduler", "--max-num-batched-tokens", "32"), "max_num_seqs (64)")
    assert_bad(cli(str(p), "--policy", "scheduler", "--scheduler", "fast"), "invalid choice")
    assert_bad(cli(str(p), "--num-blocks", str(10**9)), "limit")
