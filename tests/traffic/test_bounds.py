"""The bounds beside a trace replay (design section 14): Belady's MIN checked against a
brute-force reading of its own rule on tiny traces, the infinite bound against the
unbounded policy, vLLM <= Belady <= infinite on every cell, and every `evicted` block a hit
once the pool never evicts."""

from __future__ import annotations

import random

import pytest

from explorer.traffic.bounds import belady_hit_blocks, references
from explorer.traffic.hashing import prepare
from explorer.traffic.sequential import replay_vllm
from explorer.traffic.simulators import simulate_unbounded
from explorer.traffic.sweep import run_sweep
from explorer.traffic.trace import load_trace, shipped_trace_path
from tests.traffic.helpers import line, trace_of


def brute_belady(refs, capacity):
    """Belady by its definition: scan the future at every eviction (quadratic)."""
    flat = [h for hashes, _ in refs for h in hashes]
    resident: dict = {}  # hash -> last reference position
    hits, pos = [], 0
    for hashes, cap in refs:
        hit = 0
        while hit < min(cap, len(hashes)) and hashes[hit] in resident:
            hit += 1
        hits.append(hit)
        start = pos
        for h in hashes:
            resident[h] = pos
            pos += 1
        own = set(hashes)
        while len(resident) > capacity:
            candidates = [h for h in resident if h not in own]
            if not candidates:
                break

            def next_ref(h):
                for p in range(pos, len(flat)):
                    if flat[p] == h:
                        return p
                return float("inf")

            victim = max(candidates, key=lambda h: (next_ref(h), -resident[h]))
            del resident[victim]
        assert all(resident[h] >= start for h in own)
    return hits


def random_trace(rng: random.Random, n: int):
    lines = []
    for _ in range(n):
        ids = [rng.randrange(4) for _ in range(rng.randint(1, 5))]
        # shared prefixes: the first id picks a family, the rest extend it
        lines.append(line(ids, rng.randint(1, 16 * len(ids)), 1))
    return trace_of(lines)


@pytest.mark.parametrize("seed", range(40))
def test_belady_equals_the_brute_force_reading_of_its_rule(seed):
    rng = random.Random(seed)
    prep = prepare(random_trace(rng, rng.randint(2, 9)), 16, False, False, None)
    for num_blocks in (2, 3, 5, 9):
        refs = references(prep, num_blocks)
        assert belady_hit_blocks(refs, num_blocks - 1) == brute_belady(refs, num_blocks - 1)


@pytest.mark.parametrize("seed", range(10))
def test_vllm_at_most_belady_at_most_infinite_and_evicted_hits_unbounded(seed):
    rng = random.Random(100 + seed)
    trace = random_trace(rng, 30)
    sweep = run_sweep(trace, 16, [3, 6, 12, 40], policies=("vllm", "unbounded"))
    unbounded = next(r for r in sweep.runs if r.policy == "unbounded")
    prep = prepare(trace, 16, False, False, None)
    for r in sweep.runs:
        if r.policy != "vllm":
            continue
        assert r.bound_infinite == unbounded.hit_tokens == simulate_unbounded(prep).hit_tokens
        assert r.hit_tokens <= r.bound_belady <= r.bound_infinite, r
        assert sum(r.miss_tokens.values()) == r.prompt_tokens - r.hit_tokens
        kept = replay_vllm(prep, r.num_blocks, keep_misses=True)
        for k, miss in enumerate(kept.misses):
            if miss is None:
                continue
            for i, reason in enumerate(miss.block_reasons):
                if reason == "evicted":  # with a pool that never evicts, this block hits
                    assert (i + 1) * 16 <= unbounded.hits[k], (k, i)


def test_shipped_trace_every_cell_between_its_bounds():
    trace = load_trace(shipped_trace_path(), limit=200)
    sweep = run_sweep(trace, 16, [1000, 4000, 16000])
    for r in sweep.runs:
        assert r.hit_tokens <= r.bound_belady <= r.bound_infinite


@pytest.mark.parametrize("seed", range(6))
def test_scheduler_policy_reasons_sum_to_its_missed_tokens(seed):
    rng = random.Random(500 + seed)
    lines = []
    for k in range(25):  # close arrivals: the same prefix is often in flight
        ids = [rng.randrange(3) for _ in range(rng.randint(1, 6))]
        lines.append(line(ids, rng.randint(1, 512 * len(ids)), rng.randint(1, 40), ts=k * rng.randint(0, 30)))
    sweep = run_sweep(trace_of(lines), 16, [20, 200], policies=("scheduler",))
    for r in sweep.runs:
        assert sum(r.miss_tokens.values()) == r.prompt_tokens - r.hit_tokens, r
        assert r.hit_tokens <= r.bound_infinite
