"""Every call the replay makes into the KV cache manager, as vLLM's scheduler makes them.

The replay policies drive the engine only through these functions, so this module is the one
place that knows the manager's API (including `single_type_managers[0]` and
`get_num_blocks_to_allocate` in `footprint_fits`).
"""

from __future__ import annotations

from explorer.core.kv_cache_manager import KVCacheManager
from explorer.core.request import Request, RequestStatus
from explorer.traffic.trace import MAX_MODEL_LEN


def new_manager(num_blocks: int, block_size: int) -> KVCacheManager:
    """A fresh engine for one run: prefix caching and stats on, no KV events."""
    return KVCacheManager(
        num_blocks,
        block_size,
        max_model_len=MAX_MODEL_LEN,
        enable_caching=True,
        enable_kv_cache_events=False,
        log_stats=True,
    )


def admit(mgr: KVCacheManager, request: Request) -> int | None:
    """A fresh request's admission, as the scheduler does it: lookup, allocate_slots for the
    whole rest of the prompt, then the stats. The hit in tokens, or None when there was no
    room (nothing changed)."""
    hit_blocks, hit = mgr.get_computed_blocks(request)
    if mgr.allocate_slots(request, request.num_tokens - hit, hit, hit_blocks) is None:
        return None
    request.num_computed_tokens = request.num_tokens
    request.status = RequestStatus.RUNNING
    mgr.record_prefix_cache_stats(request, hit)
    return hit


def footprint_fits(mgr: KVCacheManager, request: Request, num_tokens: int) -> bool:
    """Whether a waiting request could be admitted with room for ``num_tokens`` slots (its
    whole footprint) right now, counting the blocks its lookup would hit."""
    hit_blocks, _hit = mgr.get_computed_blocks(request)
    single = mgr.single_type_managers[0]
    need = single.get_num_blocks_to_allocate(request.request_id, num_tokens, hit_blocks.blocks[0])
    return need <= mgr.block_pool.get_num_free_blocks()


def generate(mgr: KVCacheManager, request: Request, n: int) -> None:
    """``n`` output tokens of 0: each step computes the pending token, then samples one; the
    last sampled token stays pending."""
    for _ in range(n):
        pending = request.num_tokens - request.num_computed_tokens
        if pending:
            if mgr.allocate_slots(request, pending) is None:
                raise AssertionError("decode allocation failed although the request's footprint fits")
            request.num_computed_tokens += pending
        request.append_output_token_ids(0)


def finish(mgr: KVCacheManager, request: Request) -> None:
    """The request is done: `free` returns its blocks to the free queue in reverse order."""
    mgr.free(request)
    request.status = RequestStatus.FINISHED
