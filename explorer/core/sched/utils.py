"""When a request stops (vllm/v1/core/sched/utils.py, 0.31.0)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from explorer.core.request import Request, RequestStatus

if TYPE_CHECKING:
    from explorer.core.kv_cache_manager import KVCacheManager


def check_stop(request: Request, max_model_len: int) -> bool:
    """sched/utils.py:98-140, with EOS ignored and no stop tokens: only the length caps stop."""
    assert request.max_tokens is not None
    if request.num_tokens >= max_model_len or request.num_output_tokens >= request.max_tokens:
        request.status = RequestStatus.FINISHED_LENGTH_CAPPED
        return True
    return False


def cache_on_token_arrival(manager: KVCacheManager, request: Request, status_before: RequestStatus, due: bool) -> None:
    """vLLM 0.33.0: when sampled tokens arrive for a request that was running, cache up to the
    tokens not in flight, if it had output placeholders or drafts (``due``, where
    update_from_output calls cache_blocks: scheduler.py:2403-2415 in 0.33.0). 0.31.0 does this
    in AsyncScheduler only."""
    if due and status_before == RequestStatus.RUNNING:
        manager.cache_blocks(request, request.num_computed_tokens - request.num_in_flight_tokens)
