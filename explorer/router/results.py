"""What a run reports: per instance (the engine's own stats, the subscriber's counters, the
router's view against the engine's cache), per policy, and for the whole fleet."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from explorer.router.config import BASELINE, POLICIES, POLICY_LABELS, FleetConfig
from explorer.router.hashing import HashSetup
from explorer.router.policy import PrefixRouter
from explorer.router.stream import RequestStream


@dataclass
class InstanceResult:
    name: str
    routed: int  # requests the router sent here
    stats: dict[str, int]  # the engine's own PrefixCacheStats totals
    prefill_full_ms: float  # estimate: every admitted prompt computed in full
    prefill_ms: float  # estimate: what was computed (the hits skipped)
    max_queue: int  # longest waiting queue seen (the scheduler's, FCFS)
    subscriber: dict[str, int]  # the subscriber's counters for this instance
    view_hashes: int  # distinct hashes in the router's view at the end
    engine_hashes: int  # distinct hashes the engine holds at the end
    phantom: int  # in the view, no longer in the engine (missed removals)
    missing: int  # in the engine, not in the view (missed stores)
    seed: str | None  # the engine's resolved NONE_HASH seed

    @property
    def hit_tokens(self) -> int:
        return self.stats["hits"]

    @property
    def queries(self) -> int:
        return self.stats["queries"]

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.queries if self.queries else 0.0

    @property
    def saved_ms(self) -> float:
        return self.prefill_full_ms - self.prefill_ms


@dataclass
class PolicyRun:
    policy: str
    instances: list[InstanceResult]
    instance_of: list[int]  # per stream request; -1 = skipped
    hit_tokens: list[int]  # per request: the engine's local hit at admission
    predicted_tokens: list[int]  # per request: the router's match on the chosen instance
    best_match_tokens: list[int]  # per request: the router's best match on any instance
    prompt_tokens: list[int]
    waited: list[bool]  # not admitted by the first engine step after it was routed
    cross_tenant_hit_tokens: int
    subscriber: dict[str, int]
    published_batches: int  # batches the instances published
    dropped_batches: int  # ... of which never reached the subscriber
    router_keys: int  # distinct router hashes over the stream
    router_keys_known: int  # ... of which any instance ever published (in the events' form)
    seconds: float
    final_views: list[dict[Any, int]] = field(default_factory=list, repr=False)
    # per request: the router's match against every instance's view pooled, at routing
    pooled_match_tokens: list[int] = field(default_factory=list, repr=False)

    @property
    def label(self) -> str:
        return POLICY_LABELS.get(self.policy, "prefix-aware, no failures" if self.policy == BASELINE else self.policy)

    @property
    def queries(self) -> int:
        return sum(i.queries for i in self.instances)

    @property
    def hits(self) -> int:
        return sum(i.hit_tokens for i in self.instances)

    @property
    def hit_rate(self) -> float:
        q = self.queries
        return self.hits / q if q else 0.0

    @property
    def saved_ms(self) -> float:
        return sum(i.saved_ms for i in self.instances)

    @property
    def prefill_ms(self) -> float:
        return sum(i.prefill_ms for i in self.instances)

    @property
    def predicted(self) -> int:
        return sum(self.predicted_tokens)

    @property
    def skipped(self) -> int:
        return sum(1 for i in self.instance_of if i < 0)

    @property
    def other_instance_tokens(self) -> int:
        """Missed tokens another instance held (design section 14's ``other_instance``): per
        routed request, how far the pooled match reached past the hit its engine gave."""
        # Past the hit and past what the chosen instance's own view held: a view that is ahead
        # of its engine (an eviction not yet published) is not another instance's doing.
        return sum(
            max(0, p - max(h, own))
            for i, p, h, own in zip(self.instance_of, self.pooled_match_tokens, self.hit_tokens, self.predicted_tokens)
            if i >= 0
        )

    @property
    def available_hit_rate(self) -> float:
        """The hit rate had every request been served by the fleet's caches pooled: the hits,
        plus what another instance held."""
        q = self.queries
        return (self.hits + self.other_instance_tokens) / q if q else 0.0

    def prediction_check(self) -> dict[str, int]:
        """For requests admitted at once: did the router's match equal the engine's hit?"""
        out = {"exact": 0, "over": 0, "under": 0, "queued": 0}
        for inst, p, h, w in zip(self.instance_of, self.predicted_tokens, self.hit_tokens, self.waited):
            if inst < 0:
                continue
            if w:
                out["queued"] += 1
            elif p == h:
                out["exact"] += 1
            elif p > h:
                out["over"] += 1
            else:
                out["under"] += 1
        return out

    def imbalance(self, what: str = "prefill_ms") -> float:
        """max / mean over instances (1.0 = perfectly even)."""
        vals = [getattr(i, what) if what != "routed" else i.routed for i in self.instances]
        mean = sum(vals) / len(vals) if vals else 0.0
        return max(vals) / mean if mean else 1.0

    def summary(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "hit_rate": self.hit_rate,
            "available_hit_rate": self.available_hit_rate,
            "other_instance_tokens": self.other_instance_tokens,
            "hit_tokens": self.hits,
            "prompt_tokens": self.queries,
            "saved_ms": self.saved_ms,
            "prefill_ms": self.prefill_ms,
            "router_match_tokens": self.predicted,
            "imbalance_prefill": self.imbalance("prefill_ms"),
            "imbalance_requests": self.imbalance("routed"),
            "skipped": self.skipped,
            "gaps": self.subscriber["gaps"],
            "lost": self.subscriber["lost"],
            "cross_tenant_hit_tokens": self.cross_tenant_hit_tokens,
        }


@dataclass
class FleetResult:
    config: FleetConfig
    stream: RequestStream
    setup: HashSetup
    runs: dict[str, PolicyRun]  # by policy, plus BASELINE when a failure switch is on
    seconds: float

    @property
    def policies(self) -> list[str]:
        return [p for p in POLICIES if p in self.runs]

    def router(self) -> PrefixRouter:
        s, c = self.setup, self.config
        return PrefixRouter(
            s.router_block_size,
            s.router_ctx(),
            s.router_form,
            c.router.load_weight,
            c.router.tie_break,
            c.workload.seed,
        )

    def summary(self) -> dict[str, Any]:
        return {p: r.summary() for p, r in self.runs.items()}
