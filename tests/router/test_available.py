"""Achieved against available (design section 14): the fleet's pooled match per request, the
misses another instance held (``other_instance``), and the page's figure of both per policy."""

from __future__ import annotations

from dataclasses import replace

from explorer.router.simulate import pooled_match, simulate
from explorer.viz.router_available import achieved_vs_available, gap_sentence
from tests.router.helpers import SMALL


def test_the_pooled_match_is_a_run_some_instance_holds_block_by_block():
    views = [{1: 1, 2: 1}, None, {3: 2, 9: 1}, {4: 0}]
    assert pooled_match([1, 2, 3, 4, 5], 5, views) == 3  # 1, 2 on one instance, 3 on another; 4 counts 0
    assert pooled_match([1, 2, 3], 2, views) == 2  # the lookup cap
    assert pooled_match([9, 1], 2, [None, None]) == 0


def test_round_robin_leaves_hits_on_other_instances_and_prefix_routing_fewer():
    result = simulate(SMALL, policies=("round_robin", "prefix"), baseline=False)
    rr, px = result.runs["round_robin"], result.runs["prefix"]
    for run in (rr, px):
        routed = [k for k, i in enumerate(run.instance_of) if i >= 0]
        for k in routed:  # pooled over every instance is at least the best single instance
            assert run.pooled_match_tokens[k] >= run.best_match_tokens[k] >= run.predicted_tokens[k]
        assert run.available_hit_rate == (run.hits + run.other_instance_tokens) / run.queries
        s = run.summary()
        assert s["available_hit_rate"] == run.available_hit_rate and s["other_instance_tokens"] >= 0
    assert rr.other_instance_tokens > px.other_instance_tokens
    assert rr.available_hit_rate - rr.hit_rate > px.available_hit_rate - px.hit_rate
    fig = achieved_vs_available(result)
    bars = {t.meta: t for t in fig.data}
    runs = {r.label: r for r in (rr, px)}
    order = [runs[label] for label in bars["achieved"].x]
    assert sorted(runs) == sorted(bars["available"].x)
    assert list(bars["achieved"].y) == [r.hit_rate for r in order]
    assert list(bars["available"].y) == [r.available_hit_rate for r in order]
    assert list(bars["available"].customdata) == [r.other_instance_tokens for r in order]
    assert gap_sentence(result).startswith(rr.label)


def test_one_instance_has_no_other_instance():
    one = replace(SMALL, fleet=replace(SMALL.fleet, instances=1))
    run = simulate(one, policies=("round_robin",), baseline=False).runs["round_robin"]
    assert run.other_instance_tokens == 0 and run.available_hit_rate == run.hit_rate
