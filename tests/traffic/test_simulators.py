"""The lru and unbounded simulators, not vLLM (explorer.traffic.simulators)."""

from __future__ import annotations

import pytest

from explorer.traffic.hashing import prepare
from explorer.traffic.sequential import replay_vllm
from explorer.traffic.simulators import simulate_lru, simulate_unbounded
from explorer.traffic.sweep import run_sweep
from tests.traffic.helpers import line, trace_of


@pytest.mark.parametrize("outputs", [False, True])
def test_unbounded_is_the_ceiling(shared, outputs):
    sizes = [12, 40, 150, 600, 100000]
    sweep = run_sweep(shared, 64, sizes, ["vllm", "lru", "unbounded"], outputs=outputs)
    unb = [r for r in sweep.runs if r.policy == "unbounded"]
    assert len(unb) == 1 and unb[0].num_blocks is None and unb[0].skipped == 0
    ceiling = unb[0]
    assert ceiling.hit_tokens > 0
    for r in sweep.runs:
        assert r.hit_tokens <= ceiling.hit_tokens
        assert all(h <= c for h, c in zip(r.hits, ceiling.hits))  # request by request
    by = {(r.policy, r.num_blocks): r for r in sweep.runs}
    for policy in ("vllm", "lru"):
        # a cache that never fills is the ceiling; a small one is below it
        assert by[(policy, 100000)].hits == ceiling.hits
        assert by[(policy, 12)].hit_tokens < ceiling.hit_tokens


def test_lru_small_hand_case():
    # 5 usable blocks of 16. A [0] 64 caches A0..A3 (plain LRU: A0 least recent). B [1] 32
    # caches 2 blocks, one too many: plain LRU evicts A0, the head of A's chain, so C [0] 64
    # hits nothing. vLLM freed A's tail first (queue: 5, A3, A2, A1, A0): B takes block 5
    # and evicts A3, and C hits A0..A2 = 48 tokens (its cap: 63 // 16 = 3 blocks).
    tr = trace_of([line([0], 64), line([1], 32), line([0], 64)])
    prep = prepare(tr, 16)
    assert simulate_lru(prep, 6).hits == [0, 0, 0]
    assert replay_vllm(prep, 6).hits == [0, 0, 48]
    assert simulate_unbounded(prep).hits == [0, 0, 48]
