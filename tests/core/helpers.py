"""A minimal scheduler over one KVCacheManager, making the calls vLLM's scheduler makes."""

from __future__ import annotations

from collections.abc import Sequence

from explorer.core.hashing import init_none_hash
from explorer.core.kv_cache_manager import KVCacheBlocks, KVCacheManager
from explorer.core.kv_cache_utils import get_request_block_hasher
from explorer.core.request import Request, RequestStatus


class Sched:
    """One engine: a hash context, a block hasher (None when caching is off) and a manager."""

    def __init__(
        self,
        num_blocks: int = 64,
        block_size: int = 16,
        *,
        caching: bool = True,
        events: bool = True,
        log_stats: bool = True,
        use_int: bool = True,
        algo: str = "sha256",
        seed: str | None = None,
        max_model_len: int = 1 << 20,
    ) -> None:
        self.block_size = block_size
        # vLLM builds no hasher (and runs no init_none_hash) when prefix caching is off.
        self.ctx = init_none_hash(algo, seed) if caching else None
        self.hasher = get_request_block_hasher(block_size, self.ctx) if caching else None
        self.mgr = KVCacheManager(
            num_blocks,
            block_size,
            max_model_len=max_model_len,
            enable_caching=caching,
            enable_kv_cache_events=events,
            log_stats=log_stats,
            use_int_block_hashes=use_int,
        )
        self.pool = self.mgr.block_pool

    def request(self, rid: str, tokens: Sequence[int], **kw) -> Request:
        return Request(rid, tokens, self.hasher, **kw)

    def admit(self, req: Request, max_new: int | None = None) -> tuple[int, list[int]] | None:
        """Lookup (first chunk only), allocate_slots, then stats on success.

        Returns (hit tokens, new block ids), or None when allocate_slots refused.
        """
        first = req.num_computed_tokens == 0
        if first:
            hit_blocks, hit, _ = self.mgr.get_computed_blocks(req)
        else:
            hit_blocks, hit = None, 0
        remaining = req.num_tokens - req.num_computed_tokens - hit
        num_new = remaining if max_new is None else min(max_new, remaining)
        new = self.mgr.allocate_slots(req, num_new, hit, hit_blocks)
        if new is None:
            return None
        if first:
            self.mgr.record_prefix_cache_stats(req, hit)
        req.num_computed_tokens += hit + num_new
        req.status = RequestStatus.RUNNING
        return hit, ids(new)

    def decode(self, req: Request, tokens: Sequence[int]) -> list[int] | None:
        """Append sampled tokens, then allocate slots for every pending token."""
        req.append_output_token_ids(list(tokens))
        new = self.mgr.allocate_slots(req, req.num_tokens - req.num_computed_tokens)
        if new is None:
            return None
        req.num_computed_tokens = req.num_tokens
        return ids(new)

    def finish(self, req: Request) -> None:
        self.mgr.free(req)
        req.status = RequestStatus.FINISHED_STOPPED

    def preempt(self, req: Request) -> None:
        self.mgr.free(req)
        req.num_computed_tokens = 0
        req.num_preemptions += 1
        req.status = RequestStatus.PREEMPTED

    def free_ids(self) -> list[int]:
        return [b.block_id for b in self.pool.free_block_queue.get_all_free_blocks()]

    def table(self, req: Request) -> list[int]:
        return self.mgr.get_block_ids(req.request_id)[0]


def ids(blocks: KVCacheBlocks) -> list[int]:
    return blocks.get_block_ids()[0]
