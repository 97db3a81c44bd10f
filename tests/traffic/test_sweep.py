"""Sweeps over cache sizes and policies, hashing once (explorer.traffic.sweep)."""

from __future__ import annotations

import json

import pytest

from explorer.errors import BadInput
from explorer.traffic.hashing import prepare
from explorer.traffic.sequential import replay_vllm, replay_vllm_plain
from explorer.traffic.sweep import parse_block_sizes, parse_sizes, run_sweep
from explorer.traffic.trace import load_trace, shipped_trace_path
from tests.traffic.helpers import run_cli


def test_sweep_equals_separate_runs(shared, capsys):
    sizes = [12, 40, 150, 5000]
    sweep = run_sweep(shared, 64, sizes)
    assert sweep.prompt_tokens == shared.prompt_tokens and sweep.requests == 60
    for size, run in zip(sizes, sweep.runs):
        alone = replay_vllm(prepare(shared, 64), size)
        assert (run.num_blocks, run.hit_tokens, run.skipped, run.hits) == (
            size,
            alone.hit_tokens,
            alone.skipped,
            alone.hits,
        )
        assert run.hits == replay_vllm_plain(shared, 64, size).hits
    assert len({r.hit_tokens for r in sweep.runs}) > 1  # the sizes matter here
    # through the command line, on the shipped trace
    path = str(shipped_trace_path())
    rc, out, _ = run_cli(
        capsys, "replay", path, "--limit", "40", "--block-size", "64", "--num-blocks-list", "300,2000,20000", "--json"
    )
    assert rc == 0
    d = json.loads(out)
    assert d["requests"] == 40 and d["prompt_tokens"] == load_trace(path, limit=40).prompt_tokens
    for size, res in zip([300, 2000, 20000], d["results"]):
        rc, one, _ = run_cli(
            capsys, "replay", path, "--limit", "40", "--block-size", "64", "--num-blocks", str(size), "--json"
        )
        single = json.loads(one)
        assert (res["num_blocks"], res["hit_tokens"], res["skipped"]) == (size, single["hit_tokens"], single["skipped"])


def test_work_cap(shared):
    with pytest.raises(BadInput, match="larger block size"):
        run_sweep(shared, 1, [100], max_blocks_hashed=10_000)
    assert run_sweep(shared, 64, [100], max_blocks_hashed=10_000).runs[0].num_blocks == 100


def test_parse_sizes():
    assert parse_sizes("1000, 5_000,20000") == [1000, 5000, 20000]
    for bad in ("", "1", "10,10", "a"):
        with pytest.raises(BadInput):
            parse_sizes(bad)


def test_parse_block_sizes_takes_one_token_blocks():
    """Block sizes are tokens, not cache sizes: 1 is a block size (a cache size needs 2)."""
    assert parse_block_sizes("1, 16,32") == [1, 16, 32]
    assert parse_block_sizes("4096", most=8, largest=4096) == [4096]
    for bad, message in (("0", "between 1 and"), ("16,16", "twice"), (" , ", "none given"), ("x", "ASCII digits")):
        with pytest.raises(BadInput, match=f"block sizes: .*{message}"):
            parse_block_sizes(bad)
    with pytest.raises(BadInput, match="more than 2"):
        parse_block_sizes("1,2,3", most=2)


def test_sweep_lists_block_size_1():
    """`sweep --block-size-list 1,16` plans both (block size 1 was refused as a cache size)."""
    from explorer.cli import build_parser
    from explorer.traffic.sweep_cli import cells_from_args

    args = build_parser().parse_args(["sweep", "t.jsonl", "--num-blocks-list", "100", "--block-size-list", "1,16"])
    assert sorted({c.block_size for c in cells_from_args(args)}) == [1, 16]


def test_figures_from_a_sweep(shared):
    from explorer.traffic.sweep import sweep_to_dict
    from explorer.viz.replay import _windowed, hit_rate_vs_cache_size, hits_over_time

    d = sweep_to_dict(run_sweep(shared, 64, [12, 150], ["vllm", "lru", "unbounded"]), per_request=True)
    fig = hit_rate_vs_cache_size(d)
    assert [t.name.split()[0] for t in fig.data] == ["vLLM", "plain", "unbounded"]
    vllm = fig.data[0]
    assert list(vllm.x) == [12, 150]
    assert list(vllm.y) == [r["hit_rate"] for r in d["results"] if r["policy"] == "vllm"]
    assert fig.layout.xaxis.type == "log"
    fig2 = hits_over_time(d, 12, window=10)
    assert len(fig2.data) == 3  # vllm and lru at 12 blocks, and the ceiling
    assert len(fig2.data[0].x) == 60
    assert _windowed([0, 10, 10], [10, 10, 10], 2) == [0.0, 0.5, 1.0]
    json.dumps(d)  # what the worker sends back is JSON
