"""A healthy fleet through the simulation loop, and asking the router (explorer.router.simulate)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from explorer.router.config import FleetConfig
from explorer.router.simulate import ask, simulate
from explorer.router.stream import build_stream
from tests.router.helpers import SMALL, run, with_failures


def test_healthy_router_predicts_the_engines_hits(healthy):
    # each chat turn arrives after the previous reply was published: the views are current
    chk = healthy.prediction_check()
    assert chk["over"] == chk["under"] == 0 and chk["exact"] > 0
    assert healthy.predicted > 0
    assert healthy.router_keys_known == healthy.router_keys
    assert healthy.subscriber["gaps"] == healthy.subscriber["lost"] == 0
    assert all(i.phantom == i.missing == 0 for i in healthy.instances)


def test_numbers_are_the_engines_own_stats(stream, healthy):
    routed = {i: [k for k, x in enumerate(healthy.instance_of) if x == i] for i in range(3)}
    for i, inst in enumerate(healthy.instances):
        ks = routed[i]
        assert inst.stats["requests"] == len(ks) == inst.routed
        assert inst.stats["queries"] == sum(len(stream.requests[k].tokens) for k in ks)
        assert inst.stats["hits"] == sum(healthy.hit_tokens[k] for k in ks)
        assert inst.hit_tokens == inst.stats["hits"]
    assert healthy.hits == sum(i.stats["hits"] for i in healthy.instances)
    assert healthy.hit_rate == healthy.hits / healthy.queries


def test_prefix_beats_round_robin_on_the_default_fleet():
    result = simulate(FleetConfig())
    hr = {p: r.hit_rate for p, r in result.runs.items()}
    assert hr["prefix"] > hr["round_robin"] + 0.1
    assert hr["prefix"] > hr["least_loaded"] + 0.1
    assert result.runs["prefix"].saved_ms > result.runs["round_robin"].saved_ms


def test_simulation_is_deterministic(stream):
    a = simulate(with_failures(xxhash_unshared_seed=True, drop_batches=0.2), stream=stream).summary()
    b = simulate(with_failures(xxhash_unshared_seed=True, drop_batches=0.2), stream=stream).summary()
    assert a == b


def test_hash_memo_changes_nothing(stream):
    cfg = with_failures(tenant_salt=True)
    a = simulate(cfg, stream=stream, memoize=True)
    b = simulate(cfg, stream=stream, memoize=False)
    assert a.summary() == b.summary()
    for p in a.runs:
        assert a.runs[p].hit_tokens == b.runs[p].hit_tokens
        assert a.runs[p].instance_of == b.runs[p].instance_of


def one_instance_trace(tmp_lines, **fleet):
    import json

    data = ("\n".join(json.dumps(x) for x in tmp_lines) + "\n").encode()
    cfg = replace(
        SMALL,
        fleet=replace(SMALL.fleet, instances=1, **fleet),
        workload=replace(SMALL.workload, kind="trace", trace="upload", requests=10),
    )
    return simulate(cfg, data, "burst.jsonl", policies=("prefix",)).runs["prefix"]


@pytest.mark.parametrize("scheduler", ["sync", "async"])
def test_one_engine_step_caches_what_the_router_cannot_know_yet(scheduler):
    """Two requests on one prompt within one step: both are routed before any event exists,
    and the engine admits both in one schedule(), the second hitting the blocks the first
    was just allocated (cached at allocation, published only with the step's update)."""
    same = {"input_length": 600, "output_length": 3, "hash_ids": [1, 2]}
    r = one_instance_trace([{"timestamp": 0, **same}, {"timestamp": 0, **same}], scheduler=scheduler)
    assert r.predicted_tokens == [0, 0] and r.hit_tokens == [0, 592]
    assert r.prediction_check() == {"exact": 1, "over": 0, "under": 1, "queued": 0}
    assert r.instances[0].stats["hits"] == 592


def test_a_request_the_budget_cannot_take_at_once_is_queued():
    """A 3,000-token prompt takes the whole 2,048-token budget of step 0: the request behind
    it is first scheduled in step 1, so it counts as queued, not as a prediction."""
    r = one_instance_trace(
        [
            {"timestamp": 0, "input_length": 3000, "output_length": 2, "hash_ids": [1, 2, 3, 4, 5, 6]},
            {"timestamp": 0, "input_length": 100, "output_length": 2, "hash_ids": [9]},
        ]
    )
    assert r.waited == [False, True] and r.prediction_check()["queued"] == 1
    assert r.instances[0].max_queue == 2


def test_the_instances_run_the_fleets_scheduler(stream):
    """The fleet's budget and scheduler reach every instance: a budget of 64 tokens chunks
    every prompt into many steps, so requests queue behind each other."""
    slow = run(replace(SMALL, fleet=replace(SMALL.fleet, max_num_batched_tokens=64, scheduler="sync")), stream)
    fast = run(SMALL, stream)
    assert slow.prediction_check()["queued"] > fast.prediction_check()["queued"]
    assert slow.queries == fast.queries  # every request was admitted, and finished, either way


def test_steps_that_take_no_time_finish_before_the_next_arrival():
    cfg = replace(SMALL, workload=replace(SMALL.workload, decode_ms=0.0))
    r = run(cfg)
    assert r.queries == sum(len(q.tokens) for q in build_stream(cfg).requests)  # every request admitted
    assert r.prediction_check()["queued"] == 0  # each arrival finds the engines idle


def test_ask_the_router(stream):
    res = simulate(SMALL, stream=stream, policies=("prefix",))
    q = stream.requests[0]
    spec = ", ".join(str(t) for t in q.tokens)
    a = ask(res, spec)
    assert a.tokens == len(q.tokens)
    assert max(a.matches) == a.cap  # the first prompt is cached somewhere, in full
    assert a.matches[a.instance] == max(a.matches)
