"""Prefix cache statistics and the windowed hit rate: spec rules 46 and 47."""

from __future__ import annotations

import pytest

from explorer.core.metrics import CachingMetrics, PrefixCacheStats


def stats(requests, queries, hits, reset=False):
    return PrefixCacheStats(reset=reset, requests=requests, queries=queries, hits=hits)


def test_rule_46_record_counts_normal_requests():
    """Rule 46: record(num_tokens, num_hits, preempted=False) adds to requests, queries, hits."""
    s = PrefixCacheStats()
    s.record(100, 64, preempted=False)
    s.record(50, 0, preempted=False)
    assert (s.requests, s.queries, s.hits) == (2, 150, 64)
    assert (s.preempted_requests, s.preempted_queries, s.preempted_hits) == (0, 0, 0)


def test_rule_46_record_counts_preempted_requests_apart():
    """Rule 46: preempted requests go to the preempted_* counters, never to both."""
    s = PrefixCacheStats()
    s.record(100, 96, preempted=True)
    assert (s.requests, s.queries, s.hits) == (0, 0, 0)
    assert (s.preempted_requests, s.preempted_queries, s.preempted_hits) == (1, 100, 96)


def test_rule_46_defaults():
    """Rule 46: BaseCacheStats(reset=False, requests=0, queries=0, hits=0) plus preempted_* = 0."""
    s = PrefixCacheStats()
    assert s.reset is False and s.as_dict() == dict.fromkeys(
        ["requests", "queries", "hits", "preempted_requests", "preempted_queries", "preempted_hits"], 0
    )


def test_rule_47_hit_rate_is_hits_over_queries():
    """Rule 47: hit_rate = aggregated_hits / aggregated_queries."""
    m = CachingMetrics()
    m.observe(stats(2, 200, 50))
    m.observe(stats(1, 100, 100))
    assert m.hit_rate == pytest.approx(150 / 300)


def test_rule_47_hit_rate_is_zero_without_queries():
    """Rule 47: hit_rate is 0.0 when there are no queries."""
    assert CachingMetrics().hit_rate == 0.0


def test_rule_47_oldest_whole_updates_are_dropped():
    """Rule 47: it pops the oldest whole updates while len(queue) > 1 and aggregated_requests > 1000."""
    m = CachingMetrics()
    m.observe(stats(600, 6000, 6000))
    m.observe(stats(300, 3000, 0))
    assert m.aggregated_requests == 900
    m.observe(stats(200, 2000, 0))  # 1100 > 1000: the whole 600-request update goes
    assert m.aggregated_requests == 500 and len(m.query_queue) == 2
    assert m.hit_rate == 0.0


def test_rule_47_exactly_1000_is_kept():
    """Rule 47: the drop runs only while the total is over 1000."""
    m = CachingMetrics()
    m.observe(stats(600, 1, 1))
    m.observe(stats(400, 1, 0))
    assert m.aggregated_requests == 1000 and len(m.query_queue) == 2


def test_rule_47_newest_update_kept_even_if_alone_over_1000():
    """Rule 47: the newest update is always kept, even if it alone is over 1000."""
    m = CachingMetrics()
    m.observe(stats(5, 50, 50))
    m.observe(stats(1500, 1500, 300))
    assert m.aggregated_requests == 1500 and len(m.query_queue) == 1
    assert m.hit_rate == pytest.approx(0.2)


def test_rule_47_reset_flag_resets_first():
    """Rule 47: if stats.reset, it resets first, then adds the update."""
    m = CachingMetrics()
    m.observe(stats(10, 100, 100))
    m.observe(stats(1, 10, 0, reset=True))
    assert m.aggregated_requests == 1 and m.hit_rate == 0.0


def test_rule_47_updates_with_no_requests_are_ignored():
    """Rule 47: updates with requests == 0 are ignored (a reset in them still applies)."""
    m = CachingMetrics()
    m.observe(stats(3, 30, 15))
    m.observe(stats(0, 0, 0))
    only_preempted = PrefixCacheStats()
    only_preempted.record(100, 100, preempted=True)
    m.observe(only_preempted)  # preempted requests are not part of the window
    assert len(m.query_queue) == 1 and m.hit_rate == pytest.approx(0.5)
    m.observe(stats(0, 0, 0, reset=True))
    assert m.empty and m.hit_rate == 0.0


def test_rule_47_window_size_is_configurable():
    """Rule 47: CachingMetrics(max_recent_requests=1000) by default."""
    assert CachingMetrics().max_recent_requests == 1000
    m = CachingMetrics(max_recent_requests=2)
    for _ in range(3):
        m.observe(stats(1, 10, 10))
    assert m.aggregated_requests == 2
