"""One request's manager-level steps, in the order vLLM's scheduler makes the calls.

vLLM's ``Scheduler.schedule()`` (vllm/v1/core/sched/scheduler.py, 0.31.0) decides which request
runs and how many tokens it gets; for each request it picks, it talks to the KV cache manager
in a fixed order. This module is that order, and the only place outside the manager that makes
those calls, so scenario replay, trace replay, the prefill engine and the router all schedule
the same way:

- admission of a waiting or preempted request: ``get_computed_blocks`` (skipped for a later
  chunk, with caching off, or with prompt logprobs), then ``allocate_slots``; only when that
  succeeds does the request become running and its lookup count in the stats, preempted
  re-admissions apart (scheduler.py:1252-1256);
- a running request computing its pending tokens (a decode or a later chunk): ``allocate_slots``
  for them alone, without a lookup;
- finish: ``free``; preemption: ``free``, ``num_computed_tokens = 0``, one more preemption;
- reset: ``reset_prefix_cache()``, optionally after preempting every running request from the
  end of the running queue (scheduler.py:2794-2804).

Who runs when is the caller's choice: a scenario's ops, a trace's arrivals, a vLLM-like step
loop. `RequestSteps` keeps the running queue in the order requests became running.
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
    def __init__(self, kv_cache_manager: KVCacheManager) -> None:
        self.kv_cache_manager = kv_cache_manager
        # Requests in the order they became running (a later chunk does not move one).
        self.running: list[Request] = []

    def lookup(self, request: Request) -> tuple[KVCacheBlocks | None, int]:
        """The local hit of a request that computes from token 0 (empty when it may not read
        the cache); none for a later chunk, which only continues."""
        if request.num_computed_tokens > 0:
            return None, 0
        return self.kv_cache_manager.get_computed_blocks(request)

    def admit(self, request: Request, max_new_tokens: int | None = None) -> Admitted:
        """Lookup (first chunk only) and allocate_slots for the rest of the prompt, or for at
        most ``max_new_tokens`` tokens after the hit (chunked prefill)."""
        fresh = request.num_computed_tokens == 0
        hit_blocks, hit = self.lookup(request)
        remaining = request.num_tokens - request.num_computed_tokens - hit
        num_new = remaining if max_new_tokens is None else min(max_new_tokens, remaining)
        new_blocks = self.kv_cache_manager.allocate_slots(request, num_new, hit, hit_blocks)
        if new_blocks is None:
            return Admitted(False, hit, None)
        request.num_computed_tokens += hit + num_new
        self._set_running(request)
        if fresh:
            self.kv_cache_manager.record_prefix_cache_stats(request, hit)
        return Admitted(True, hit, new_blocks)

    def fits(self, request: Request, num_tokens: int) -> bool:
        """Would admitting the request with slots for ``num_tokens`` tokens pass allocate_slots'
        capacity check now? (A caller that must reserve a whole footprint asks first.)"""
        mgr = self.kv_cache_manager
        hit_blocks, _ = self.lookup(request)
        hits = hit_blocks.blocks if hit_blocks is not None else mgr.coordinator.empty_blocks()
        required = mgr.coordinator.get_num_blocks_to_allocate(request.request_id, num_tokens, hits)
        return required <= mgr.block_pool.get_num_free_blocks()

    def compute_pending(self, request: Request) -> KVCacheBlocks | None:
        """allocate_slots for a running request's pending tokens (after sampling, a decode);
        None, changing nothing, when there is no room."""
        pending = request.num_tokens - request.num_computed_tokens
        new_blocks = self.kv_cache_manager.allocate_slots(request, pending)
        if new_blocks is not None:
            request.num_computed_tokens = request.num_tokens
        return new_blocks

    def finish(self, request: Request) -> None:
        """The request is done (or aborted): its blocks return in reverse order."""
        self._free(request)
        request.status = RequestStatus.FINISHED

    def preempt(self, request: Request) -> None:
        """Free the blocks and start over: re-admission looks the prompt up again."""
        self._free(request)
        request.num_computed_tokens = 0
        request.status = RequestStatus.PREEMPTED
        request.num_preemptions += 1

    def reset_prefix_cache(self, reset_running_requests: bool = False) -> tuple[bool, list[Request]]:
        """reset_prefix_cache(), after preempting every running request from the end of the
        running queue when asked; returns whether the reset happened and who was preempted."""
        preempted: list[Request] = []
        if reset_running_requests:
            while self.running:
                request = self.running[-1]
                self.preempt(request)
                preempted.append(request)
        return self.kv_cache_manager.reset_prefix_cache(), preempted

    def _set_running(self, request: Request) -> None:
        if request.status != RequestStatus.RUNNING:
            request.status = RequestStatus.RUNNING
            self.running.append(request)

    def _free(self, request: Request) -> None:
        self.kv_cache_manager.free(request)
        if request.status == RequestStatus.RUNNING:
            self.running.remove(request)
