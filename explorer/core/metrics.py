"""Prefix cache statistics (vllm/v1/metrics/stats.py: CachingMetrics at 35-113, PrefixCacheStats at
116-143, PrefillStats at 263-301)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

# vLLM 0.33.0's CacheHitSource (v1/metrics/cache_hit_source.py), in its order: the tiers from
# the accelerator outwards, the unattributed fallback last.
CACHE_HIT_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")
DEVICE = CACHE_HIT_SOURCES[0]
EXTERNAL_UNSPECIFIED = CACHE_HIT_SOURCES[-1]
HOST = CACHE_HIT_SOURCES[1]


@dataclass
class PrefixCacheStats:
    """Token counters recorded by the scheduler when it admits a request.

    ``queries`` counts the request's tokens and ``hits`` its local hit tokens. A request that
    was preempted before counts apart (``preempted_*``), never in both.
    """

    reset: bool = False
    requests: int = 0
    queries: int = 0
    hits: int = 0
    preempted_requests: int = 0
    preempted_queries: int = 0
    preempted_hits: int = 0
    # 0.33.0 (connector stats only): ``hits`` split by the cache tier that supplied them
    # (CacheHitSource values: device, host, p2p, disk, external_unspecified), non-zero only.
    hits_by_source: dict[str, int] = field(default_factory=dict)

    def record(
        self, num_tokens: int, num_hits: int, preempted: bool, hits_by_source: dict[str, int] | None = None
    ) -> None:
        if preempted:
            self.preempted_requests += 1
            self.preempted_queries += num_tokens
            self.preempted_hits += num_hits
            return
        self.requests += 1
        self.queries += num_tokens
        self.hits += num_hits
        if hits_by_source is None:
            return
        if sum(hits_by_source.values()) != num_hits:
            # A split that does not add up counts as unattributed (0.33.0 stats.py:158-165).
            hits_by_source = {EXTERNAL_UNSPECIFIED: num_hits}
        for source, n in hits_by_source.items():
            if n:
                self.hits_by_source[source] = self.hits_by_source.get(source, 0) + n

    def add(self, other: PrefixCacheStats) -> None:
        """Accumulate another update into running totals (``reset`` is not a counter)."""
        self.requests += other.requests
        self.queries += other.queries
        self.hits += other.hits
        self.preempted_requests += other.preempted_requests
        self.preempted_queries += other.preempted_queries
        self.preempted_hits += other.preempted_hits
        for source, n in other.hits_by_source.items():
            self.hits_by_source[source] = self.hits_by_source.get(source, 0) + n

    def as_dict(self) -> dict[str, int]:
        return {
            "requests": self.requests,
            "queries": self.queries,
            "hits": self.hits,
            "preempted_requests": self.preempted_requests,
            "preempted_queries": self.preempted_queries,
            "preempted_hits": self.preempted_hits,
        }


class CachingMetrics:
    """The hit rate over about the last ``max_recent_requests`` requests, as vLLM logs it.

    Updates are kept whole: the oldest whole update is dropped while more than one is kept and
    the total is over the limit, so the newest update always stays even if it alone is over.
    Updates with no request are ignored, so idle steps do not push real ones out. Preempted
    requests are not part of it.
    """

    def __init__(self, max_recent_requests: int = 1000) -> None:
        self.max_recent_requests = max_recent_requests
        self.aggregated_requests = 0
        self.aggregated_query_total = 0
        self.aggregated_query_hit = 0
        self.query_queue: deque[tuple[int, int, int]] = deque()

    def observe(self, stats: PrefixCacheStats) -> None:
        if stats.reset:
            self.reset()
        if stats.requests == 0:
            return
        self.query_queue.append((stats.requests, stats.queries, stats.hits))
        self.aggregated_requests += stats.requests
        self.aggregated_query_total += stats.queries
        self.aggregated_query_hit += stats.hits
        while len(self.query_queue) > 1 and self.aggregated_requests > self.max_recent_requests:
            r, q, h = self.query_queue.popleft()
            self.aggregated_requests -= r
            self.aggregated_query_total -= q
            self.aggregated_query_hit -= h

    def reset(self) -> None:
        self.aggregated_requests = 0
        self.aggregated_query_total = 0
        self.aggregated_query_hit = 0
        self.query_queue.clear()

    @property
    def empty(self) -> bool:
        return self.aggregated_requests == 0

    @property
    def hit_rate(self) -> float:
        if self.aggregated_query_total == 0:
            return 0.0
        return self.aggregated_query_hit / self.aggregated_query_total


@dataclass
class PrefillStats:
    """One request's first scheduled prefill (stats.py:263-295): set at each lookup of its
    first admission, reported once with its first output (``EngineCoreOutput.prefill_stats``),
    whence vLLM's per-request ``num_cached_tokens``. vLLM's ``finalize`` (the cache creation
    tokens) is left out."""

    num_prompt_tokens: int = 0
    num_computed_tokens: int = 0
    num_cached_tokens: int = 0
    num_local_cached_tokens: int = 0
    num_external_cached_tokens: int = 0

    def set(self, num_prompt_tokens: int, num_local_cached_tokens: int, num_external_cached_tokens: int) -> None:
        num_cached_tokens = num_local_cached_tokens + num_external_cached_tokens
        assert num_cached_tokens <= num_prompt_tokens
        self.num_prompt_tokens = num_prompt_tokens
        self.num_computed_tokens = num_prompt_tokens - num_cached_tokens
        self.num_cached_tokens = num_cached_tokens
        self.num_local_cached_tokens = num_local_cached_tokens
        self.num_external_cached_tokens = num_external_cached_tokens
