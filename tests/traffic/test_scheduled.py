"""The ``scheduler`` policy: a trace through the mirrored engine loop (explorer.traffic.scheduled).
Its hits against vLLM's own scheduler: tests/conformance/test_trace_sched_conformance.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from explorer.errors import BadInput
from explorer.traffic.hashing import prepare
from explorer.traffic.scheduled import SchedulerPolicy, arrival_step, replay_scheduler
from explorer.traffic.simulators import simulate_unbounded
from tests.traffic.helpers import line, trace_of

# budget 512: the 1,200-token prompt takes three steps (512, 512, 176)
CHUNKED = SchedulerPolicy("sync", max_num_batched_tokens=512, max_num_seqs=4)


def chunked_trace():
    return trace_of([line([0, 1, 2], 1200, out=3, ts=0), line([0, 1, 2], 1200, out=1, ts=5)])


@pytest.mark.parametrize("scheduler", ["sync", "async"])
def test_chunked_prefill_and_a_shared_prompt_by_hand(scheduler):
    # step 0 (t=0): A gets 512 tokens. Step 1 (t=20): B arrives; A takes the whole budget.
    # Step 2 (t=40): A's last 176 tokens, then B: all 75 of A's blocks are cached (at
    # allocation), B's lookup may cover (1200 - 1) // 16 = 74 of them: 1,184 tokens; it waited
    # 40 - 5 = 35 ms. Sync: B samples its one token in step 2, A its three in steps 2-4 (t=80).
    r = replay_scheduler(prepare(chunked_trace(), 16), 200, replace(CHUNKED, scheduler=scheduler))
    assert r.policy == "scheduler" and r.hits == [0, 1184] and r.hit_tokens == 1184 and r.skipped == 0
    s = r.scheduler
    assert s is not None
    assert (s["peak_running"], s["preemptions"], s["mean_queueing_ms"], s["max_queueing_ms"]) == (2, 0, 17.5, 35.0)
    # sync: steps 0-4, then one more that tells the worker A finished. Async: each update
    # comes a step later (A finishes at t=100), and two more steps drain the batch queue.
    assert (s["steps"], s["last_finish_ms"]) == ((6, 80.0) if scheduler == "sync" else (8, 100.0))


def test_arrival_step_is_the_first_step_at_or_after_the_timestamp():
    assert [arrival_step(t, 20.0) for t in (0, 0.5, 20, 20.000001, 39.99, 40)] == [0, 1, 1, 2, 2, 2]
    assert arrival_step(0.3, 0.1) == 3  # 0.3 / 0.1 is 2.9999999999999996 in floats
    assert all((k - 1) * 0.1 < t <= k * 0.1 for t in (0.1, 0.2, 0.3, 0.7) for k in [arrival_step(t, 0.1)])


def test_idle_gaps_are_jumped_and_change_nothing():
    near = trace_of([line([0], 64, out=2, ts=0), line([0], 64, out=2, ts=100)])
    far = trace_of([line([0], 64, out=2, ts=0), line([0], 64, out=2, ts=100_000_000)])
    a, b = (replay_scheduler(prepare(t, 16), 50, CHUNKED) for t in (near, far))
    assert a.hits == b.hits == [0, 48]
    assert a.scheduler is not None and b.scheduler is not None
    assert a.scheduler["steps"] == b.scheduler["steps"]  # no step for the idle 28 hours
    assert b.scheduler["last_finish_ms"] == 100_000_000 + 20


def bursty(n=40):
    """Requests over a few shared chains, all arriving in the first 40 ms."""
    ids = [[0, 1], [0, 2], [3], [0, 1, 4]]
    return trace_of([line(ids[k % 4], 512 * len(ids[k % 4]) - 7 * k, out=1 + k % 9, ts=k) for k in range(n)])


@pytest.mark.parametrize("scheduler", ["sync", "async"])
def test_the_feed_window_changes_nothing(scheduler):
    """Only max_num_seqs + 1 never-admitted requests are built at a time; any larger window
    (here: every request at once) gives the same run."""
    prep = prepare(bursty(), 16)
    policy = SchedulerPolicy(scheduler, max_num_batched_tokens=256, max_num_seqs=3)
    small = replay_scheduler(prep, 300, policy)
    whole = replay_scheduler(prep, 300, policy, feed_window=10**6)
    assert small.hits == whole.hits and small.scheduler == whole.scheduler
    assert small.scheduler is not None and small.scheduler["max_queueing_ms"] > 500  # the queue was long


@pytest.mark.parametrize("scheduler", ["sync", "async"])
def test_preemption_under_pressure_and_the_ceiling(shared, scheduler):
    prep = prepare(shared, 64, outputs=True, need_output_hashes=True)
    r = replay_scheduler(prep, 40, SchedulerPolicy(scheduler, max_num_batched_tokens=512, max_num_seqs=8))
    s = r.scheduler
    assert s is not None and s["preemptions"] > 0 and s["peak_running"] > 1
    assert r.skipped > 0 and sum(r.hits) == r.hit_tokens > 0
    # a request only ever hits what earlier arrivals cached: never above the ceiling
    ceiling = simulate_unbounded(prep)
    assert all(h <= u for h, u in zip(r.hits, ceiling.hits))


def test_output_length_zero_generates_one_token():
    r = replay_scheduler(prepare(trace_of([line([0], 40, out=0), line([0], 40, out=0)]), 16), 10, CHUNKED)
    assert r.hits == [0, 32] and r.scheduler is not None and r.scheduler["last_finish_ms"] == 0.0


@pytest.mark.parametrize(
    "policy,needle",
    [
        (SchedulerPolicy("fast"), "scheduler must be one of"),
        (SchedulerPolicy(step_ms=0), "step_ms"),
        (SchedulerPolicy(step_ms=float("nan")), "step_ms"),
        (SchedulerPolicy(max_num_batched_tokens=32), "greater than or equal to max_num_seqs"),
        (SchedulerPolicy(max_num_batched_tokens=1 << 30), "at most"),
    ],
)
def test_bad_settings_are_bad_input(policy, needle):
    with pytest.raises(BadInput, match=needle):
        replay_scheduler(prepare(chunked_trace(), 16), 200, policy)
