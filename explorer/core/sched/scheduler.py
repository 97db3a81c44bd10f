"""vLLM's Scheduler, for what prefix caching touches (vllm/v1/core/sched/scheduler.py, 0.31.0).

One engine step is ``schedule()``, the model runs the batch, then ``update_from_output()``:

- ``schedule()`` spends a token budget (``max_num_batched_tokens``) first on the running queue,
  in order (decodes and later prefill chunks), then on the waiting queue, first come first
  served: lookup, ``allocate_slots`` (the whole sequence must fit), stats at admission. A
  prompt longer than the budget is chunked. ``long_prefill_token_threshold`` caps one request's
  share, but only when more than one request is eligible. When a running request finds no room,
  the last running request is preempted (it may be the request itself), and a step that
  preempted admits no waiting request.
- ``update_from_output()`` appends each sampled token (the block hasher hashes newly full
  blocks), stops a request at ``max_tokens`` and frees it, publishes the step's KV events as
  one batch and reports the step's prefix-cache stats.

The waiting pass is in waiting.py, the KV connector's path (async loads, failed loads,
deferred frees, the connector reset) in connector_path.py, the connectors in kv_connector/,
drafts (speculative decoding) in spec_decode.py. Left out, as none of it changes a
prefix-cache decision without its feature: encoder inputs, structured output, LoRA slots,
priorities, pipeline/data parallelism, streaming input, Mamba alignment, the watermark (0).
Manager calls go through `RequestSteps` where they are the same as the scenario ops'.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from explorer.core.errors import SchedulingError
from explorer.core.events import KVEventBatch
from explorer.core.kv_cache_manager import KVCacheManager
from explorer.core.metrics import PrefixCacheStats
from explorer.core.request import EngineCoreEventType, Request, RequestStatus
from explorer.core.sched.config import SchedulerConfig
from explorer.core.sched.connector_path import holds_kv_blocks
from explorer.core.sched.finishing import FinishAndReset
from explorer.core.sched.kv_connector.base import KVConnectorBase
from explorer.core.sched.output import (
    EngineCoreOutput,
    EngineCoreOutputs,
    KVEventCollector,
    KVEventPublisher,
    ModelRunnerOutput,
    OffloadingConnectorStats,
    SchedulerOutput,
    SchedulerStats,
    SpecDecodingStats,
)
from explorer.core.sched.utils import cache_on_token_arrival, check_stop
from explorer.core.sched.waiting import WaitingPass


class Scheduler(WaitingPass, FinishAndReset):
    def __init__(
        self,
        kv_cache_manager: KVCacheManager,
        config: SchedulerConfig,
        kv_event_publisher: KVEventPublisher | None = None,
        clock: Callable[[], float] = time.time,
        connector: KVConnectorBase | None = None,
    ) -> None:
        config.check(kv_cache_manager.max_model_len)
        self.config = config
        self.kv_cache_manager = kv_cache_manager
        self.observer = kv_cache_manager.observer
        self.max_num_running_reqs = config.max_num_seqs
        self.max_num_scheduled_tokens = config.max_num_batched_tokens
        self.max_model_len = kv_cache_manager.max_model_len
        self.block_size = kv_cache_manager.block_size
        self.kv_event_publisher: KVEventPublisher = kv_event_publisher or KVEventCollector()
        self.clock = clock
        self._init_spec_decode(config.speculative_config)
        # req_id -> Request, every request not finished, in arrival order.
        self.requests: dict[str, Request] = {}
        # FCFS: arrivals at the back, preempted requests at the front (FCFSRequestQueue, request_queue.py:75-116).
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # in the order they became running; preemption pops the last
        # Finished / preempted since the last schedule() (vLLM keeps sets; order kept here).
        self.finished_req_ids: list[str] = []
        self.reset_preempted_req_ids: list[str] = []
        # Waiting requests a schedule() skipped and none has scheduled since (vLLM: a set).
        self.deferred_waiting: set[str] = set()
        # The KV connector (None: none), and the max_concurrent_batches it sees.
        self._init_connector(connector, 2 if config.async_scheduling else 1, config.release)

    # ---- the queues --------------------------------------------------------------------------

    def add_request(self, request: Request) -> None:
        if request.max_tokens is None or request.max_tokens < 1:
            raise SchedulingError(f"request {request.request_id!r} needs max_tokens >= 1")
        if request.request_id in self.requests:
            raise SchedulingError(f"request {request.request_id!r} is already held by the scheduler")
        self._refuse_tracked_id(request.request_id)
        (self.kv_holding_waiting if holds_kv_blocks(request) else self.waiting).append(request)
        self.requests[request.request_id] = request
        if self.connector is not None:
            self.connector.on_new_request(request)

    def get_request_counts(self) -> tuple[int, int]:
        return len(self.running), len(self.waiting) + len(self.kv_holding_waiting)

    def get_num_unfinished_requests(self) -> int:
        return sum(self.get_request_counts())

    def has_requests(self) -> bool:
        """Unfinished requests, or finished ones the next schedule() must still tell the worker
        about: a finished request keeps the engine stepping once more, and with a connector so
        does one whose blocks wait for its load (scheduler.py:2747-2772)."""
        if self.get_num_unfinished_requests() > 0 or self.finished_req_ids:
            return True
        if self.connector is None:
            return False
        return len(self.requests) > self.get_num_unfinished_requests() or self.connector.has_pending_push_work()

    # ---- schedule ----------------------------------------------------------------------------

    def schedule(self) -> SchedulerOutput:
        scheduled_new_reqs: list[Request] = []
        scheduled_resumed_reqs: list[Request] = []
        scheduled_running_reqs: list[Request] = []
        preempted_reqs: list[Request] = []
        num_scheduled_tokens: dict[str, int] = {}
        new_block_ids: dict[str, tuple[list[int], ...]] = {}
        token_budget = self.max_num_scheduled_tokens  # vLLM's input budget is the same here

        # The threshold stops a long prefill from starving others; with one eligible request
        # there is nobody to starve (scheduler.py:612-622).
        num_running, num_waiting = self.get_request_counts()
        threshold = self.config.long_prefill_token_threshold if num_running + num_waiting > 1 else 0

        # First, the RUNNING requests (scheduler.py:628-869).
        req_index = 0
        while req_index < len(self.running) and (room := self._input_room(token_budget, num_scheduled_tokens)) > 0:
            request = self.running[req_index]
            assert request.max_tokens is not None
            # Async: the step in flight surely reached max_tokens; no extra step (L645-655).
            if (
                request.num_output_placeholders > 0
                and request.num_computed_tokens + 2 - request.num_output_placeholders
                >= request.num_prompt_tokens + request.max_tokens
            ):
                req_index += 1
                continue
            num_new_tokens = (
                request.num_tokens_with_spec + request.num_output_placeholders - request.num_computed_tokens
            )
            if 0 < threshold < num_new_tokens:
                num_new_tokens = threshold
            num_new_tokens = min(num_new_tokens, room)
            num_new_tokens = min(num_new_tokens, self.max_model_len - request.num_computed_tokens - 1)  # L685-691
            num_new_tokens = self._reserve_prefill_lookahead(request, request.num_computed_tokens, num_new_tokens)
            if num_new_tokens == 0:
                # `continue`, not `break`: a later request may still fit (L738-741).
                req_index += 1
                continue

            while True:
                new_blocks = self.kv_cache_manager.allocate_slots(
                    request, num_new_tokens, num_lookahead_tokens=self.num_lookahead_tokens
                )
                if new_blocks is not None:
                    break
                if self.connector is not None and self.connector.has_pending_block_frees():
                    break
                # No room: preempt the lowest-priority request, under FCFS the last running
                # one, until the allocation succeeds or the request preempted itself; not one
                # whose free would be deferred (L748-817).
                if not self._request_blocks_can_be_freed(self.running[-1]):
                    break
                preempted_req = self.running.pop()
                self._preempt_request(
                    preempted_req,
                    f"allocate_slots for {request.request_id} ({num_new_tokens} tokens) found no room",
                    self.requires_kv_delivery,
                )
                preempted_reqs.append(preempted_req)
                if preempted_req is request:
                    break
            if new_blocks is None:
                break

            scheduled_running_reqs.append(request)
            if self.connector is not None:
                new_block_ids[request.request_id] = new_blocks.get_block_ids()
            num_scheduled_tokens[request.request_id] = num_new_tokens
            token_budget -= num_new_tokens
            req_index += 1
            self._schedule_spec_tokens(request, num_new_tokens)

        # Next, the WAITING requests, but not in a step that preempted (L872-1344).
        external: dict[str, int] = {}
        if not preempted_reqs:
            self._schedule_waiting(
                token_budget, threshold, num_scheduled_tokens, scheduled_new_reqs, scheduled_resumed_reqs, external
            )
            if self.connector is not None:  # what the connector sees of the step's blocks
                for r in (*scheduled_new_reqs, *scheduled_resumed_reqs):
                    new_block_ids[r.request_id] = self.kv_cache_manager.get_block_ids(r.request_id)

        total_num_scheduled_tokens = sum(num_scheduled_tokens.values())
        assert total_num_scheduled_tokens <= self.max_num_scheduled_tokens
        assert len(self.running) <= self.max_num_running_reqs
        scheduler_output = SchedulerOutput(
            scheduled_new_reqs=[r.request_id for r in scheduled_new_reqs],
            scheduled_resumed_reqs=[r.request_id for r in scheduled_resumed_reqs],
            scheduled_running_reqs=[r.request_id for r in scheduled_running_reqs],
            num_scheduled_tokens=num_scheduled_tokens,
            total_num_scheduled_tokens=total_num_scheduled_tokens,
            finished_req_ids=self.finished_req_ids,
            preempted_req_ids=self.reset_preempted_req_ids,
            preempted_reqs=[r.request_id for r in preempted_reqs],
            external=external,
            new_block_ids=new_block_ids,
            scheduled_spec_decode_tokens=self._take_spec_tokens(),
        )
        if self.connector is not None:
            scheduler_output.kv_connector_metadata = self.connector.build_connector_meta(scheduler_output)
        if self.defer_block_free and total_num_scheduled_tokens > 0:
            self.sched_step_seq += 1  # the fence of the blocks this step writes (L1512-1513)
        self._update_after_schedule(scheduler_output)
        if self.observer is not None:
            for req_id, num_tokens in num_scheduled_tokens.items():
                r = self.requests[req_id]
                self.observer.on_scheduled(
                    req_id, num_tokens, r.num_computed_tokens, r.is_prefill_chunk, r.num_output_placeholders
                )
        return scheduler_output

    def _preempt_request(self, request: Request, reason: str, drop_stale_output: bool = False) -> None:
        """Free the blocks of a request the caller took off ``running`` and put it at the front
        of the waiting queue (L1538-1581). Async: output in flight becomes stale, delivered later
        (or dropped, after a reset) without touching the counters reset here."""
        assert request.status == RequestStatus.RUNNING, "only running requests can be preempted"
        self._free_request_blocks(request)
        self._inflight_prefills.pop(request, None)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.spec_token_ids = []
        request.drop_stale_output = drop_stale_output or (
            request.drop_stale_output and request.num_stale_output_tokens > 0
        )
        request.num_stale_output_tokens = request.num_in_flight_tokens
        request.num_output_placeholders = 0
        request.num_preemptions += 1
        request.record_event(EngineCoreEventType.PREEMPTED)
        self.waiting.appendleft(request)
        self.reset_preempted_req_ids.append(request.request_id)
        if self.observer is not None:
            self.observer.on_preempted(request.request_id, reason)

    def _update_after_schedule(self, scheduler_output: SchedulerOutput) -> None:
        """Advance num_computed_tokens right after scheduling, so that a prefill can be
        scheduled again at once in the next step (L1583-1615)."""
        for req_id, num_tokens in scheduler_output.num_scheduled_tokens.items():
            request = self.requests[req_id]
            request.num_computed_tokens += num_tokens
            request.num_in_flight_tokens += num_tokens
            if self.defer_block_free:
                request.last_sched_seq = self.sched_step_seq
            request.is_prefill_chunk = request.num_computed_tokens < (
                request.num_tokens + request.num_output_placeholders
            )
            if not request.is_prefill_chunk:
                self._inflight_prefills.pop(request, None)
        self.finished_req_ids = []
        self.reset_preempted_req_ids = []

    # ---- update from the model's output ----------------------------------------------------

    def update_from_output(
        self, scheduler_output: SchedulerOutput, model_runner_output: ModelRunnerOutput
    ) -> EngineCoreOutputs:
        sampled_token_ids = model_runner_output.sampled_token_ids
        kv_output = model_runner_output.kv_connector_output
        # Every write of this and earlier steps is done: deferred frees may return (L1986-1990).
        if self.defer_block_free and scheduler_output.total_num_scheduled_tokens > 0:
            self.processed_step_seq += 1
            self._drain_deferred_frees()
        failed_kv_load_req_ids: list[str] = []
        if kv_output is not None and kv_output.invalid_block_ids:
            failed_kv_load_req_ids = self._handle_invalid_blocks(
                kv_output.invalid_block_ids, scheduler_output.num_scheduled_tokens
            )
        outputs: list[EngineCoreOutput] = []
        spec_decoding_stats: SpecDecodingStats | None = None
        stopped_running_reqs: list[Request] = []
        stopped_preempted_reqs: list[Request] = []
        for req_id, num_tokens_scheduled in scheduler_output.num_scheduled_tokens.items():
            request = self.requests.get(req_id)
            output_is_stale = False
            if request is not None:
                request.num_in_flight_tokens -= num_tokens_scheduled
                # Drain the stale share of a preempted request in lockstep (L2019-2027).
                if request.num_stale_output_tokens > 0:
                    output_is_stale = True
                    request.num_stale_output_tokens -= num_tokens_scheduled
                    assert request.num_stale_output_tokens >= 0
            if req_id in failed_kv_load_req_ids:
                continue  # failed, or to compute again, after a failed KV load
            if request is None or request.is_finished():
                continue  # finished (aborted) while the model ran it
            if output_is_stale and request.drop_stale_output:
                continue  # dropped: its position is sampled again

            req_index = model_runner_output.req_id_to_index[req_id]
            new_token_ids = sampled_token_ids[req_index] if sampled_token_ids else []
            spec_decoding_stats = self._roll_back_rejected(
                request, scheduler_output, new_token_ids, output_is_stale, spec_decoding_stats
            )
            status_before_stop = request.status
            stopped = False
            if new_token_ids:
                due = request.num_output_placeholders > 0 or self.num_spec_tokens > 0
                new_token_ids, stopped = self._update_request_with_output(request, new_token_ids, output_is_stale)
                if self.config.release.cache_on_token_arrival_with_drafts and not output_is_stale:
                    cache_on_token_arrival(self.kv_cache_manager, request, status_before_stop, due)
            # The first output reports the first prefill's stats (L2148-2153).
            prefill_stats = request.take_prefill_stats() if new_token_ids or stopped else None
            finish_reason = None
            if stopped:
                finish_reason = request.get_finished_reason()
                self._free_request(request)
                if status_before_stop == RequestStatus.RUNNING:
                    stopped_running_reqs.append(request)
                else:
                    stopped_preempted_reqs.append(request)
            if new_token_ids or stopped:
                outputs.append(
                    EngineCoreOutput(req_id, new_token_ids, finish_reason, prefill_stats, request.take_events())
                )

        # Remove the stopped requests from the queues (L2234-2242).
        if stopped_running_reqs:
            self.running[:] = [r for r in self.running if r not in stopped_running_reqs]
        if stopped_preempted_reqs:
            self.waiting = deque(r for r in self.waiting if r not in stopped_preempted_reqs)
            self.deferred_waiting.difference_update(r.request_id for r in stopped_preempted_reqs)
            self.kv_holding_waiting = deque(r for r in self.kv_holding_waiting if r not in stopped_preempted_reqs)

        # Under `fail`, the requests a failed load hit end with an error (L2247-2268).
        if failed_kv_load_req_ids and not self.recompute_kv_load_failures:
            if len(failed_kv_load_req_ids) > 1:
                raise SchedulingError(
                    f"{len(failed_kv_load_req_ids)} requests fail a KV load in one step, in an order vLLM "
                    "takes from a set: not replayable"
                )
            for r in self.finish_requests(failed_kv_load_req_ids, RequestStatus.FINISHED_ERROR):
                outputs.append(EngineCoreOutput(r.request_id, [], r.get_finished_reason(), None, r.take_events()))
        if kv_output is not None:
            self._update_from_kv_xfer_finished(kv_output)

        # One KV event batch per step, if anything was queued; the connector's events follow
        # the manager's, without a spec kind (L2312-2326).
        events = self.kv_cache_manager.take_events()
        if self.connector is not None:
            events.extend(self.connector.take_events())
        if events:
            self.kv_event_publisher.publish(KVEventBatch(ts=self.clock(), events=list(events)))
        kv_stats = self.connector.get_kv_connector_stats() if self.connector is not None else None  # L2281-2292
        return EngineCoreOutputs(outputs, self.make_stats(spec_decoding_stats, kv_stats))

    def _update_request_with_output(
        self, request: Request, new_token_ids: list[int], is_stale: bool = False
    ) -> tuple[list[int], bool]:
        """Append the sampled tokens one by one (the hasher hashes each newly full block) and
        stop at the first that ends the request (L2434-2451); a stale one keeps num_computed."""
        stopped = False
        for num_new, output_token_id in enumerate(new_token_ids, 1):
            request.append_output_token_ids(output_token_id)
            if stopped := check_stop(request, self.max_model_len):
                if self.config.release.trim_computed_at_stop and not is_stale:
                    request.num_computed_tokens -= len(new_token_ids) - num_new
                del new_token_ids[num_new:]
                break
        return new_token_ids, stopped

    def make_stats(
        self, spec_decoding_stats: SpecDecodingStats | None = None, kv_stats: OffloadingConnectorStats | None = None
    ) -> SchedulerStats | None:
        """The step's stats; the prefix-cache counters restart after each (L2859-2902)."""
        prefix_cache_stats = self.kv_cache_manager.make_prefix_cache_stats()
        if prefix_cache_stats is None:
            return None
        connector_stats = self.connector_prefix_cache_stats
        if connector_stats is not None:
            self.connector_prefix_cache_stats = PrefixCacheStats()
        num_running, num_waiting = self.get_request_counts()
        num_deferred = len(self.deferred_waiting)
        return SchedulerStats(
            num_running,
            num_waiting - num_deferred,
            self.kv_cache_manager.usage,
            prefix_cache_stats,
            connector_stats,
            num_deferred,
            spec_decoding_stats,
            kv_stats,
            self._kv_fetch_stats(),
        )
