"""When a request stops (vllm/v1/core/sched/utils.py, 0.31.0)."""

from __future__ import annotations

from explorer.core.request import Request, RequestStatus


def check_stop(request: Request, max_model_len: int) -> bool:
    """sched/utils.py:98-140, with EOS ignored and no stop tokens: only the length caps stop."""
    assert request.max_tokens is not None
    if request.num_tokens >= max_model_len or request.num_output_tokens >= request.max_tokens:
        request.status = RequestStatus.FINISHED_LENGTH_CAPPED
        return True
    return False
