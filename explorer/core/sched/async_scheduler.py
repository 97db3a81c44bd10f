"""vLLM's AsyncScheduler (vllm/v1/core/sched/async_scheduler.py, 0.31.0), vLLM 0.31's default.

The engine schedules step N+1 before the token of step N is known. Each scheduled request that
is not a prefill chunk gets output placeholders: positions counted as computed
(``num_computed_tokens`` already includes them) whose tokens have not arrived, one for the token
it samples plus one per draft it verifies. The running loop then schedules
``num_tokens_with_spec + num_output_placeholders - num_computed_tokens`` tokens.

Speculative decoding: the worker proposes drafts on the device, so the scheduler gives every
such request k ``-1`` drafts to schedule next step (spec_decode.py, `_set_placeholder_drafts`);
the rejected ones roll the placeholders back with ``num_computed_tokens`` when the output
arrives. A KV connector needs nothing of its own here: its admissions, delayed caching and
remote waits compose with the placeholders as in vLLM.

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
        """Placeholders for the token and the drafts of each scheduled request that samples,
        and k placeholder drafts for its next step (async_scheduler.py:25-57)."""
        super()._update_after_schedule(scheduler_output)
        spec_decode_tokens = scheduler_output.scheduled_spec_decode_tokens
        for req_id in scheduler_output.num_scheduled_tokens:
            request = self.requests[req_id]
            if request.is_prefill_chunk:
                continue
            request.num_output_placeholders += 1 + len(spec_decode_tokens.get(req_id, ()))
            self._set_placeholder_drafts(request)

    def _update_request_with_output(
        self, request: Request, new_token_ids: list[int], is_stale: bool = False
    ) -> tuple[list[int], bool]:
        """Append the tokens, retire their placeholders, then cache what they completed
        (async_scheduler.py:59-78). A stale delivery (the request was preempted meanwhile)
        touches no placeholder, since preemption zeroed them, and a preempted request holds
        no block to cache."""
        status_before_update = request.status
        num_returned = len(new_token_ids)
        new_token_ids, stopped = super()._update_request_with_output(request, new_token_ids, is_stale)
        if not is_stale:
            # 0.33.0 resolves the trimmed tokens' placeholders too (scheduler.py:2766-2769 in 0.33.0).
            resolved = num_returned if self.config.release.trim_computed_at_stop else len(new_token_ids)
            request.num_output_placeholders -= resolved
            assert request.num_output_placeholders >= 0
        if status_before_update == RequestStatus.RUNNING and not self.config.release.cache_on_token_arrival_with_drafts:
            self.kv_cache_manager.cache_blocks(request, request.num_computed_tokens - request.num_output_placeholders)
        return new_token_ids, stopped
