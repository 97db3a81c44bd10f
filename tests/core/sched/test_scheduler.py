"""The synchronous Scheduler: token budget, chunked prefill, the threshold, admission, preemption,
abort and reset. Every step is followed by the manager's and the scheduler's invariants."""

from __future__ import annotations

import pytest

from explorer.core.errors import ConfigError
from explorer.core.events import AllBlocksCleared, BlockStored
from explorer.core.kv_cache_manager import KVCacheManager
from explorer.core.request import RequestStatus
from explorer.core.sched.config import SchedulerConfig
from explorer.core.sched.scheduler import Scheduler
from tests.core.sched.helpers import Engine


def outputs(result):
    outs = result.engine_core_outputs
    return {} if outs is None else {o.request_id: o.new_token_ids for o in outs.outputs if o.new_token_ids}


def finished(result):
    outs = result.engine_core_outputs
    return [] if outs is None else [o.request_id for o in outs.outputs if o.finished]


def stats(result):
    return result.engine_core_outputs.scheduler_stats.prefix_cache_stats


def test_a_prompt_longer_than_the_budget_is_chunked():
    """The interview walkthrough's 1,200-token prompt under a 512-token budget: 512, 512, 176,
    each chunk's full blocks cached as it is allocated; only the last chunk samples."""
    e = Engine(num_blocks=100, budget=512)
    e.arrive("A", range(1200), [7, 8])
    chunks, cached, sampled = [], [], []
    for _ in range(3):
        before = len(e.log.cached)
        r = e.step()
        chunks.append(e.scheduled(r)["A"])
        cached.append(len(e.log.cached) - before)
        sampled.append(outputs(r))
    assert chunks == [512, 512, 176]
    assert cached == [32, 32, 11]  # 1200 // 16 = 75 full blocks in all
    assert sampled == [{}, {}, {"A": [7]}]
    r = e.step()
    assert e.scheduled(r) == {"A": 1} and outputs(r) == {"A": [8]} and finished(r) == ["A"]


def test_stats_are_recorded_at_admission_only_once_per_admission():
    e = Engine(num_blocks=100, budget=512)
    e.arrive("A", range(1200), [7])
    first = stats(e.step())
    assert (first.requests, first.queries, first.hits) == (1, 1200, 0)
    later = stats(e.step())
    assert (later.requests, later.queries) == (0, 0)  # a later chunk does not look up again


def test_two_requests_share_one_budget_in_queue_order():
    e = Engine(budget=150)
    e.arrive("A", range(100), [1, 2, 3])
    e.arrive("B", range(1000, 1100), [4, 5, 6])
    r1 = e.step()
    assert e.scheduled(r1) == {"A": 100, "B": 50}  # B's first chunk takes what A left
    assert outputs(r1) == {"A": [1]}
    r2 = e.step()
    assert e.scheduled(r2) == {"A": 1, "B": 50}  # running queue first: A decodes, B continues
    assert outputs(r2) == {"A": [2], "B": [4]}


@pytest.mark.parametrize(
    ("others", "want"),
    [
        (False, {"A": 100}),  # the only eligible request: nobody to starve, the whole budget
        (True, {"A": 32, "B": 32}),
    ],
)
def test_long_prefill_threshold_applies_only_with_more_than_one_eligible_request(others, want):
    e = Engine(budget=512, threshold=32)
    e.arrive("A", range(100), [1])
    if others:
        e.arrive("B", range(1000, 1100), [2])
    assert e.scheduled(e.step()) == want


def test_max_num_seqs_caps_the_running_queue():
    e = Engine(budget=256, max_num_seqs=1)
    e.arrive("A", range(20), [1, 2])
    e.arrive("B", range(100, 120), [3])
    assert e.scheduled(e.step()) == {"A": 20}
    assert e.scheduled(e.step()) == {"A": 1}  # A finishes here
    assert e.scheduled(e.step()) == {"B": 20}


def test_the_whole_sequence_must_fit_at_admission_not_only_the_first_chunk():
    """scheduler_reserve_full_isl: a 100-token prompt needs 7 blocks; with 4 free it is not
    admitted although its first 16-token chunk would fit, and its lookup is not counted."""
    e = Engine(num_blocks=5, budget=16, max_num_seqs=16)
    e.arrive("A", range(100), [1])
    r = e.step()
    assert e.scheduled(r) == {} and stats(r).requests == 0
    assert e.sched.waiting[0].request_id == "A"


def test_preemption_takes_the_last_running_request_until_the_allocation_fits():
    """A's second 48-token chunk needs 3 blocks and none is free: D, C and B (1 block each) are
    preempted from the end of the running queue, in that order, and nobody is admitted in that
    step; they come back in order, counted as preempted."""
    e = Engine(num_blocks=7, budget=72, max_num_seqs=8, threshold=48)
    e.arrive("A", range(96), [1])
    for i, rid in enumerate("BCD"):
        e.arrive(rid, range(200 + 10 * i, 208 + 10 * i), [2, 3])
    assert e.scheduled(e.step()) == {"A": 48, "B": 8, "C": 8, "D": 8}
    r2 = e.step()
    assert e.scheduled(r2) == {"A": 48}
    assert r2.scheduler_output.preempted_reqs == ["D", "C", "B"]
    assert [rid for rid, _ in e.log.preempted] == ["D", "C", "B"]
    assert all("allocate_slots for A (48 tokens)" in why for _, why in e.log.preempted)
    assert finished(r2) == ["A"]  # A's last chunk sampled its only token
    assert [r.request_id for r in e.sched.waiting] == ["B", "C", "D"]
    assert all(r.status == RequestStatus.PREEMPTED for r in e.sched.waiting)
    r3 = e.step()
    assert e.scheduled(r3) == {"B": 9, "C": 9, "D": 9}  # prompt + the token each had sampled
    s = stats(r3)
    assert (s.requests, s.preempted_requests, s.preempted_queries) == (0, 3, 27)


def test_a_request_that_finds_no_room_preempts_itself_when_it_is_last():
    e = Engine(num_blocks=6, budget=64)
    e.arrive("A", range(32), [1] * 20)
    e.arrive("B", range(100, 132), [2] * 20)
    e.step()  # A and B: 2 blocks each, 1 block free
    r = e.step()  # A takes the last block for token 33; B finds none and preempts itself
    assert e.scheduled(r) == {"A": 1}
    assert r.scheduler_output.preempted_reqs == ["B"]
    assert e.log.preempted == [("B", "allocate_slots for B (1 tokens) found no room")]


def test_abort_frees_at_once_and_keeps_the_engine_stepping_once_more():
    e = Engine()
    e.arrive("A", range(40), [1, 2, 3])
    e.step()
    free_before = e.mgr.block_pool.get_num_free_blocks()
    assert [r.request_id for r in e.core.abort_requests(["A"])] == ["A"]
    assert e.mgr.block_pool.get_num_free_blocks() == free_before + 3
    assert e.core.abort_requests(["A"]) == []  # a finished id is ignored
    assert e.sched.has_requests()  # the worker must still hear of it
    r = e.step()
    assert e.scheduled(r) == {} and r.scheduler_output.finished_req_ids == ["A"]
    assert not e.sched.has_requests()
    assert e.step().scheduler_output is None  # nothing to do


def test_reset_running_preempts_from_the_end_and_clears_with_the_next_step():
    e = Engine(budget=256)
    e.arrive("A", range(40), [1] * 5)
    e.arrive("B", range(100, 140), [2] * 5)
    e.step()
    assert e.core.reset_prefix_cache() is False  # blocks in use: refused
    assert e.core.reset_prefix_cache(reset_running_requests=True) is True
    assert [rid for rid, _ in e.log.preempted] == ["B", "A"]
    assert [r.request_id for r in e.sched.waiting] == ["A", "B"]
    assert not e.mgr.block_pool.cached_block_hash_to_block
    n = len(e.publisher.batches)
    r = e.step()
    (batch,) = e.publisher.batches[n:]  # one batch, published by this step's update
    events = batch.events
    assert isinstance(events[0], AllBlocksCleared) and isinstance(events[1], BlockStored)
    assert e.scheduled(r) == {"A": 41, "B": 41}
    assert stats(r).preempted_requests == 2


def test_vllm_refuses_a_budget_below_max_num_seqs_and_a_threshold_past_max_model_len():
    mgr = KVCacheManager(10, 16, max_model_len=100)
    with pytest.raises(ConfigError, match="greater than or equal to max_num_seqs"):
        Scheduler(mgr, SchedulerConfig(max_num_batched_tokens=8, max_num_seqs=16))
    with pytest.raises(ConfigError, match="long_prefill_token_threshold"):
        Scheduler(mgr, SchedulerConfig(long_prefill_token_threshold=101))
    with pytest.raises(ConfigError, match="at least 1"):
        Scheduler(mgr, SchedulerConfig(max_num_batched_tokens=0, max_num_seqs=0))


def test_a_request_stops_at_max_model_len():
    e = Engine(max_model_len=34)
    e.arrive("A", range(32), [1, 2, 3, 4])
    e.step()  # computes 32, samples 1 (33 tokens)
    r = e.step()  # computes token 33, samples 2: 34 tokens = max_model_len
    assert finished(r) == ["A"] and e.log.finished == [("A", "finished_length_capped")]
