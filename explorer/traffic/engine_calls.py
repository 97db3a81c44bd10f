"""The replay's engine: a KV cache manager driven through `RequestSteps`.

The policies admit, generate and finish requests only through these functions; the calls into
the manager, in vLLM's scheduler order, are made by `RequestSteps`
(explorer/request_steps.py), the same seam scenario replay and the prefill engine use.
"""

from __future__ import annotations

from explorer.core.kv_cache_manager import KVCacheManager
from explorer.core.kv_cache_observer import KVCacheObserver
from explorer.core.request import Request
from explorer.request_steps import RequestSteps
from explorer.traffic.trace import MAX_MODEL_LEN


def new_engine(num_blocks: int, block_size: int, observer: KVCacheObserver | None = None) -> RequestSteps:
    """A fresh engine for one run: prefix caching and stats on, no KV events (``observer``:
    who hears the core, e.g. the miss reasons)."""
    manager = KVCacheManager(
        num_blocks,
        block_size,
        max_model_len=MAX_MODEL_LEN,
        enable_caching=True,
        enable_kv_cache_events=False,
        log_stats=True,
        observer=observer,
    )
    return RequestSteps(manager)


def admit(sched: RequestSteps, request: Request) -> int | None:
    """A fresh request's admission for its whole prompt: the hit in tokens, or None when there
    was no room (nothing changed)."""
    admitted = sched.admit(request)
    return admitted.hit_tokens if admitted.ok else None


def footprint_fits(sched: RequestSteps, request: Request, num_tokens: int) -> bool:
    """Whether a waiting request could be admitted with room for ``num_tokens`` slots (its
    whole footprint) right now, counting the blocks its lookup would hit."""
    return sched.fits(request, num_tokens)


def generate(sched: RequestSteps, request: Request, n: int) -> None:
    """``n`` output tokens of 0: each step computes the pending token, then samples one; the
    last sampled token stays pending."""
    for _ in range(n):
        if request.num_tokens > request.num_computed_tokens and sched.compute_pending(request) is None:
            raise AssertionError("decode allocation failed although the request's footprint fits")
        request.append_output_token_ids(0)


def finish(sched: RequestSteps, request: Request) -> None:
    """The request is done: its blocks return to the free queue in reverse order."""
    sched.finish(request)
