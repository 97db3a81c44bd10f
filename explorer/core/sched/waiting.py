"""The scheduler's waiting pass (Scheduler.schedule, vllm/v1/core/sched/scheduler.py:872-1344, 0.31.0).

Moved out of scheduler.py with the KV connector: `WaitingPass._schedule_waiting` admits
waiting requests in FCFS order while the budget and ``max_num_seqs`` allow, block holders
(``kv_holding_waiting``: loads in flight or done) first. For a request computing from token 0
it takes the local hit, then asks the connector for the tokens after it (block aligned): None
skips the request this step with nothing recorded; an async load allocates the hit and the
external blocks without caching them and leaves the request ``WAITING_FOR_REMOTE_KVS``; a
sync load counts the external tokens as computed at once (spec part 2, rules 52-57). The
first request that does not fit ends the pass (`break`: FCFS is kept).
"""

from __future__ import annotations

from collections import deque

from explorer.core.errors import SchedulingError
from explorer.core.kv_cache_manager import KVCacheBlocks
from explorer.core.request import Request, RequestStatus
from explorer.core.sched.connector_path import ConnectorPath, holds_kv_blocks
from explorer.core.sched.output import KV_FETCH_IN_PROGRESS, KV_FETCH_WAITING_TO_START
from explorer.core.sched.spec_decode import SpecDecodeMixin


class WaitingPass(ConnectorPath, SpecDecodeMixin):
    running: list[Request]
    waiting: deque[Request]
    max_num_running_reqs: int
    deferred_waiting: set[str]

    def _schedule_waiting(
        self,
        token_budget: int,
        threshold: int,
        num_scheduled_tokens: dict[str, int],
        scheduled_new_reqs: list[Request],
        scheduled_resumed_reqs: list[Request],
        external: dict[str, int],
    ) -> None:
        skipped_kv_holding: deque[Request] = deque()
        skipped_waiting: deque[Request] = deque()

        def skip_request(queue: deque[Request]) -> None:
            r = queue.popleft()
            self.deferred_waiting.add(r.request_id)  # until it is scheduled (L879, 1291)
            (skipped_kv_holding if holds_kv_blocks(r) else skipped_waiting).appendleft(r)

        connector = self.connector
        while (room := self._input_room(token_budget, num_scheduled_tokens)) > 0:
            queue = self.kv_holding_waiting or self.waiting
            if not queue or len(self.running) >= self.max_num_running_reqs:
                break
            request = queue[0]
            rid = request.request_id
            if not self._handle_blocked_waiting_request(request):
                skip_request(queue)
                continue
            # Async: a preempted request whose output is still in flight waits for it, since
            # resuming now could sample a position that output later delivers (L905-910).
            if request.num_stale_output_tokens and not request.drop_stale_output:
                skip_request(queue)
                continue

            num_external = 0
            load_kv_async = False
            queries = hits = 0
            new_computed_blocks: KVCacheBlocks | None = None
            num_local = 0
            if request.num_computed_tokens == 0:
                # The local hit (L929-941; a preempted request looks its outputs up too), then
                # the connector with the block-aligned hit (L939-1009).
                new_computed_blocks, num_local, request.shared_prefix_boundary = (
                    self.kv_cache_manager.get_computed_blocks(request)
                )
                if connector is not None:
                    aligned = num_local - num_local % self.block_size
                    ext, load_kv_async = connector.get_num_new_matched_tokens(request, aligned)
                    if request.skip_reading_prefix_cache:
                        ext, load_kv_async = 0, False
                    if self.observer is not None:
                        self.observer.on_external_lookup(rid, num_local, ext, load_kv_async)
                    if ext is None:
                        skip_request(queue)  # the connector cannot tell yet: nothing recorded
                        continue
                    num_external = ext
                    queries, hits = request.num_tokens - num_local, num_external
                num_computed_tokens = num_local + num_external
                assert num_computed_tokens <= request.num_tokens
                # The first scheduled prefill's stats, not a resumed one's (L1033-1039).
                if request.prefill_stats is not None and request.num_preemptions <= 0:
                    request.prefill_stats.set(request.num_prompt_tokens, num_local, num_external)
                self._set_kv_fetch_stage(request, KV_FETCH_WAITING_TO_START if load_kv_async else None)
            else:
                num_computed_tokens = request.num_computed_tokens  # loaded: no lookup, no stats

            padded_cut = False
            if load_kv_async:
                assert num_external > 0
                num_new_tokens = 0
            else:
                # `num_tokens`, not the prompt: a resumed request recomputes its outputs.
                # Speculative decoding pads an admission with one token left (spec_decode.py).
                padded = self._pad_spec_decode(num_computed_tokens, request.num_tokens - num_computed_tokens, room)
                if padded is None:
                    break  # the padded admission does not fit: none unpadded instead (L1104-1106)
                # A padded admission the threshold cuts trips vLLM's assert once it is allocated.
                padded_cut = 0 < threshold < padded and padded > request.num_tokens - num_computed_tokens
                num_new_tokens = padded
                if 0 < threshold < num_new_tokens:
                    num_new_tokens = threshold
                num_new_tokens = min(num_new_tokens, room)
                assert num_new_tokens > 0, "a sync KV load must leave a token to compute (L1124)"
                num_new_tokens = self._reserve_prefill_lookahead(request, num_computed_tokens, num_new_tokens)
                if num_new_tokens == 0:
                    break

            # The whole sequence must fit (scheduler_reserve_full_isl); an async load also leaves
            # the in-flight prefills their blocks and, with drafts, one decode step's (L1195-1222);
            # stats only at admission.
            reserved = (
                self._inflight_prefill_reserved_blocks() + self._spec_decode_step_blocks() if load_kv_async else 0
            )
            did_lookup = request.num_computed_tokens == 0
            new_blocks = self.kv_cache_manager.allocate_slots(
                request,
                num_new_tokens,
                num_local,
                new_computed_blocks,
                # no drafter slots while an async KV load runs (L1177-1180)
                num_lookahead_tokens=0 if load_kv_async else self.num_lookahead_tokens,
                num_external_computed_tokens=num_external,
                delay_cache_blocks=load_kv_async,
                full_sequence_must_fit=True,
                reserved_blocks=reserved,
            )
            if self.observer is not None:
                self.observer.on_admission_allocated(rid, None if new_blocks is None else new_blocks.get_block_ids())
            if new_blocks is None:
                break
            if padded_cut:
                # `assert num_new_tokens == 1 + self.num_spec_tokens` (L1317-1318).
                raise SchedulingError(
                    f"long_prefill_token_threshold = {threshold} cut the padded admission of {rid!r} to "
                    f"{num_new_tokens} of {1 + self.num_spec_tokens} tokens: vLLM's scheduler asserts there"
                )
            if connector is not None:
                connector.update_state_after_alloc(request, self.kv_cache_manager.get_blocks(rid), num_external)
                external[rid] = num_external
                if self.connector_prefix_cache_stats is not None and queries != 0:
                    preempted = request.num_preemptions > 0
                    # 0.33.0 splits the hits by tier once the load plan exists (L1489-1505 there).
                    by_source = (
                        connector.get_external_cache_hit_sources(request, hits)
                        if self.cached_by_source_metrics and hits and not preempted
                        else None
                    )
                    self.connector_prefix_cache_stats.record(queries, hits, preempted, by_source)
            if did_lookup:  # at admission, so a lookup that found no room is not counted (L1252-1256)
                self.kv_cache_manager.record_prefix_cache_stats(request, num_local)

            if load_kv_async:
                # The blocks are held while the load runs; the request stays waiting (L1258-1287).
                request.status = RequestStatus.WAITING_FOR_REMOTE_KVS
                request.num_computed_tokens = num_computed_tokens
                self._inflight_prefills[request] = None
                self._set_kv_fetch_stage(request, KV_FETCH_IN_PROGRESS)
                skip_request(queue)
                continue

            queue.popleft()
            self.deferred_waiting.discard(rid)
            if request.status == RequestStatus.WAITING:
                scheduled_new_reqs.append(request)
            else:
                assert request.status == RequestStatus.PREEMPTED, request.status
                scheduled_resumed_reqs.append(request)
            num_scheduled_tokens[rid] = num_new_tokens
            token_budget -= num_new_tokens
            self.running.append(request)
            request.status = RequestStatus.RUNNING
            request.num_computed_tokens = num_computed_tokens
            self._set_kv_fetch_stage(request, None)
            self._note_padding(request, num_new_tokens, num_computed_tokens)
            if num_computed_tokens + num_new_tokens < request.num_tokens:
                self._inflight_prefills[request] = None
        # Skipped requests go back to the front of their queues, in their order (L1341-1344).
        self.kv_holding_waiting.extendleft(skipped_kv_holding)
        self.waiting.extendleft(skipped_waiting)
