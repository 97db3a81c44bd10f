"""vLLM's AsyncScheduler (vllm/v1/core/sched/async_scheduler.py, 0.31.0), vLLM 0.31's default.

The engine schedules step N+1 before the token of step N is known. Each scheduled request that
is not a prefill chunk gets an output placeholder: a position counted as computed
(``num_computed_tokens`` already includes it) whose token has not arrived. The running loop
then schedules ``num_tokens + num_output_placeholders - num_computed_tokens`` tokens.

Prefix caching feels it at hashing time (spec part 2, rules 71-72): ``allocate_slots`` caches
at most ``request.num_tokens`` tokens, and placeholders are not tokens yet, so when a sampled
token arrives the scheduler caches again up to ``num_computed_tokens - placeholders``. In plain
decoding that finds nothing new, and a decode block is hashed by the next allocation after its
last token arrived: one step later than the synchronous scheduler hashes it.
"""

from __future__ import annotations

from explorer.core.request import Request, RequestStatus
from explorer.core.sched.output import SchedulerOutput
from explorer.core.sched.scheduler import Scheduler


class AsyncScheduler(Scheduler):
    def _update_after_schedule(self, scheduler_output: SchedulerOutput) -> None:
        """One placeholder per scheduled request that samples (async_scheduler.py:25-57)."""
        super()._update_after_schedule(scheduler_output)
        for req_id in scheduler_output.num_scheduled_tokens:
            request = self.requests[req_id]
            if request.is_prefill_chunk:
                continue
            request.num_output_placeholders += 1

    def _update_request_with_output(
        self, request: Request, new_token_ids: list[int], is_stale: bool = False
    ) -> tuple[list[int], bool]:
        """Append the tokens, retire their placeholders, then cache what they completed
        (async_scheduler.py:59-78). A stale delivery (the request was preempted meanwhile)
        touches no placeholder, since preemption zeroed them, and a preempted request holds
        no block to cache."""
        status_before_update = request.status
        new_token_ids, stopped = super()._update_request_with_output(request, new_token_ids)
        if not is_stale:
            request.num_output_placeholders -= len(new_token_ids)
            assert request.num_output_placeholders >= 0
        if status_before_update == RequestStatus.RUNNING:
            self.kv_cache_manager.cache_blocks(request, request.num_computed_tokens - request.num_output_placeholders)
        return new_token_ids, stopped
