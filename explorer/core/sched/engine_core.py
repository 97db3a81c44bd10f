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


class PlayedModel:
    """Stands in for the model executor: knows what each request will sample."""

    def __init__(self, connector_worker: ConnectorWorker | None = None) -> None:
        self.outputs: dict[str, Sequence[int]] = {}
        # The KV connector's worker side: it reports on every batch, even one with no tokens
        # (the model runner's kv_connector_no_forward).
        self.connector_worker = connector_worker

    def add_request(self, request_id: str, output: Sequence[int]) -> None:
        self.outputs[request_id] = output

    def execute_model(self, scheduler_output: SchedulerOutput, requests: Mapping[str, Request]) -> ModelRunnerOutput:
        """Run the batch just scheduled: a request that is not a prefill chunk samples the
        token at position ``num_computed_tokens`` (placeholders included), i.e. output index
        ``num_computed_tokens - num_prompt_tokens``; a prefill chunk samples nothing."""
        req_ids = list(scheduler_output.num_scheduled_tokens)
        sampled: list[list[int]] = []
        for req_id in req_ids:
            request = requests[req_id]
            if request.is_prefill_chunk:
                sampled.append([])
            else:
                index, output = request.num_computed_tokens - request.num_prompt_tokens, self.outputs[req_id]
                if not 0 <= index < len(output):
                    # vLLM can schedule past max_tokens after a dropped stale output (a KV
                    # connector under async scheduling); the played model has no token there.
                    raise SchedulingError(
                        f"the played model was asked for output[{index}] of {req_id!r} ({len(output)} tokens)"
                    )
                sampled.append([output[index]])
        kv_output = None
        if self.connector_worker is not None:
            kv_output = self.connector_worker.execute(scheduler_output.kv_connector_metadata)
        return ModelRunnerOutput(req_ids, {r: i for i, r in enumerate(req_ids)}, sampled, kv_output)


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

    def add_request(self, request: Request, output: Sequence[int]) -> None:
        self.model_executor.add_request(request.request_id, output)
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
        return EngineStep(scheduler_output, engine_core_outputs, scheduler_output.total_num_scheduled_tokens > 0)

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
    """The scheduler vLLM picks for the config (config/scheduler.py:229-236) and its loop:
    AsyncScheduler with a batch queue of 2 under async scheduling, else Scheduler and step();
    a KV connector's scheduler side goes to the scheduler, its played worker to the model."""
    scheduler_cls = AsyncScheduler if config.async_scheduling else Scheduler
    scheduler = scheduler_cls(kv_cache_manager, config, kv_event_publisher, connector=connector)
    return EngineCore(scheduler, PlayedModel(connector_worker), 2 if config.async_scheduling else 1)
