"""The per-KV-cache-group manager (vllm/v1/core/single_type_kv_cache_manager.py).

vLLM has one such manager per KV cache group (full attention, sliding window, Mamba, ...), and
a coordinator (kv_cache_coordinator.py) that asks every group. Only full attention is modelled;
the base class holds what every group shares, so a sliding-window group adds its own
``find_longest_cache_hit`` and skipped-block rules next to `FullAttentionManager`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from explorer.core.block_pool import BlockPool
from explorer.core.hashing import BlockHash
from explorer.core.kv_cache_observer import KVCacheObserver
from explorer.core.kv_cache_utils import KVCacheBlock, find_cached_prefix

if TYPE_CHECKING:
    from explorer.core.request import Request


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class SingleTypeKVCacheManager:
    kind = "unknown"  # BlockStored.kv_cache_spec_kind of this group
    sliding_window: int | None = None

    def __init__(
        self,
        block_pool: BlockPool,
        block_size: int,
        kv_cache_group_id: int = 0,
        enable_caching: bool = True,
        observer: KVCacheObserver | None = None,
    ) -> None:
        self.block_pool = block_pool
        self.observer = observer
        self.block_size = block_size
        self.kv_cache_group_id = kv_cache_group_id
        self.enable_caching = enable_caching
        # request id -> its blocks in token order (the block table)
        self.req_to_blocks: dict[str, list[KVCacheBlock]] = {}
        # request id -> how many of its leading blocks are cached (hit or given a hash)
        self.num_cached_block: dict[str, int] = {}

    def get_num_blocks_to_allocate(
        self, request_id: str, num_tokens: int, new_computed_blocks: Sequence[KVCacheBlock]
    ) -> int:
        """Blocks this step takes from the free queue (single_type:178-268).

        New blocks for the slots, *plus* every hit block that is free now: touching it takes it
        out of the free queue just as surely as popping a new block does.
        """
        num_new, num_evictable = self.get_num_new_and_evictable_blocks(request_id, num_tokens, new_computed_blocks)
        return num_new + num_evictable

    def get_num_new_and_evictable_blocks(
        self, request_id: str, num_tokens: int, new_computed_blocks: Sequence[KVCacheBlock]
    ) -> tuple[int, int]:
        """The two terms of `get_num_blocks_to_allocate`, apart (the admission check reports both)."""
        num_required = cdiv(num_tokens, self.block_size)
        num_req_blocks = len(self.req_to_blocks.get(request_id, ()))
        if request_id in self.num_cached_block:  # running: no new hits to adopt
            return max(num_required - num_req_blocks, 0), 0
        num_new = max(num_required - (len(new_computed_blocks) + num_req_blocks), 0)
        return num_new, self.get_num_evictable_blocks(new_computed_blocks)

    @staticmethod
    def get_num_evictable_blocks(blocks: Sequence[KVCacheBlock]) -> int:
        """Hit blocks that sit in the free queue now: touching them takes them out of it."""
        return sum(1 for b in blocks if b.ref_cnt == 0 and not b.is_null)

    def add_local_computed_blocks(self, request_id: str, new_computed_blocks: Sequence[KVCacheBlock]) -> None:
        """Adopt the hit blocks: touch them (ref_cnt + 1) and put them at the head of the
        request's block table. They are already cached, so they are never cached again."""
        req_blocks = self.req_to_blocks.setdefault(request_id, [])
        assert not req_blocks
        if self.enable_caching:
            self.block_pool.touch(new_computed_blocks)
        req_blocks.extend(new_computed_blocks)
        self.num_cached_block[request_id] = len(req_blocks)

    def allocate_external_computed_blocks(self, request_id: str, num_total_computed_tokens: int) -> None:
        """Pop blocks for the connector's tokens up to ``num_total_computed_tokens``; they
        are not cached until their KV is there (single_type:329-367)."""
        req_blocks = self.req_to_blocks.setdefault(request_id, [])
        num_new = max(0, cdiv(num_total_computed_tokens, self.block_size) - len(req_blocks))
        req_blocks.extend(self.block_pool.get_new_blocks(num_new))

    def allocate_new_blocks(self, request_id: str, num_tokens: int) -> list[KVCacheBlock]:
        """Pop enough blocks from the free-queue head to hold ``num_tokens`` slots."""
        req_blocks = self.req_to_blocks.setdefault(request_id, [])
        num_new = cdiv(num_tokens, self.block_size) - len(req_blocks)
        if num_new <= 0:
            return []
        new_blocks = self.block_pool.get_new_blocks(num_new)
        req_blocks.extend(new_blocks)
        return new_blocks

    def cache_blocks(self, request: Request, num_tokens: int) -> None:
        """Hash every block that is full within the first ``num_tokens`` tokens."""
        num_cached = self.num_cached_block.get(request.request_id, 0)
        if self.observer is not None:
            self.observer.on_cache_blocks(request.request_id, self.kv_cache_group_id, num_tokens, num_cached)
        num_full = num_tokens // self.block_size
        if num_cached >= num_full:
            return
        self.block_pool.cache_full_blocks(
            request,
            self.req_to_blocks[request.request_id],
            num_cached,
            num_full,
            self.block_size,
            self.kv_cache_group_id,
        )
        self.num_cached_block[request.request_id] = num_full

    def free(self, request_id: str) -> None:
        """Return the request's blocks in *reverse* order, so the tail of its chain is evicted
        before its head (a shared system prompt at the head survives longest)."""
        self.block_pool.free_blocks(reversed(self.pop_blocks_for_free(request_id)))

    def pop_blocks_for_free(self, request_id: str) -> list[KVCacheBlock]:
        """Forget the request's blocks and hand them over, in table order, still held."""
        self.num_cached_block.pop(request_id, None)
        return self.req_to_blocks.pop(request_id, [])

    def find_longest_cache_hit(
        self, block_hashes: Sequence[BlockHash], max_length: int, use_eagle: bool = False
    ) -> list[KVCacheBlock]:
        raise NotImplementedError


class FullAttentionManager(SingleTypeKVCacheManager):
    kind = "full_attention"

    def find_longest_cache_hit(
        self, block_hashes: Sequence[BlockHash], max_length: int, use_eagle: bool = False
    ) -> list[KVCacheBlock]:
        """Walk the hashes from block 0 and stop at the first miss (single_type:747-843).

        Chaining makes a miss final: every later hash includes the missed one. At most
        ``max_length // block_size`` blocks are probed. With EAGLE the last hit block is
        dropped (single_type:834-839): the drafter needs the hidden states of the last
        matched position, which only a recompute of that block produces.
        """
        pool, gid = self.block_pool, self.kv_cache_group_id
        group_ids = [gid]

        def lookup(block_hash: BlockHash) -> KVCacheBlock | None:
            cached = pool.get_cached_block(block_hash, group_ids)
            return None if cached is None else cached[0]

        observer = self.observer
        on_probe = None
        if observer is not None:

            def on_probe(index: int, block: KVCacheBlock | None) -> None:
                observer.on_lookup_probe(gid, index, None if block is None else block.block_id)

        hits = find_cached_prefix(block_hashes[: max_length // self.block_size], lookup, on_probe)
        if use_eagle and hits:
            if observer is not None:
                observer.on_eagle_drop(gid, len(hits) - 1, hits[-1].block_id)
            hits.pop()
        return hits
