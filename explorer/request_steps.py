"""One request's manager-level steps, in the order vLLM's scheduler makes the calls.

vLLM's ``Scheduler.schedule()`` (vllm/v1/core/sched/scheduler.py, 0.31.0) decides which request
runs and how many tokens it gets; for each request it picks, it talks to the KV cache manager
in a fixed order. A manager-level scenario (design section 3), a trace replay, the prefill
engine and the router have no scheduler: their ops say who runs when, and this module makes
the manager calls for them in that order, so they all schedule the same way:

- admission of a waiting or preempted request: ``get_computed_blocks`` (skipped for a later
  chunk, with caching off, or with prompt logprobs), then ``allocate_slots``; only when that
  succeeds does the request become running and its lookup count in the stats, preempted
  re-admissions apart (record_prefix_cache_stats, scheduler.py:1252-1256);
- a running request computing its pending tokens (a decode or a later chunk): ``allocate_slots``
  for them alone, without a lookup;
- finish: ``free``; preemption: ``free``, ``num_computed_tokens = 0``, one more preemption;
- reset: ``reset_prefix_cache()``, optionally after preempting every running request from the
  end of the running queue (scheduler.py:2794-2804).

The mirrored `Scheduler` (explorer/core/sched/) makes these calls itself, inside its own
``schedule()``, as vLLM's does. `RequestSteps` keeps the running queue in the order requests
became running.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.core.kv_cache_manager import KVCacheBlocks, KVCacheManager
from explorer.core.request import Request, RequestStatus


@dataclass(frozen=True, slots=True)
class Admitted:
    """What one admission did: ``ok`` is False when allocate_slots found no room (then nothing
    changed); ``hit_tokens`` is the local hit the lookup found either way."""

    ok: bool
    hit_tokens: int
    new_blocks: KVCacheBlocks | None


class RequestSteps:
    def __init__(self, kv_cache_manager: KVCacheManager, num_lookahead_tokens: int = 0) -> None:
        self.kv_cache_manager = kv_cache_manager
        # Speculative decoding: the drafter's slots every allocation adds (never cached).
        self.num_lookahead_tokens = num_lookahead_tokens
        # Requests in the order they became running (a later chunk does not move one).
        self.running: list[Request] = []

    def lookup(self, request: Request) -> tuple[KVCacheBlocks | None, int]:
        """The local hit of a request that computes from token 0 (empty when it may not read
        the cache); none for a later chunk, which only continues. The request keeps the
        lookup's ``shared_prefix_boundary``, as the scheduler stores it (scheduler.py:930-937)."""
        if request.num_computed_tokens > 0:
            return None, 0
        blocks, hit, request.shared_prefix_boundary = self.kv_cache_manager.get_computed_blocks(request)
        return blocks, hit

    def allocate(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: KVCacheBlocks | None = None,
    ) -> KVCacheBlocks | None:
        """allocate_slots for an admission after ``lookup``; when it succeeds, a request that
        looked up (computes from token 0) records its stats: at admission only, so a lookup that
        found no room is not counted (record_prefix_cache_stats, scheduler.py:1252-1256)."""
        did_lookup = request.num_computed_tokens == 0
        mgr = self.kv_cache_manager
        new_blocks = mgr.allocate_slots(
            request,
            num_new_tokens,
            num_new_computed_tokens,
            new_computed_blocks,
            num_lookahead_tokens=self.num_lookahead_tokens,
        )
        if new_blocks is not None and did_lookup:
            mgr.record_prefix_cache_stats(request, num_new_computed_tokens)
        return new_blocks

    def admit(self, request: Request, max_new_tokens: int | None = None) -> Admitted:
        """Lookup (first chunk only) and allocate_slots for the rest of the prompt, or for at
        most ``max_new_tokens`` tokens after the hit (chunked prefill)."""
        hit_blocks, hit = self.lookup(request)
        remaining = request.num_tokens - request.num_computed_tokens - hit
        num_new = remaining if max_new_tokens is None else min(max_new_tokens, remaining)
        new_blocks = self.allocate(request, num_new, hit, hit_blocks)
        if new_blocks is None:
            return Admitted(False, hit, None)
        request.num_computed_tokens += hit + num_new
        self.set_running(request)
        return Admitted(True, hit, new_blocks)

    def fits(self, request: Request, num_tokens: int) -> bool:
        """Would admitting the request with slots for ``num_tokens`` tokens pass allocate_slots'
        capacity check now? (A caller that must reserve a whole footprint asks first.)"""
        mgr = self.kv_cache_manager
        hit_blocks, _ = self.lookup(request)
        hits = hit_blocks.blocks if hit_blocks is not None else mgr.coordinator.empty_blocks()
        required = mgr.coordinator.get_num_blocks_to_allocate(request.request_id, num_tokens, hits)
        return required <= mgr.block_pool.get_num_free_blocks()

    def compute_pending(self, request: Request, num_draft_tokens: int = 0) -> KVCacheBlocks | None:
        """allocate_slots for a running request's pending tokens (after sampling, a decode),
        and for ``num_draft_tokens`` drafts this step verifies; None, changing nothing, when
        there is no room. ``num_computed_tokens`` moves past the drafts, as the scheduler's
        ``_update_after_schedule`` moves it (a draft position is never hashed: rule 72)."""
        num_new = request.num_tokens - request.num_computed_tokens + num_draft_tokens
        new_blocks = self.kv_cache_manager.allocate_slots(
            request, num_new, num_lookahead_tokens=self.num_lookahead_tokens
        )
        if new_blocks is not None:
            request.num_computed_tokens = request.num_tokens + num_draft_tokens
        return new_blocks

    def roll_back_rejected(self, request: Request, num_draft_tokens: int, num_sampled: int) -> int:
        """The model answered a step that verified ``num_draft_tokens`` drafts with
        ``num_sampled`` tokens (the accepted drafts plus one bonus token): the rejected drafts
        leave ``num_computed_tokens`` (scheduler.py:2051-2069). Returns how many."""
        num_accepted = max(num_sampled - 1, 0)
        num_rejected = num_draft_tokens - num_accepted
        request.num_computed_tokens -= num_rejected
        observer = self.kv_cache_manager.observer
        if observer is not None:
            observer.on_drafts_verified(
                request.request_id, num_draft_tokens, num_accepted, False, request.num_computed_tokens
            )
        return num_rejected

    def finish(self, request: Request, status: RequestStatus = RequestStatus.FINISHED_STOPPED) -> None:
        """The request is done (or aborted): its blocks return in reverse order."""
        self.free(request)
        request.status = status

    def preempt(self, request: Request) -> None:
        """Free the blocks and start over: re-admission looks the prompt up again."""
        self.free(request)
        request.num_computed_tokens = 0
        request.spec_token_ids = []
        request.status = RequestStatus.PREEMPTED
        request.num_preemptions += 1

    def reset_prefix_cache(self, reset_running_requests: bool = False) -> tuple[bool, list[Request]]:
        """reset_prefix_cache(), after preempting every running request from the end of the
        running queue when asked; returns whether the reset happened and who was preempted,
        in order."""
        preempted: list[Request] = []
        if reset_running_requests:
            while self.running:
                request = self.running[-1]
                self.preempt(request)
                preempted.append(request)
        return self.kv_cache_manager.reset_prefix_cache(), preempted

    def set_running(self, request: Request) -> None:
        """The request runs: it joins the end of the running queue (a later chunk stays put)."""
        if request.status != RequestStatus.RUNNING:
            request.status = RequestStatus.RUNNING
            self.running.append(request)

    def free(self, request: Request) -> None:
        """``free``: the blocks return in reverse order; a running request leaves the queue."""
        self.kv_cache_manager.free(request)
        if request.status == RequestStatus.RUNNING:
            self.running.remove(request)
