"""BlockPool: every KV cache block, the free queue, and the prefix-cache hash map
(vllm/v1/core/block_pool.py, 0.31.0); its hash map is in block_hash_map.py.

The life of a block:
- ``get_new_blocks`` pops it from the free-queue head; if it still held a cached hash, that
  hash is evicted right then (one BlockRemoved). Its ref_cnt becomes 1.
- ``cache_full_blocks`` gives full blocks their hash and puts them in the map (one BlockStored
  per call) as soon as they are allocated, before the model has computed them.
- ``touch`` is a cache hit: ref_cnt + 1, and a free block leaves the queue.
- ``free_blocks`` drops ref_cnt; a block reaching 0 keeps its hash and goes back to the queue:
  to the head if it has no hash (nothing to lose), to the tail if it has one (LRU).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from explorer.core.block_hash_map import BlockHashToBlockMap
from explorer.core.errors import ConfigError
from explorer.core.events import MEDIUM_GPU, AllBlocksCleared, BlockRemoved, BlockStored, KVCacheEvent
from explorer.core.hashing import (
    BlockHash,
    BlockHashWithGroupId,
    get_block_hash,
    get_group_id,
    make_block_hash_with_group_id,
    maybe_convert_block_hash,
)
from explorer.core.kv_cache_observer import FreedTo, KVCacheObserver
from explorer.core.kv_cache_utils import (
    FreeKVCacheBlockQueue,
    KVCacheBlock,
    generate_block_hash_extra_keys,
    resolve_block_hashes,
    to_event_extra_keys,
)

if TYPE_CHECKING:
    from explorer.core.request import Request

__all__ = ["BlockHashToBlockMap", "BlockPool"]


class BlockPool:
    def __init__(
        self,
        num_gpu_blocks: int,
        enable_caching: bool = True,
        enable_kv_cache_events: bool = False,
        use_int_block_hashes: bool = True,
        observer: KVCacheObserver | None = None,
        hash_block_size: int | None = None,
        num_hash_lookahead_tokens: int = 0,
    ) -> None:
        if not isinstance(num_gpu_blocks, int) or num_gpu_blocks < 2:
            raise ConfigError(f"num_blocks must be an integer >= 2 (block 0 is the null block), got {num_gpu_blocks!r}")
        self.num_gpu_blocks = num_gpu_blocks
        self.enable_caching = enable_caching
        self.enable_kv_cache_events = enable_kv_cache_events
        # Plays VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES (default on): events carry 64-bit ints.
        self.use_int_block_hashes = use_int_block_hashes
        self.medium = MEDIUM_GPU
        self.blocks = [KVCacheBlock(i) for i in range(num_gpu_blocks)]
        self.free_block_queue = FreeKVCacheBlockQueue(self.blocks)
        self.cached_block_hash_to_block = BlockHashToBlockMap()
        # A block's keys beyond its own hash: partial tail entries (block_pool.py:449-566).
        self.cached_block_hashes_by_block: dict[int, dict[BlockHashWithGroupId, None]] = {}
        # Block 0 is a placeholder for skipped slots; its ref_cnt is not maintained.
        self.null_block = self.free_block_queue.popleft()
        self.null_block.is_null = True
        self.kv_event_queue: list[KVCacheEvent] = []
        self.observer = observer
        self.block_observer = observer if observer is not None and observer.block_reports else None
        # The block size the request hasher hashes at; a group with larger blocks reads a view.
        self.hash_block_size = hash_block_size
        # vLLM 0.33's EAGLE lookahead hashes: tokens past each block its hash and event cover.
        self.num_hash_lookahead_tokens = num_hash_lookahead_tokens

    # ---- lookup ----------------------------------------------------------------------------

    def get_cached_block(self, block_hash: BlockHash, kv_cache_group_ids: Sequence[int]) -> list[KVCacheBlock] | None:
        """One cached block per group for this hash, or None if any group misses."""
        out = []
        for gid in kv_cache_group_ids:
            block = self.cached_block_hash_to_block.get_one_block(make_block_hash_with_group_id(block_hash, gid))
            if block is None:
                return None
            out.append(block)
        return out

    # ---- caching ---------------------------------------------------------------------------

    def cache_full_blocks(
        self,
        request: Request,
        blocks: Sequence[KVCacheBlock],
        num_cached_blocks: int,
        num_full_blocks: int,
        block_size: int,
        kv_cache_group_id: int,
        block_mask: Sequence[bool] | None = None,
    ) -> None:
        """Give ``blocks[num_cached_blocks:num_full_blocks]`` their hashes and queue one
        BlockStored for all of them (block_pool.py:226-344). Null blocks, and blocks whose
        ``block_mask`` entry is False (a window group's retention), get no hash; the event's
        ``token_ids`` still cover the whole range."""
        if num_cached_blocks >= num_full_blocks:
            return
        hashes: Sequence[BlockHash] = request.block_hashes
        if self.hash_block_size is not None and self.hash_block_size != block_size:
            hashes = resolve_block_hashes(hashes, self.hash_block_size, block_size)
        use_int = self.use_int_block_hashes
        observer = self.block_observer
        new_hashes: list[bytes | int] = []
        extra_keys: list[tuple[Any, ...] | None] = []
        la = self.num_hash_lookahead_tokens
        lookahead: list[list[int]] | None = [] if la else None
        # The key is digest + 4-byte group id (make_block_hash_with_group_id), built inline:
        # this loop runs once per cached block and dominates long replays.
        group_suffix = make_block_hash_with_group_id(BlockHash(b""), kv_cache_group_id)
        for i in range(num_cached_blocks, num_full_blocks):
            blk = blocks[i]
            if blk.is_null or (block_mask is not None and not block_mask[i - num_cached_blocks]):
                continue
            block_hash = hashes[i]
            key = BlockHashWithGroupId(block_hash + group_suffix)
            # A block that already holds this key (a hit) is left alone; one holding only a
            # partial tail entry is promoted: its old keys go (block_pool.py:286-294).
            if blk._block_hash != key:
                if blk._block_hash is not None:
                    self._emit_removed(self._remove_cached_block_hashes(blk))
                blk.set_block_hash(key, (i + 1) * block_size)
                self.cached_block_hash_to_block.insert(key, blk)
            if observer is not None:
                same = self.cached_block_hash_to_block.get_all_blocks(key)
                observer.on_cache(blk.block_id, i, block_hash, tuple(b.block_id for b in same if b is not blk))
            if self.enable_kv_cache_events:
                new_hashes.append(maybe_convert_block_hash(block_hash, use_int))
                start = i * block_size
                extra_keys.append(self._event_extra_keys(request, start, start + block_size))
                if lookahead is not None:
                    lookahead.append(request.all_token_ids[start + block_size : start + block_size + la])
        if not self.enable_kv_cache_events:
            return
        parent = None if num_cached_blocks == 0 else maybe_convert_block_hash(hashes[num_cached_blocks - 1], use_int)
        lora = request.lora_request
        self.kv_event_queue.append(
            BlockStored(
                block_hashes=new_hashes,
                parent_block_hash=parent,
                token_ids=request.all_token_ids[num_cached_blocks * block_size : num_full_blocks * block_size],
                block_size=block_size,
                lora_id=lora.adapter_id if lora else None,
                medium=self.medium,
                lora_name=lora.name if lora else None,
                extra_keys=to_event_extra_keys(extra_keys),
                group_idx=kv_cache_group_id,
                lookahead_token_ids=lookahead,
            )
        )

    def _event_extra_keys(self, request: Request, start: int, end: int) -> tuple[Any, ...] | None:
        """An event's extra keys cover the same window as the block's hash (the lookahead
        tokens included: _generate_event_extra_keys, block_pool.py:358-366 in 0.33.0)."""
        return generate_block_hash_extra_keys(request, start, end + self.num_hash_lookahead_tokens)

    def cache_partial_block(
        self, request: Request, block: KVCacheBlock, num_tokens: int, kv_cache_group_id: int
    ) -> None:
        """Register the prefix hash at ``num_tokens`` (a hash-block boundary inside ``block``)
        as a partial entry of ``block`` (block_pool.py:449-566): a full-attention group whose
        blocks are larger than the hash block caches the prompt's tail this way. The key is
        the block's own hash if it has none, else one more key of it; one BlockStored of one
        hash block."""
        if block.is_null:
            return
        hbs = self.hash_block_size or 1
        n = num_tokens // hbs
        digest = request.block_hashes[n - 1]
        key = make_block_hash_with_group_id(digest, kv_cache_group_id)
        extra = self.cached_block_hashes_by_block.get(block.block_id, {})
        already = block._block_hash == key or key in extra
        if not already and block._block_hash is not None and (block.block_hash_num_tokens or 0) < n * hbs:
            self._emit_removed(self._remove_cached_block_hashes(block))
        if block._block_hash is None:
            block.set_block_hash(key, n * hbs)
            self.cached_block_hash_to_block.insert(key, block)
        elif not already:
            self.cached_block_hashes_by_block.setdefault(block.block_id, {})[key] = None
            self.cached_block_hash_to_block.insert(key, block)
        if self.enable_kv_cache_events and not already:
            use_int = self.use_int_block_hashes
            start = (n - 1) * hbs
            parent = maybe_convert_block_hash(request.block_hashes[n - 2], use_int) if n > 1 else None
            lora = request.lora_request
            self.kv_event_queue.append(
                BlockStored(
                    block_hashes=[maybe_convert_block_hash(digest, use_int)],
                    parent_block_hash=parent,
                    token_ids=request.all_token_ids[start : n * hbs],
                    block_size=hbs,
                    lora_id=lora.adapter_id if lora else None,
                    medium=self.medium,
                    lora_name=lora.name if lora else None,
                    extra_keys=to_event_extra_keys([generate_block_hash_extra_keys(request, start, n * hbs)]),
                    group_idx=kv_cache_group_id,
                    # A partial entry gets its lookahead too (block_pool.py:582-599 in 0.33.0).
                    lookahead_token_ids=[request.all_token_ids[n * hbs : n * hbs + self.num_hash_lookahead_tokens]]
                    if self.num_hash_lookahead_tokens
                    else None,
                )
            )

    def _remove_cached_block_hashes(self, block: KVCacheBlock) -> list[BlockHashWithGroupId]:
        """Every key of the block out of the map (its own first), and its hash dropped."""
        keys = [] if block._block_hash is None else [block._block_hash]
        keys.extend(self.cached_block_hashes_by_block.pop(block.block_id, {}))
        removed = [k for k in keys if self.cached_block_hash_to_block.pop(k, block.block_id) is not None]
        block.reset_hash()
        return removed

    def _emit_removed(self, keys: Sequence[BlockHashWithGroupId]) -> None:
        if not self.enable_kv_cache_events:
            return
        for key in keys:
            self.kv_event_queue.append(
                BlockRemoved(
                    block_hashes=[maybe_convert_block_hash(get_block_hash(key), self.use_int_block_hashes)],
                    medium=self.medium,
                    group_idx=get_group_id(key),
                )
            )

    # ---- allocation and eviction -----------------------------------------------------------

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        """Pop ``num_blocks`` from the free-queue head, evicting any hash they still hold."""
        if num_blocks > self.get_num_free_blocks():
            raise ValueError(f"Cannot get {num_blocks} free blocks from the pool")
        ret = self.free_block_queue.popleft_n(num_blocks)
        observer = self.block_observer
        gone: list[BlockHashWithGroupId] | None = [] if self.observer is not None else None
        plain = observer is None and not self.enable_kv_cache_events and not self.cached_block_hashes_by_block
        if plain:
            self._evict_plain(ret, gone)
        else:
            self._evict_reported(ret, gone, observer)
        if gone and self.observer is not None:  # a hash is gone only when its last duplicate goes
            keys = tuple(gone) if plain else self.cached_block_hash_to_block.missing(gone)
            self.observer.on_hashes_removed(keys, "evicted")
        return ret

    def _evict_plain(self, ret: list[KVCacheBlock], gone: list[BlockHashWithGroupId] | None) -> None:
        """`_evict_reported` when no block report, no event and no partial tail entry can
        result: each cached block's one key leaves the map, as _maybe_evict_cached_block would
        remove it (this loop runs once per allocated block of a long replay). ``gone``
        collects the keys no block is cached under any more."""
        pop = self.cached_block_hash_to_block.pop_last  # one probe of the map a block, not `pop` + a lookup
        caching = self.enable_caching
        for block in ret:
            key = block._block_hash
            if caching and key is not None:
                if pop(key, block.block_id) and gone is not None:
                    gone.append(key)
                block._block_hash = block.block_hash_num_tokens = None  # reset_hash, inlined
            assert block.ref_cnt == 0
            block.ref_cnt = 1

    def _evict_reported(
        self, ret: list[KVCacheBlock], gone: list[BlockHashWithGroupId] | None, observer: KVCacheObserver | None
    ) -> None:
        for block in ret:
            if observer is not None:
                key = block.block_hash
                observer.on_pop(block.block_id, None if key is None else get_block_hash(key))
            if self.enable_caching and block._block_hash is not None:
                self._maybe_evict_cached_block(block, gone)
            assert block.ref_cnt == 0
            block.ref_cnt = 1

    def _maybe_evict_cached_block(self, block: KVCacheBlock, gone: list[BlockHashWithGroupId] | None) -> bool:
        """Drop the block's keys from the map (one copy of a duplicate) and announce each;
        ``gone`` (for the observer) collects the keys removed."""
        removed = self._remove_cached_block_hashes(block)
        self._emit_removed(removed)
        if gone is not None:
            gone += removed
        return bool(removed)

    def evict_blocks(self, block_ids: set[int]) -> None:
        """Drop each block's hash (a failed KV load: its KV is bad), keeping its ref count and
        its place in the free queue (block_pool.py:810-828)."""
        gone: list[BlockHashWithGroupId] | None = [] if self.observer is not None else None
        for block_id in block_ids:
            if not 0 <= block_id < len(self.blocks):
                raise ValueError(f"invalid block id {block_id}: the connector reported a block never allocated")
            self._maybe_evict_cached_block(self.blocks[block_id], gone)
        if gone and self.observer is not None:
            self.observer.on_hashes_removed(self.cached_block_hash_to_block.missing(gone), "failed_load")

    def touch(self, blocks: Sequence[KVCacheBlock]) -> None:
        """A cache hit: a free block leaves the queue, and every block gets ref_cnt + 1."""
        observer = self.block_observer
        for block in blocks:
            was_free = block.ref_cnt == 0 and not block.is_null
            if was_free:
                self.free_block_queue.remove(block)
            block.ref_cnt += 1
            if observer is not None:
                observer.on_touch(block.block_id, was_free)

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        """Release blocks given in eviction order (a request passes its blocks reversed).

        Blocks reaching ref_cnt 0 keep their hash. Unhashed ones go to the *front* of the
        queue, to be reused first (they can never be hit); hashed ones to the *back*, so the
        least recently freed cached block is evicted first. No event: the KV is still valid.
        """
        evict_first: list[KVCacheBlock] = []
        evict_last: list[KVCacheBlock] = []
        observer = self.block_observer
        for block in ordered_blocks:
            block.ref_cnt -= 1
            if block.ref_cnt == 0 and not block.is_null:
                if block._block_hash is None or not self.enable_caching:
                    evict_first.append(block)
                    freed_to = FreedTo.FRONT
                else:
                    evict_last.append(block)
                    freed_to = FreedTo.BACK
            else:
                freed_to = FreedTo.HELD
            if observer is not None and not block.is_null:
                observer.on_free(block.block_id, block.ref_cnt, freed_to)
        self.free_block_queue.prepend_n(evict_first)
        self.free_block_queue.append_n(evict_last)

    def reset_prefix_cache(self) -> bool:
        """Forget every hash, only when no block but the null block is in use.

        One AllBlocksCleared and no BlockRemoved; the free-queue order is unchanged.
        """
        if self.num_gpu_blocks - self.get_num_free_blocks() != 1:
            return False
        if self.observer is not None:
            self.observer.on_prefix_cache_reset(tuple(k for k, _ in self.cached_block_hash_to_block.items()))
        self.cached_block_hash_to_block = BlockHashToBlockMap()
        self.cached_block_hashes_by_block.clear()
        for block in self.blocks:
            block.reset_hash()
        if self.enable_kv_cache_events:
            self.kv_event_queue.append(AllBlocksCleared())
        return True

    # ---- accounting ------------------------------------------------------------------------

    def get_num_free_blocks(self) -> int:
        return self.free_block_queue.num_free_blocks

    def get_usage(self) -> float:
        """Fraction of the usable blocks (all but the null block) in use."""
        total = self.num_gpu_blocks - 1
        return 1.0 - self.get_num_free_blocks() / total if total else 0.0

    def take_events(self) -> list[KVCacheEvent]:
        if not self.enable_kv_cache_events:
            return []
        events, self.kv_event_queue = self.kv_event_queue, []
        return events
