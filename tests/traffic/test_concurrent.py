"""Concurrency from the timestamps (explorer.traffic.concurrent)."""

from __future__ import annotations

import pytest

from explorer.traffic.concurrent import ConcurrencyConfig, replay_concurrent
from explorer.traffic.hashing import prepare
from explorer.traffic.sequential import replay_vllm
from explorer.traffic.simulators import simulate_unbounded
from tests.traffic.helpers import line, trace_of


def test_concurrency_shares_running_blocks_and_queues_when_full():
    tr = trace_of(
        [
            line([0], 64, out=10, ts=0),  # A runs 0..200 ms, holds 4 blocks
            line([0], 64, out=1, ts=0),  # B hits A's running blocks: 48; needs 1 new block
            line([1], 64, out=2, ts=50),  # C needs 4 new blocks: waits for A (B ends at 20 ms)
        ]
    )
    prep = prepare(tr, 16)
    r = replay_concurrent(prep, 6, ConcurrencyConfig(decode_ms=20))
    assert r.hits == [0, 48, 0]
    c = r.concurrency
    assert c["peak_running"] == 2
    assert c["max_wait_ms"] == 150.0  # C: arrived 50, admitted at 200
    assert c["last_finish_ms"] == 240.0
    # sequentially B hits the same, and C never waits
    assert replay_vllm(prep, 6).hits == [0, 48, 0]


@pytest.mark.parametrize("outputs", [False, True])
def test_concurrency_queue_under_pressure(shared, outputs):
    prep = prepare(shared, 64, outputs=outputs, need_output_hashes=True)
    r = replay_concurrent(prep, 40, ConcurrencyConfig(decode_ms=50))
    c = r.concurrency
    assert c["max_wait_ms"] > 0 and c["peak_running"] >= 2  # requests queued, and overlapped
    ceiling = simulate_unbounded(prep)
    assert all(h <= u for h, u in zip(r.hits, ceiling.hits))  # arrivals are in file order here
    assert r.skipped == replay_vllm(prep, 40).skipped
