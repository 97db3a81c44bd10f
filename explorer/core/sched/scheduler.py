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

What vLLM's scheduler also does and this mirror leaves out, because none of it changes a
prefix-cache decision without its feature: the KV connector, encoder inputs, speculative
decoding, structured output, LoRA slot limits, the priority policy, pipeline and data
parallelism, streaming input, Mamba alignment, the watermark (0 by default) and the waiting
queue of block holders (empty without a connector). Every manager call goes through the
manager-level `RequestSteps` where the call is the same (lookup, admission, preemption, free,
reset), so the scenario ops and the scheduler make one set of calls.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable

from explorer.core.errors import SchedulingError
from explorer.core.events import KVEventBatch
from explorer.core.kv_cache_manager import KVCacheManager
from explorer.core.request import EngineCoreEventType, Request, RequestStatus
from explorer.core.sched.config import SchedulerConfig
from explorer.core.sched.output import (
    EngineCoreOutput,
    EngineCoreOutputs,
    KVEventCollector,
    KVEventPublisher,
    ModelRunnerOutput,
    SchedulerOutput,
    SchedulerStats,
)
from explorer.core.sched.request_steps import RequestSteps
from explorer.core.sched.utils import check_stop


class Scheduler:
    def __init__(
        self,
        kv_cache_manager: KVCacheManager,
        config: SchedulerConfig,
        kv_event_publisher: KVEventPublisher | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        config.check(kv_cache_manager.max_model_len)
        self.config = config
        self.kv_cache_manager = kv_cache_manager
        self.observer = kv_cache_manager.observer
        self.request_steps = RequestSteps(kv_cache_manager)
        self.max_num_running_reqs = config.max_num_seqs
        self.max_num_scheduled_tokens = config.max_num_batched_tokens
        self.max_model_len = kv_cache_manager.max_model_len
        self.kv_event_publisher: KVEventPublisher = kv_event_publisher or KVEventCollector()
        self.clock = clock
        # req_id -> Request, every request not finished, in arrival order.
        self.requests: dict[str, Request] = {}
        # FCFS: arrivals at the back, preempted requests at the front (request_queue.py:76-116).
        self.waiting: deque[Request] = deque()
        # The running queue is RequestSteps' (one list): in the order requests became running.
        self.running: list[Request] = self.request_steps.running
        # Finished / preempted since the last schedule() (vLLM keeps sets; order kept here).
        self.finished_req_ids: list[str] = []
        self.reset_preempted_req_ids: list[str] = []

    # ---- the queues --------------------------------------------------------------------------

    def add_request(self, request: Request) -> None:
        if request.max_tokens is None or request.max_tokens < 1:
            raise SchedulingError(f"request {request.request_id!r} needs max_tokens >= 1")
        if request.request_id in self.requests:
            raise SchedulingError(f"request {request.request_id!r} is already held by the scheduler")
        self.waiting.append(request)
        self.requests[request.request_id] = request

    def get_request_counts(self) -> tuple[int, int]:
        return len(self.running), len(self.waiting)

    def get_num_unfinished_requests(self) -> int:
        return len(self.running) + len(self.waiting)

    def has_requests(self) -> bool:
        """Unfinished requests, or finished ones the next schedule() must still tell the worker
        about: a finished request keeps the engine stepping once more (scheduler.py:2747-2772)."""
        return self.get_num_unfinished_requests() > 0 or bool(self.finished_req_ids)

    # ---- schedule ----------------------------------------------------------------------------

    def schedule(self) -> SchedulerOutput:
        scheduled_new_reqs: list[Request] = []
        scheduled_resumed_reqs: list[Request] = []
        scheduled_running_reqs: list[Request] = []
        preempted_reqs: list[Request] = []
        num_scheduled_tokens: dict[str, int] = {}
        token_budget = self.max_num_scheduled_tokens  # vLLM's input budget is the same here

        # The threshold stops a long prefill from starving others; with one eligible request
        # there is nobody to starve (scheduler.py:612-622).
        num_running, num_waiting = self.get_request_counts()
        threshold = self.config.long_prefill_token_threshold if num_running + num_waiting > 1 else 0

        # First, the RUNNING requests (scheduler.py:628-869).
        req_index = 0
        while req_index < len(self.running) and token_budget > 0:
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
            num_new_tokens = request.num_tokens + request.num_output_placeholders - request.num_computed_tokens
            if 0 < threshold < num_new_tokens:
                num_new_tokens = threshold
            num_new_tokens = min(num_new_tokens, token_budget)
            # The input position must stay below max_model_len (L685-691).
            num_new_tokens = min(num_new_tokens, self.max_model_len - request.num_computed_tokens - 1)
            if num_new_tokens == 0:
                # `continue`, not `break`: a later request may still fit (L738-741).
                req_index += 1
                continue

            while True:
                new_blocks = self.kv_cache_manager.allocate_slots(request, num_new_tokens)
                if new_blocks is not None:
                    break
                # No room: preempt the lowest-priority request, under FCFS the last running
                # one, until the allocation succeeds or the request preempted itself (L748-817).
                preempted_req = self.running[-1]
                self._preempt_request(
                    preempted_req,
                    f"allocate_slots for {request.request_id} ({num_new_tokens} tokens) found no room",
                )
                preempted_reqs.append(preempted_req)
                if preempted_req is request:
                    break
            if new_blocks is None:
                break

            scheduled_running_reqs.append(request)
            num_scheduled_tokens[request.request_id] = num_new_tokens
            token_budget -= num_new_tokens
            req_index += 1

        # Next, the WAITING requests, but not in a step that preempted (L872-1344).
        if not preempted_reqs:
            self._schedule_waiting(
                token_budget, threshold, num_scheduled_tokens, scheduled_new_reqs, scheduled_resumed_reqs
            )

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
        )
        self._update_after_schedule(scheduler_output)
        if self.observer is not None:
            for req_id, num_tokens in num_scheduled_tokens.items():
                r = self.requests[req_id]
                self.observer.on_scheduled(
                    req_id, num_tokens, r.num_computed_tokens, r.is_prefill_chunk, r.num_output_placeholders
                )
        return scheduler_output

    def _schedule_waiting(
        self,
        token_budget: int,
        threshold: int,
        num_scheduled_tokens: dict[str, int],
        scheduled_new_reqs: list[Request],
        scheduled_resumed_reqs: list[Request],
    ) -> None:
        """Admit waiting requests in FCFS order while the budget and max_num_seqs allow; the
        first one that does not fit ends the scan (`break`: FCFS is kept)."""
        skipped: list[Request] = []
        while token_budget > 0 and self.waiting:
            if len(self.running) >= self.max_num_running_reqs:
                break
            request = self.waiting[0]
            # Async: a preempted request whose output is still in flight waits for it, since
            # resuming now could sample a position that output later delivers (L905-910).
            if request.num_stale_output_tokens and not request.drop_stale_output:
                skipped.append(self.waiting.popleft())
                continue

            # The local prefix-cache hit, for a request computing from token 0 (L929-941;
            # a preempted request looks its output tokens up too).
            new_computed_blocks, num_new_local_computed_tokens = self.request_steps.lookup(request)
            num_computed_tokens = request.num_computed_tokens + num_new_local_computed_tokens
            # The first scheduled prefill's stats, not a resumed one's (L1033-1039).
            if request.prefill_stats is not None and request.num_preemptions <= 0:
                request.prefill_stats.set(request.num_prompt_tokens, num_new_local_computed_tokens, 0)
            # `num_tokens`, not the prompt: a resumed request recomputes its outputs (L1081-1084).
            num_new_tokens = request.num_tokens - num_computed_tokens
            if 0 < threshold < num_new_tokens:
                num_new_tokens = threshold
            num_new_tokens = min(num_new_tokens, token_budget)
            assert num_new_tokens > 0

            # The whole sequence must fit, not only this chunk (scheduler_reserve_full_isl,
            # on by default, L1207-1222); stats are recorded only at admission (L1252-1256).
            new_blocks = self.request_steps.allocate(
                request,
                num_new_tokens,
                num_new_local_computed_tokens,
                new_computed_blocks,
                full_sequence_must_fit=True,
            )
            if new_blocks is None:
                break

            self.waiting.popleft()
            if request.status == RequestStatus.WAITING:
                scheduled_new_reqs.append(request)
            else:
                scheduled_resumed_reqs.append(request)
            num_scheduled_tokens[request.request_id] = num_new_tokens
            token_budget -= num_new_tokens
            self.request_steps.set_running(request)
            request.num_computed_tokens = num_computed_tokens
        # Skipped requests go back to the front, in their order (L1341-1344).
        self.waiting.extendleft(reversed(skipped))

    def _preempt_request(self, request: Request, reason: str, drop_stale_output: bool = False) -> None:
        """Free the request's blocks and put it at the front of the waiting queue (L1538-1581).
        Async: output still in flight becomes stale; it is delivered later (or dropped, after
        a reset) without touching the counters reset here."""
        assert request.status == RequestStatus.RUNNING, "only running requests can be preempted"
        self.request_steps.preempt(request)  # free, num_computed_tokens = 0, one more preemption
        request.drop_stale_output = drop_stale_output or (
            request.drop_stale_output and request.num_stale_output_tokens > 0
        )
        request.num_stale_output_tokens = request.num_in_flight_tokens
        request.num_output_placeholders = 0
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
            request.is_prefill_chunk = request.num_computed_tokens < (
                request.num_tokens + request.num_output_placeholders
            )
        self.finished_req_ids = []
        self.reset_preempted_req_ids = []

    # ---- update from the model's output ----------------------------------------------------

    def update_from_output(
        self, scheduler_output: SchedulerOutput, model_runner_output: ModelRunnerOutput
    ) -> EngineCoreOutputs:
        sampled_token_ids = model_runner_output.sampled_token_ids
        outputs: list[EngineCoreOutput] = []
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
            if request is None or request.is_finished():
                continue  # finished (aborted) while the model ran it
            if output_is_stale and request.drop_stale_output:
                continue  # dropped: its position is sampled again

            req_index = model_runner_output.req_id_to_index[req_id]
            new_token_ids = sampled_token_ids[req_index] if sampled_token_ids else []
            status_before_stop = request.status
            stopped = False
            if new_token_ids:
                new_token_ids, stopped = self._update_request_with_output(request, new_token_ids, output_is_stale)
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

        # One KV event batch per step, if anything was queued (L2312-2326).
        events = self.kv_cache_manager.take_events()
        if events:
            self.kv_event_publisher.publish(KVEventBatch(ts=self.clock(), events=list(events)))
        return EngineCoreOutputs(outputs, self.make_stats())

    def _update_request_with_output(
        self, request: Request, new_token_ids: list[int], is_stale: bool = False
    ) -> tuple[list[int], bool]:
        """Append the sampled tokens one by one (the hasher hashes each newly full block) and
        stop at the first that ends the request (L2434-2451). ``is_stale`` is the async
        scheduler's."""
        stopped = False
        for num_new, output_token_id in enumerate(new_token_ids, 1):
            request.append_output_token_ids(output_token_id)
            stopped = check_stop(request, self.max_model_len)
            if stopped:
                del new_token_ids[num_new:]
                break
        return new_token_ids, stopped

    def make_stats(self) -> SchedulerStats | None:
        """The step's stats; the prefix-cache counters restart after each (L2859-2902)."""
        prefix_cache_stats = self.kv_cache_manager.make_prefix_cache_stats()
        if prefix_cache_stats is None:
            return None
        num_running, num_waiting = self.get_request_counts()
        return SchedulerStats(num_running, num_waiting, self.kv_cache_manager.usage, prefix_cache_stats)

    # ---- finish, abort, reset ------------------------------------------------------------------

    def finish_requests(self, request_ids: str | Iterable[str], finished_status: RequestStatus) -> list[Request]:
        """Finish requests from outside (an abort); an unknown or finished id is ignored
        (L2585-2648). Returns the requests that were finished now."""
        assert RequestStatus.is_finished(finished_status)
        ids = (request_ids,) if isinstance(request_ids, str) else tuple(dict.fromkeys(request_ids))
        valid_requests = [r for r in (self.requests.get(i) for i in ids) if r is not None and not r.is_finished()]
        running = [r for r in valid_requests if r.status == RequestStatus.RUNNING]
        waiting = [r for r in valid_requests if r.status != RequestStatus.RUNNING]
        if running:
            self.running[:] = [r for r in self.running if r not in running]
        if waiting:
            self.waiting = deque(r for r in self.waiting if r not in waiting)
        for request in valid_requests:
            request.status = finished_status
            self._free_request(request)
        return valid_requests

    def _free_request(self, request: Request) -> None:
        """The worker hears of it at the next schedule(); the blocks return now (L2650-2685)."""
        assert request.is_finished()
        self.finished_req_ids.append(request.request_id)
        self.request_steps.free(request)
        del self.requests[request.request_id]
        if self.observer is not None:
            self.observer.on_finished(request.request_id, request.status.value)

    def reset_prefix_cache(self, reset_running_requests: bool = False, reset_connector: bool = False) -> bool:
        """Forget every cached hash (L2774-2827). With ``reset_running_requests`` every running
        request is preempted first, from the end of the running queue, so they come back in
        order; their output in flight is dropped. Without a connector, ``reset_connector``
        resets nothing and does not make the reset fail."""
        reason = "reset_prefix_cache(reset_running_requests=True)"
        ok, _ = self.request_steps.reset_prefix_cache(
            reset_running_requests, lambda r: self._preempt_request(r, reason, drop_stale_output=True)
        )
        # With every running request preempted no block is in use, so the reset succeeds.
        assert ok or not reset_running_requests
        return ok
