"""The scheduler's KV connector path (vllm/v1/core/sched/scheduler.py, 0.31.0; spec part 2, rules 51-60).

`ConnectorPath` is the part of `Scheduler` that exists for a KV connector:
- set-up (L149-183): the external stats, the load failure policy, and with ``kv_both`` under
  async scheduling deferred block frees (a freed request's blocks return to the pool only
  once every step that wrote them was processed, L1512, L1986-1990, L2694-2736);
- a waiting request whose async load is in flight stays ``WAITING_FOR_REMOTE_KVS`` in the
  queue of block holders until the worker reports ``finished_recving``; the next
  ``schedule()`` caches the loaded blocks (their ``BlockStored`` only now) and, for a full
  external hit, leaves the last token to compute (L3052-3131);
- a failed load (``invalid_block_ids``) truncates the requests that hold those blocks at the
  first invalid one; under ``fail`` it evicts the hashes of a sync load's blocks from there on
  and fails the requests, under ``recompute`` they compute again (L3160-3359);
- ``reset_connector_cache`` (L2829-2849) and the async load's reservation for in-flight
  prefills (L1195-1204, L3016-3030).
What the waiting pass asks the connector is in waiting.py.
"""

from __future__ import annotations

from collections import deque

from explorer.core.errors import SchedulingError
from explorer.core.kv_cache_manager import KVCacheManager
from explorer.core.kv_cache_observer import KVCacheObserver
from explorer.core.kv_cache_utils import KVCacheBlock
from explorer.core.metrics import PrefixCacheStats
from explorer.core.release import VLLM_0_31, VllmRelease
from explorer.core.request import Request, RequestStatus
from explorer.core.sched.kv_connector.base import KVConnectorBase
from explorer.core.sched.output import KV_FETCH_COMPLETED_WAITING, KV_FETCH_STAGES, KVConnectorOutput


def holds_kv_blocks(request: Request) -> bool:
    """A waiting request that holds blocks: a load in flight, or loaded (L2385-2396)."""
    return request.num_computed_tokens > 0 or request.status == RequestStatus.WAITING_FOR_REMOTE_KVS


class ConnectorPath:
    kv_cache_manager: KVCacheManager
    observer: KVCacheObserver | None
    requests: dict[str, Request]
    running: list[Request]
    block_size: int
    num_spec_tokens: int  # spec_decode.py
    num_lookahead_tokens: int

    def _init_connector(
        self, connector: KVConnectorBase | None, max_concurrent_batches: int, release: VllmRelease = VLLM_0_31
    ) -> None:
        self.connector = connector
        # The release's switch: how an async load's reservation counts a decode step's slots.
        self.spec_step_within_sequence = release.spec_step_within_sequence
        # The release's switch: 0.33.0's stats split connector hits by source and count the
        # requests with an async load by stage (_kv_fetch_stages, scheduler.py:495-500 in
        # 0.33.0); the stages are None when not tracked (0.31.0, no connector, or no stats).
        self.cached_by_source_metrics = cached_by_source_metrics = release.cached_by_source_metrics
        self._kv_fetch_stages: dict[Request, str] | None = (
            {} if cached_by_source_metrics and connector is not None and self.kv_cache_manager.log_stats else None
        )
        self._kv_fetch_counts: dict[str, int] = dict.fromkeys(KV_FETCH_STAGES, 0)
        self.connector_prefix_cache_stats: PrefixCacheStats | None = None
        self.recompute_kv_load_failures = True
        self.defer_block_free = False
        self.requires_kv_delivery = False
        if connector is not None:
            if self.kv_cache_manager.log_stats:
                self.connector_prefix_cache_stats = PrefixCacheStats()
            cfg = connector.config
            self.recompute_kv_load_failures = cfg.kv_load_failure_policy == "recompute"
            self.defer_block_free = max_concurrent_batches > 1 and cfg.is_kv_consumer
            self.requires_kv_delivery = connector.requires_kv_delivery
            connector.bind_kv_cache_manager(self.kv_cache_manager)
        # Waiting requests that hold blocks; drained before `waiting` (L212-216).
        self.kv_holding_waiting: deque[Request] = deque()
        self.finished_recving_kv_req_ids: set[str] = set()
        self.failed_recving_kv_req_ids: set[str] = set()
        # Requests still prefilling (chunks, async loads): an ordered set (L412).
        self._inflight_prefills: dict[Request, None] = {}
        self.sched_step_seq = 0
        self.processed_step_seq = 0
        self.deferred_frees: deque[tuple[int, list[KVCacheBlock]]] = deque()

    def _set_kv_fetch_stage(self, request: Request, stage: str | None) -> None:
        """Move ``request`` to ``stage`` (None: no load pending) in the tracked counts."""
        stages = self._kv_fetch_stages
        if stages is None:
            return
        prev = stages.pop(request, None)
        if prev is not None:
            self._kv_fetch_counts[prev] -= 1
        if stage is not None:
            stages[request] = stage
            self._kv_fetch_counts[stage] += 1

    def _kv_fetch_stats(self) -> dict[str, int]:
        """The requests at each load stage for the step's stats ({} when not tracked)."""
        return self._kv_fetch_counts.copy() if self._kv_fetch_stages is not None else {}

    # ---- freeing blocks, perhaps later ------------------------------------------------------

    def _refuse_tracked_id(self, request_id: str) -> None:
        """A new request with the id of one the connector still tracks: vLLM would hand it the
        earlier request's state and fail on it (a KeyError when the earlier stores land)."""
        if self.connector is not None and self.connector.still_tracks(request_id):
            raise SchedulingError(
                f"request {request_id!r}: the KV connector still tracks the earlier request with this id "
                "(its last stores are in flight); step until they complete before reusing the id"
            )

    def _request_blocks_can_be_freed(self, request: Request) -> bool:
        return not self.defer_block_free or request.last_sched_seq <= self.processed_step_seq

    def _free_request_blocks(self, request: Request) -> None:
        """Free now, or, while a step in flight may still write them, hand the blocks to the
        deferred list fenced by the last step scheduled (L2701-2710)."""
        if self._request_blocks_can_be_freed(request):
            self.kv_cache_manager.free(request)
            return
        blocks = self.kv_cache_manager.pop_blocks_for_free(request)
        if blocks:
            self.deferred_frees.append((self.sched_step_seq, blocks))

    def _drain_deferred_frees(self) -> None:
        """Free, tail first, the deferred blocks whose fence step was processed (L2723-2736)."""
        while self.deferred_frees and self.deferred_frees[0][0] <= self.processed_step_seq:
            _, blocks = self.deferred_frees.popleft()
            self.kv_cache_manager.block_pool.free_blocks(reversed(blocks))

    def _connector_finished(self, request: Request) -> bool:
        """Tell the connector; True if it still reads the blocks (L2948-3000). The blocks
        already below a window are freed first, on the processed-token basis, so the
        connector is handed only what attention still reads: with a window group this is
        what orders the finished request's blocks in the free queue (skipped ones first)."""
        if self.connector is None:
            return False
        processed = max(0, request.num_computed_tokens - request.num_in_flight_tokens)
        self.kv_cache_manager.remove_skipped_blocks(request.request_id, processed)
        return self.connector.request_finished(request, self.kv_cache_manager.get_block_ids(request.request_id))

    # ---- async loads -------------------------------------------------------------------------

    def _inflight_prefill_reserved_blocks(self) -> int:
        """Blocks the in-flight prefills still need to hold their whole sequence and, with
        drafts, one decode step (L3003-3030; 0.33.0 counts the step's slots inside the
        sequence, spec_step_within_sequence)."""
        coordinator = self.kv_cache_manager.coordinator
        within = self.spec_step_within_sequence
        step = 1 + self.num_spec_tokens + self.num_lookahead_tokens if self.num_spec_tokens else 0
        total = 0
        for req in self._inflight_prefills:
            full = min(req.num_tokens, self.kv_cache_manager.max_model_len)
            # With the per-request admission cap a window group's reservation is clamped to,
            # as at admission (apply_admission_cap=True, L3013).
            total += coordinator.get_num_blocks_to_allocate(
                req.request_id,
                full + step if within else full,
                coordinator.empty_blocks(),
                req.num_computed_tokens,
                apply_admission_cap=True,
            )
            if not within:
                total += self._spec_decode_step_blocks()
        return total

    def _spec_decode_step_blocks(self) -> int:
        """With drafts, the blocks of one decode step's extra slots, which an async load also
        keeps free (L3019-3030): at the scheduler's block size, or under 0.33.0 summed over the
        groups at each one's (spec_step_within_sequence); 0 without speculative decoding."""
        if not self.num_spec_tokens:
            return 0
        step = 1 + self.num_spec_tokens + self.num_lookahead_tokens
        if self.spec_step_within_sequence:
            return sum(-(-step // m.block_size) for m in self.kv_cache_manager.coordinator.single_type_managers)
        return -(-step // self.block_size)

    def _handle_blocked_waiting_request(self, request: Request) -> bool:
        """False: the load is still in flight, skip it this step; else promote it (L3099-3131)."""
        if request.status != RequestStatus.WAITING_FOR_REMOTE_KVS:
            return True
        if request.request_id not in self.finished_recving_kv_req_ids:
            return False
        self._update_waiting_for_remote_kv(request)
        request.status = RequestStatus.PREEMPTED if request.num_preemptions else RequestStatus.WAITING
        return True

    def _update_waiting_for_remote_kv(self, request: Request) -> None:
        """The load is done: cache the loaded blocks (only the valid prefix after a failure
        under recompute, or free them all when none is valid); a full hit recomputes its last
        token (L3052-3097)."""
        rid = request.request_id
        failed = rid in self.failed_recving_kv_req_ids
        if failed:
            if request.num_computed_tokens:
                self.kv_cache_manager.cache_blocks(request, request.num_computed_tokens)
            else:
                self.kv_cache_manager.free(request)
            self.failed_recving_kv_req_ids.remove(rid)
        else:
            self.kv_cache_manager.cache_blocks(request, request.num_computed_tokens)
        if request.num_computed_tokens == request.num_tokens:
            request.num_computed_tokens = request.num_tokens - 1
        self.finished_recving_kv_req_ids.remove(rid)
        if self.observer is not None:
            self.observer.on_kv_load_done(rid, request.num_computed_tokens, failed)

    def _update_from_kv_xfer_finished(self, output: KVConnectorOutput) -> None:
        """Loads done: mark them; a request finished meanwhile frees its blocks now (L3133-3158)."""
        if self.connector is not None:
            self.connector.update_connector_output(output)
        to_free = []
        for rid in output.finished_recving:
            req = self.requests[rid]
            if req.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                self.finished_recving_kv_req_ids.add(rid)
                self._set_kv_fetch_stage(req, KV_FETCH_COMPLETED_WAITING)
            else:
                assert req.is_finished()
                to_free.append(req)
        for rid in output.finished_sending:
            to_free.append(self.requests[rid])
        if len(to_free) > 1:
            raise SchedulingError(
                f"{len(to_free)} finished loads free their blocks in one step, in an order vLLM takes "
                "from a set: not replayable"
            )
        for req in to_free:
            self._free_blocks(req)

    def _free_blocks(self, request: Request) -> None:
        assert request.is_finished()
        self._free_request_blocks(request)
        del self.requests[request.request_id]

    # ---- failed loads ------------------------------------------------------------------------

    def _update_requests_with_invalid_blocks(
        self, requests: list[Request], invalid_block_ids: set[int], num_scheduled_tokens: dict[str, int], evict: bool
    ) -> tuple[list[str], int, set[int]]:
        """Truncate each request at its first invalid block that may hold external tokens; an
        invalid block an earlier request already recomputes is not counted again (L3160-3262)."""
        affected: list[str] = []
        total_affected_tokens = 0
        blocks_to_evict: set[int] = set()
        marked: set[int] = set()
        bs = self.block_size
        for request in requests:
            is_affected = marked_block = False
            rid = request.request_id
            (req_block_ids,) = self.kv_cache_manager.get_block_ids(rid)
            req_num_computed = request.num_computed_tokens - num_scheduled_tokens.get(rid, 0)
            for idx, block_id in zip(range(-(-req_num_computed // bs)), req_block_ids, strict=False):
                if block_id not in invalid_block_ids:
                    continue
                is_affected = True
                if block_id in marked:
                    continue
                marked.add(block_id)
                if marked_block:
                    continue
                marked_block = True
                request.num_computed_tokens = idx * bs
                total_affected_tokens += req_num_computed - request.num_computed_tokens
                if evict:
                    blocks_to_evict.update(req_block_ids[idx:])
            if is_affected:
                if not marked_block:
                    total_affected_tokens += request.num_computed_tokens - req_num_computed
                    request.num_computed_tokens = req_num_computed
                affected.append(rid)
        return affected, total_affected_tokens, blocks_to_evict

    def _handle_invalid_blocks(self, invalid_block_ids: set[int], num_scheduled_tokens: dict[str, int]) -> list[str]:
        """Requests hit by a failed load, to skip in this update (L3279-3359). Under ``fail``
        every one of them (they are then finished with an error); under ``recompute`` the
        running ones, while the loading ones retry at promotion."""
        if self.kv_cache_manager.coordinator.num_groups > 1:
            raise SchedulingError("invalid_block_ids with more than one KV cache group (vLLM raises)")
        loading = [r for r in self.kv_holding_waiting if r.status == RequestStatus.WAITING_FOR_REMOTE_KVS]
        async_ids, _, _ = self._update_requests_with_invalid_blocks(
            loading, invalid_block_ids, num_scheduled_tokens, False
        )
        sync_ids, _, to_evict = self._update_requests_with_invalid_blocks(
            self.running, invalid_block_ids, num_scheduled_tokens, True
        )
        if not async_ids and not sync_ids:
            return []
        if to_evict and not self.recompute_kv_load_failures:
            evicted = [b for b in to_evict if self.kv_cache_manager.block_pool.blocks[b].block_hash is not None]
            self.kv_cache_manager.evict_blocks(to_evict)
        else:
            evicted = []
        if self.observer is not None:
            for rid in async_ids + sync_ids:
                self.observer.on_kv_load_failed(rid, self.requests[rid].num_computed_tokens, tuple(evicted))
        if not self.recompute_kv_load_failures:
            return async_ids + sync_ids
        self.failed_recving_kv_req_ids.update(async_ids)
        return sync_ids

    # ---- reset -------------------------------------------------------------------------------

    def reset_connector_cache(self) -> bool:
        """The connector forgets what it holds; the external stats window resets (L2829-2849)."""
        if self.connector is None:
            return True
        if self.connector.reset_cache() is False:
            return False
        if self.connector_prefix_cache_stats is not None:
            self.connector_prefix_cache_stats.reset = True
        return True
