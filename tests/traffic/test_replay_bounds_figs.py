"""The Trace replay page's bounds and reasons (explorer.viz.replay_bounds), drawn from a real
sweep's results: every number in the figures is one the replay reported per cell."""

from __future__ import annotations

import re

import pytest

from explorer.miss.sentence import largest_reason_sentence
from explorer.traffic.sweep import run_sweep, sweep_to_dict
from explorer.traffic.trace import load_trace, shipped_trace_path
from explorer.viz.replay import hit_rate_vs_cache_size
from explorer.viz.replay_bounds import (
    add_bounds,
    largest_reason_line,
    miss_reasons_by_size,
    reason_shares,
    reasons_policy,
)

SIZES = [400, 800, 3000]


@pytest.fixture(scope="module")
def sweep():
    trace = load_trace(shipped_trace_path(), limit=60)
    return sweep_to_dict(run_sweep(trace, 64, SIZES, ("vllm", "lru", "unbounded")), per_request=True)


def _vllm(sweep):
    return sorted((r for r in sweep["results"] if r["policy"] == "vllm"), key=lambda r: r["num_blocks"])


def test_the_chart_holds_vllm_beside_belady_and_infinite(sweep):
    fig = add_bounds(hit_rate_vs_cache_size(sweep), sweep)
    by_meta = {t.meta: t for t in fig.data if t.meta}
    rows = _vllm(sweep)
    total = sweep["prompt_tokens"]
    belady, infinite = by_meta["bound_belady"], by_meta["bound_infinite"]
    assert list(belady.x) == SIZES and list(infinite.x) == SIZES
    assert list(belady.customdata) == [r["bound_belady"] for r in rows]
    vllm = next(t for t in fig.data if t.name.startswith("vLLM free-queue"))
    for v, b, i in zip(vllm.y, belady.y, infinite.y, strict=True):
        assert v <= b + 1e-12 <= i + 2e-12  # vLLM <= Belady <= infinite on every size
    unbounded = next(r for r in sweep["results"] if r["policy"] == "unbounded")
    assert all(y == unbounded["hit_tokens"] / total for y in infinite.y)
    assert rows[1]["hit_tokens"] < rows[1]["bound_belady"]  # a small cache is worth a better policy


def test_the_bars_stack_each_sizes_missed_tokens_by_reason(sweep):
    fig = miss_reasons_by_size(sweep, "vllm")
    rows = _vllm(sweep)
    assert fig.layout.barmode == "stack"
    reasons = [t.meta for t in fig.data]
    assert "never_cached" in reasons and "evicted" in reasons
    for i, r in enumerate(rows):
        assert sum(t.y[i] for t in fig.data) == sum(r["miss_tokens"].values())
        assert sum(r["miss_tokens"].values()) == sweep["prompt_tokens"] - r["hit_tokens"]
        for t in fig.data:
            assert t.y[i] == r["miss_tokens"].get(t.meta, 0)
    evicted = next(t for t in fig.data if t.meta == "evicted")
    assert evicted.y[1] > evicted.y[-1]  # a bigger cache evicts less


def test_one_sentence_names_the_largest_reason_at_the_largest_size(sweep):
    assert reasons_policy(sweep) == "vllm"
    last = _vllm(sweep)[-1]
    line = largest_reason_line(sweep, "vllm")
    assert line == f"At {SIZES[-1]:,} blocks, {largest_reason_sentence(last['miss_tokens'])}."
    top = max(last["miss_tokens"], key=last["miss_tokens"].get)
    share = last["miss_tokens"][top] / sum(last["miss_tokens"].values())
    assert re.search(rf"\b{share:.0%} of missed tokens", line)


def test_the_shares_table_sums_to_one_per_size(sweep):
    for row in reason_shares(_vllm(sweep)):
        shares = [float(v.rstrip("%")) for k, v in row.items() if k not in ("cache size (blocks)", "missed tokens")]
        assert abs(sum(shares) - 100) < 0.1 * len(shares)


def test_a_sweep_without_an_engine_policy_draws_no_reasons(sweep):
    lru_only = {**sweep, "results": [r for r in sweep["results"] if r["policy"] in ("lru", "unbounded")]}
    assert reasons_policy(lru_only) is None
    before = len(hit_rate_vs_cache_size(lru_only).data)
    assert len(add_bounds(hit_rate_vs_cache_size(lru_only), lru_only).data) == before
