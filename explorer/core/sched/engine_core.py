"""The engine loop (vllm/v1/engine/core.py, 0.31.0) around the scheduler, with a played model.

``EngineCore.step()`` is the synchronous loop: schedule, run the batch, update from its output
(core.py:630-659). ``step_with_batch_queue()`` is the asynchronous one with a batch queue of 2
(core.py:670-783): it schedules a new batch while the queue is not full and returns at once;
only when the queue is full, or nothing more could be scheduled, does it take the oldest batch
and update from its output. Empty batches are queued too. ``step_fn`` is the one the engine
uses, picked as vLLM picks it (core.py:236-238).

The model is played (`PlayedModel`): it is given each request's whole ``output`` up front, and
when it runs a batch every scheduled request that is not a prefill chunk samples the token of
its ``output`` at the position being computed. The scheduler learns the token only in the
``update_from_output`` of that batch, as from a real model; a stale output the scheduler drops
is sampled again at the same position by a later batch.

With speculative decoding the model is played further (spec_decode.py): a request verifying
drafts samples the accepted ones plus a bonus token, the number accepted at its i-th step that
verifies real drafts being ``accepted[i]`` (0 past the list's end), capped at the drafts
scheduled (accepted drafts past the end of ``output`` are sampled as the drafts, 0s, which the
scheduler counts and then trims); after each step that ran the model, the played drafter proposes
``num_speculative_tokens`` drafts for every request of the batch (``post_step``, sync only).

Under async scheduling the worker keeps the drafts itself (gpu_model_runner.py, 0.31.0), and the
played model does what the worker does with them. A batch's ``-1`` drafts are real proposals
only for a request the previous batch ran and that is still running (the worker's
``prev_req_id_to_index``, which a finish, a preemption or a batch without it clears), the others
are rejected whole. And the scheduler placed
the batch as if the previous batch's drafts were all accepted, so the model samples from the
true position: the scheduler's minus what it rejected in the previous batch (the worker's
``prev_num_draft_len`` correction). A batch planned past the end of ``output`` (its request is
finished by the batch before) samples 0s, which the scheduler never reads.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from explorer.core.errors import SchedulingError
from explorer.core.kv_cache_manager import KVCacheManager
from explorer.core.request import Request, RequestStatus
from explorer.core.sched.async_scheduler import AsyncScheduler
from explorer.core.sched.config import SchedulerConfig
from explorer.core.sched.kv_connector.base import ConnectorWorker, KVConnectorBase
from explorer.core.sched.output import EngineCoreOutputs, KVEventPublisher, ModelRunnerOutput, SchedulerOutput
from explorer.core.sched.scheduler import Scheduler
from explorer.core.sched.spec_decode import DraftTokenIds, is_padding


class PlayedModel:
    """Stands in for the model executor: knows what each request will sample."""

    def __init__(
        self,
        connector_worker: ConnectorWorker | None = None,
        num_speculative_tokens: int = 0,
        async_scheduling: bool = False,
    ) -> None:
        self.outputs: dict[str, Sequence[int]] = {}
        # The KV connector's worker side: it reports on every batch, even one with no tokens
        # (the model runner's kv_connector_no_forward).
        self.connector_worker = connector_worker
        self.num_speculative_tokens = num_speculative_tokens
        # Speculative decoding: drafts accepted per verifying step, and steps verified so far.
        self.accepted: dict[str, Sequence[int]] = {}
        self.num_verified: dict[str, int] = {}
        self.last_batch: list[str] = []
        # Async: the drafts each request of the previous batch had rejected (the worker's view).
        self.async_scheduling = async_scheduling
        self.prev_rejected: dict[str, int] = {}

    def add_request(self, request_id: str, output: Sequence[int], accepted: Sequence[int] = ()) -> None:
        self.outputs[request_id] = output
        self.accepted[request_id] = accepted
        self.num_verified[request_id] = 0

    def _num_accepted(self, request_id: str, num_drafts: int) -> int:
        """Drafts this step accepts of ``num_drafts`` real ones: the request's next
        ``accepted`` entry, capped at the drafts scheduled."""
        i = self.num_verified[request_id]
        self.num_verified[request_id] = i + 1
        accepted = self.accepted[request_id]
        return min(accepted[i] if i < len(accepted) else 0, num_drafts)

    def _real_drafts(self, scheduler_output: SchedulerOutput, req_id: str, prev: Mapping[str, int]) -> bool:
        """Whether a drafter stands behind the request's drafts: none of an admission's
        padding; under async, only for a request the previous batch ran."""
        if not scheduler_output.scheduled_spec_decode_tokens.get(req_id) or is_padding(scheduler_output, req_id):
            return False
        return not self.async_scheduling or req_id in prev

    def execute_model(self, scheduler_output: SchedulerOutput, requests: Mapping[str, Request]) -> ModelRunnerOutput:
        """Run the batch just scheduled: a request that is not a prefill chunk samples the
        token at position ``num_computed_tokens`` (placeholders included, less the previous
        batch's rejections under async), i.e. output index ``num_computed_tokens -
        num_prompt_tokens``; a prefill chunk samples nothing."""
        req_ids = list(scheduler_output.num_scheduled_tokens)
        self.last_batch = req_ids
        # Only a request the previous batch ran and that ran on since (no finish, preemption
        # or re-admission between: those leave the worker's persistent batch) keeps its entry.
        prev = {r: n for r, n in self.prev_rejected.items() if r in scheduler_output.scheduled_running_reqs}
        self.prev_rejected = {}
        sampled: list[list[int]] = []
        for req_id in req_ids:
            request = requests[req_id]
            self.prev_rejected[req_id] = 0
            if request.is_prefill_chunk:
                sampled.append([])
                continue
            spec = scheduler_output.scheduled_spec_decode_tokens.get(req_id, [])
            correction = prev.get(req_id, 0) if self.async_scheduling else 0
            start = request.num_computed_tokens - len(spec) - request.num_prompt_tokens - correction
            output = self.outputs[req_id]
            overrun_ok = self.async_scheduling and self.num_speculative_tokens > 0
            if start < 0 or (start >= len(output) and not overrun_ok):
                # vLLM can schedule past max_tokens after a dropped stale output (a KV
                # connector under async scheduling); the played model has no token there.
                raise SchedulingError(
                    f"the played model was asked for output[{start}] of {req_id!r} ({len(output)} tokens)"
                )
            num_accepted = (
                self._num_accepted(req_id, len(spec)) if self._real_drafts(scheduler_output, req_id, prev) else 0
            )
            self.prev_rejected[req_id] = len(spec) - num_accepted
            # Drafts accepted past the output's end are sampled too (as the drafts, 0s): the
            # scheduler counts them before it trims the request at max_tokens.
            num_sampled = 1 + num_accepted
            tokens = list(output[start : start + num_sampled])
            sampled.append(tokens + [0] * (num_sampled - len(tokens)))
        kv_output = None
        if self.connector_worker is not None:
            kv_output = self.connector_worker.execute(scheduler_output.kv_connector_metadata)
        return ModelRunnerOutput(req_ids, {r: i for i, r in enumerate(req_ids)}, sampled, kv_output)

    def take_draft_token_ids(self) -> DraftTokenIds | None:
        """The played drafter: ``num_speculative_tokens`` drafts for every request of the last
        batch (their values never reach the cache; these are 0s)."""
        if not self.num_speculative_tokens:
            return None
        k = self.num_speculative_tokens
        return DraftTokenIds(list(self.last_batch), [[0] * k for _ in self.last_batch])


@dataclass(frozen=True)
class EngineStep:
    """What one call of the engine loop did: the batch it scheduled (None if it scheduled
    none) and the update it ran (None if it ran none, e.g. an async call that only filled the
    queue)."""

    scheduler_output: SchedulerOutput | None
    engine_core_outputs: EngineCoreOutputs | None
    model_executed: bool


NOTHING = EngineStep(None, None, False)


class EngineCore:
    def __init__(self, scheduler: Scheduler, model_executor: PlayedModel, batch_queue_size: int = 1) -> None:
        self.scheduler = scheduler
        self.model_executor = model_executor
        # vllm_config.max_concurrent_batches: 2 with async scheduling, else 1 (no queue).
        self.batch_queue_size = batch_queue_size
        self.batch_queue: deque[tuple[ModelRunnerOutput, SchedulerOutput]] | None = (
            deque(maxlen=batch_queue_size) if batch_queue_size > 1 else None
        )
        self.step_fn = self.step if self.batch_queue is None else self.step_with_batch_queue

    def add_request(self, request: Request, output: Sequence[int], accepted: Sequence[int] = ()) -> None:
        self.model_executor.add_request(request.request_id, output, accepted)
        self.scheduler.add_request(request)

    def abort_requests(self, request_ids: Iterable[str]) -> list[Request]:
        return self.scheduler.finish_requests(request_ids, RequestStatus.FINISHED_ABORTED)

    def reset_prefix_cache(self, reset_running_requests: bool = False, reset_connector: bool = False) -> bool:
        return self.scheduler.reset_prefix_cache(reset_running_requests, reset_connector)

    def in_flight(self, request_id: str) -> bool:
        """Is the request in a queued batch whose output has not been processed? Its output
        would go to whatever request holds the id when it arrives: update_from_output looks
        requests up by id (scheduler.py:2020-2032)."""
        return self.batch_queue is not None and any(request_id in so.num_scheduled_tokens for _, so in self.batch_queue)

    def _execute(self, scheduler_output: SchedulerOutput) -> ModelRunnerOutput:
        return self.model_executor.execute_model(scheduler_output, self.scheduler.requests)

    def step(self) -> EngineStep:
        """Schedule, execute, update (core.py:630-659); nothing at all without requests."""
        if not self.scheduler.has_requests():
            return NOTHING
        scheduler_output = self.scheduler.schedule()
        model_output = self._execute(scheduler_output)
        engine_core_outputs = self.scheduler.update_from_output(scheduler_output, model_output)
        model_executed = scheduler_output.total_num_scheduled_tokens > 0
        self.post_step(model_executed)
        return EngineStep(scheduler_output, engine_core_outputs, model_executed)

    def post_step(self, model_executed: bool) -> None:
        """The drafter's proposals reach the scheduler after the update (core.py:661-668)."""
        if self.scheduler.speculative_config is not None and self.batch_queue is None and model_executed:
            draft_token_ids = self.model_executor.take_draft_token_ids()
            if draft_token_ids is not None:
                self.scheduler.update_draft_token_ids(draft_token_ids)

    def step_with_batch_queue(self) -> EngineStep:
        """Fill the batch queue before taking outputs (core.py:670-783)."""
        batch_queue = self.batch_queue
        assert batch_queue is not None
        assert len(batch_queue) < self.batch_queue_size
        model_executed = False
        scheduled: SchedulerOutput | None = None
        if self.scheduler.has_requests():
            scheduled = self.scheduler.schedule()
            model_output = self._execute(scheduled)
            model_executed = scheduled.total_num_scheduled_tokens > 0
            batch_queue.appendleft((model_output, scheduled))
            # Don't block on the oldest batch unless the queue is full or there is nothing
            # more to schedule (core.py:726-733).
            if len(batch_queue) < self.batch_queue_size and (model_executed or self.scheduler.has_requests()):
                return EngineStep(scheduled, None, model_executed)
        elif not batch_queue:
            return NOTHING
        model_output, scheduler_output = batch_queue.pop()
        engine_core_outputs = self.scheduler.update_from_output(scheduler_output, model_output)
        return EngineStep(scheduled, engine_core_outputs, model_executed)


def make_engine_core(
    kv_cache_manager: KVCacheManager,
    config: SchedulerConfig,
    kv_event_publisher: KVEventPublisher | None = None,
    connector: KVConnectorBase | None = None,
    connector_worker: ConnectorWorker | None = None,
) -> EngineCore:
    """The scheduler vLLM picks for the config (config/scheduler.py:229-237) and its loop:
    AsyncScheduler with a batch queue of 2 under async scheduling, else Scheduler and step();
    a KV connector's scheduler side goes to the scheduler, its played worker to the model."""
    scheduler_cls = AsyncScheduler if config.async_scheduling else Scheduler
    scheduler = scheduler_cls(kv_cache_manager, config, kv_event_publisher, connector=connector)
    spec = config.speculative_config
    model = PlayedModel(connector_worker, 0 if spec is None else spec.num_speculative_tokens, config.async_scheduling)
    return EngineCore(scheduler, model, 2 if config.async_scheduling else 1)
