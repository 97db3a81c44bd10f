"""The AsyncScheduler and the batch queue: placeholders, the one-step-later decode hash of spec
part 2 rule 72, the max_tokens skip, stale outputs after a preemption, dropped ones after a reset."""

from __future__ import annotations

import pytest

from explorer.core.request import RequestStatus
from tests.core.sched.helpers import Engine


def outputs(result):
    outs = result.engine_core_outputs
    return None if outs is None else {o.request_id: o.new_token_ids for o in outs.outputs if o.new_token_ids}


@pytest.mark.parametrize(("async_scheduling", "schedule_index"), [(False, 3), (True, 4)])
def test_block_1_of_a_30_token_prompt_is_hashed_one_schedule_later_under_async(async_scheduling, schedule_index):
    """Rule 72's verified example: block 1 (tokens 16..31) is full of known tokens when the 2nd
    sampled token arrives. Sync hashes it in schedule #3 (num_tokens 32, num_computed 31); async
    in schedule #4: at the output of step 2, num_computed - placeholders = 31, no full block."""
    e = Engine(async_scheduling=async_scheduling)
    e.arrive("R", range(30), [500, 501, 502, 503, 504])
    hashed_in = {}
    for n in range(1, 7):
        before = len(e.log.cached)
        e.step()
        for index in e.log.cached[before:]:
            hashed_in[index] = n
    assert hashed_in == {0: 1, 1: schedule_index}


def test_a_decode_gets_a_placeholder_and_the_queue_fills_before_any_update():
    e = Engine(async_scheduling=True)
    req = e.arrive("R", range(30), [500, 501, 502])
    r1 = e.step()
    assert e.scheduled(r1) == {"R": 30} and r1.engine_core_outputs is None  # the queue fills
    assert (req.num_computed_tokens, req.num_output_placeholders, req.num_tokens) == (30, 1, 30)
    r2 = e.step()  # schedules the next decode before token 500 is known, then updates batch 1
    assert e.scheduled(r2) == {"R": 1} and outputs(r2) == {"R": [500]}
    assert (req.num_computed_tokens, req.num_output_placeholders, req.num_tokens) == (31, 1, 31)
    assert e.log.scheduled[:2] == [("R", 30, False, 1), ("R", 1, False, 2)]


def test_no_extra_step_is_scheduled_once_the_step_in_flight_reaches_max_tokens():
    e = Engine(async_scheduling=True)
    e.arrive("R", range(30), [500])
    e.step()
    r2 = e.step()  # R is surely done after batch 1: skipped; the empty batch is queued
    assert e.scheduled(r2) == {} and outputs(r2) == {"R": [500]}
    assert [o.request_id for o in r2.engine_core_outputs.outputs if o.finished] == ["R"]
    r3 = e.step()  # the finished request keeps the engine stepping once more: an empty batch
    assert r3.scheduler_output is not None and r3.scheduler_output.finished_req_ids == ["R"]
    assert not e.sched.has_requests() and len(e.core.batch_queue) == 1
    r4 = e.step()  # nothing to schedule: the oldest batch is updated, the queue drains
    assert r4.scheduler_output is None and r4.engine_core_outputs is not None and not e.core.batch_queue
    r5 = e.step()  # nothing to do at all
    assert r5.scheduler_output is None and r5.engine_core_outputs is None


def test_output_in_flight_at_a_preemption_is_delivered_to_the_preempted_request():
    """B is preempted while its first token is in flight: the token still arrives (stale), is
    appended without touching the zeroed placeholders, and B waits with it; nothing is cached
    for B, which holds no block."""
    e = Engine(num_blocks=4, async_scheduling=True)
    a = e.arrive("A", range(16), [1, 2, 3])
    b = e.arrive("B", range(100, 116), [7, 8, 9])
    e.step()  # A and B, one block each; one block free
    r2 = e.step()  # A's decode takes it; B finds none and preempts itself; batch 1 is updated
    assert e.scheduled(r2) == {"A": 1} and r2.scheduler_output.preempted_reqs == ["B"]
    assert outputs(r2) == {"A": [1], "B": [7]}
    assert b.status == RequestStatus.PREEMPTED and b.num_tokens == 17
    assert (b.num_output_placeholders, b.num_stale_output_tokens, b.num_in_flight_tokens) == (0, 0, 0)
    assert a.num_output_placeholders == 1


def test_a_reset_with_running_requests_drops_their_output_and_samples_it_again():
    e = Engine(async_scheduling=True)
    req = e.arrive("R", range(30), [500, 501, 502])
    e.step()  # batch 1 (R: 30 tokens, samples output[0]) is in flight
    assert e.core.reset_prefix_cache(reset_running_requests=True) is True
    assert req.drop_stale_output and req.num_stale_output_tokens == 30
    r2 = e.step()  # R is admitted again at once; batch 1's token is dropped
    assert e.scheduled(r2) == {"R": 30} and outputs(r2) == {}
    s = r2.engine_core_outputs.scheduler_stats.prefix_cache_stats
    assert (s.requests, s.preempted_requests) == (1, 1)
    r3 = e.step()
    assert outputs(r3) == {"R": [500]}  # sampled again, by batch 2, at the same index
    assert e.scheduled(r3) == {"R": 1}


def test_sync_and_async_finish_with_the_same_tokens_and_cache():
    results = {}
    for mode in (False, True):
        e = Engine(num_blocks=40, budget=64, async_scheduling=mode)
        e.arrive("A", range(50), list(range(900, 920)))
        e.arrive("B", [*range(32), *range(300, 340)], list(range(800, 812)))
        tokens: dict[str, list[int]] = {"A": [], "B": []}
        while e.sched.has_requests() or e.core.batch_queue:
            for rid, new in (outputs(e.step()) or {}).items():
                tokens[rid] += new
        cached = sorted(k for k, _ in e.mgr.block_pool.cached_block_hash_to_block.items())
        results[mode] = (tokens, cached)
    assert results[False] == results[True]
    assert results[False][0] == {"A": list(range(900, 920)), "B": list(range(800, 812))}
