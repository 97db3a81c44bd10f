"""Finishing, aborting and resetting in the scheduler (vllm/v1/core/sched/scheduler.py, 0.31.0).

Moved out of scheduler.py with the KV connector: `FinishAndReset` is ``finish_requests`` (an
abort, or the error of a failed KV load), ``_free_request`` (the worker hears of a finished
request at the next ``schedule()``; its blocks return now, unless a load in flight or the
connector still needs them, or a step in flight may still write them) and
``reset_prefix_cache`` with ``reset_running_requests`` and ``reset_connector``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from explorer.core.errors import SchedulingError
from explorer.core.request import Request, RequestStatus
from explorer.core.sched.connector_path import ConnectorPath


class FinishAndReset(ConnectorPath):
    waiting: deque[Request]
    finished_req_ids: list[str]
    deferred_waiting: set[str]

    def _preempt_request(self, request: Request, reason: str, drop_stale_output: bool = False) -> None:
        raise NotImplementedError

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
            self.kv_holding_waiting = deque(r for r in self.kv_holding_waiting if r not in waiting)
            self.deferred_waiting.difference_update(r.request_id for r in waiting)
        for request in valid_requests:
            # A load still in flight keeps its blocks until the worker reports it (L2637-2645).
            delay_free_blocks = False
            if request.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                delay_free_blocks = request.request_id not in self.finished_recving_kv_req_ids
                self.finished_recving_kv_req_ids.discard(request.request_id)
                self.failed_recving_kv_req_ids.discard(request.request_id)
            request.status = finished_status
            self._free_request(request, delay_free_blocks)
        return valid_requests

    def _free_request(self, request: Request, delay_free_blocks: bool = False) -> None:
        """The worker hears of it at the next schedule(); the blocks return now, unless a load
        or the connector still needs them, or (deferred) a step in flight (L2650-2685)."""
        assert request.is_finished()
        self._inflight_prefills.pop(request, None)
        self._set_kv_fetch_stage(request, None)
        delay_free_blocks = self._connector_finished(request) or delay_free_blocks
        self.finished_req_ids.append(request.request_id)
        if not delay_free_blocks:
            self._free_blocks(request)
        if self.observer is not None:
            self.observer.on_finished(request.request_id, request.status.value)

    def reset_prefix_cache(self, reset_running_requests: bool = False, reset_connector: bool = False) -> bool:
        """Forget every cached hash (L2774-2827). With ``reset_running_requests`` every running
        request is preempted first, from the end of the running queue, so they come back in
        order; their output in flight is dropped. ``reset_connector`` also empties the
        connector's store; without a connector it resets nothing and does not fail."""
        if reset_running_requests:
            while self.running:
                self._preempt_request(
                    self.running.pop(), "reset_prefix_cache(reset_running_requests=True)", drop_stale_output=True
                )
        ok = self.kv_cache_manager.reset_prefix_cache()
        if reset_running_requests and not ok:
            # Blocks are still held by a load in flight or a deferred free: vLLM raises (L2808-2815).
            raise SchedulingError(
                "reset_prefix_cache(reset_running_requests=True) failed: blocks are held by a request "
                "waiting for remote KV (or a deferred free); vLLM raises"
            )
        if reset_connector:
            ok = self.reset_connector_cache() and ok
        return ok
