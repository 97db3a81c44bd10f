"""BlockHashToBlockMap: the prefix-cache hash map of the BlockPool (vllm/v1/core/block_pool.py)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from explorer.core.hashing import BlockHash, BlockHashWithGroupId
from explorer.core.kv_cache_utils import KVCacheBlock


class BlockHashToBlockMap:
    """key -> block, or key -> {block_id: block} once a second block has the same key.

    Identical blocks are not de-duplicated (block_pool.py:35-133): a block id, once in a
    request's block table, never changes, so an identical block cached later is kept as a
    duplicate. A lookup returns the earliest-inserted survivor.
    """

    def __init__(self) -> None:
        self._cache: dict[BlockHashWithGroupId, KVCacheBlock | dict[int, KVCacheBlock]] = {}

    def get_one_block(self, key: BlockHashWithGroupId) -> KVCacheBlock | None:
        blocks = self._cache.get(key)
        if blocks is None:
            return None
        if isinstance(blocks, KVCacheBlock):
            return blocks
        return next(iter(blocks.values()))

    def insert(self, key: BlockHashWithGroupId, block: KVCacheBlock) -> None:
        blocks = self._cache.get(key)
        if blocks is None:
            self._cache[key] = block
        elif isinstance(blocks, KVCacheBlock):
            self._cache[key] = {blocks.block_id: blocks, block.block_id: block}
        else:
            blocks[block.block_id] = block

    def pop(self, key: BlockHashWithGroupId, block_id: int) -> KVCacheBlock | None:
        """Remove one block under ``key``; other copies of a duplicate stay."""
        blocks = self._cache.pop(key, None)
        if blocks is None:
            return None
        if isinstance(blocks, KVCacheBlock):
            if blocks.block_id == block_id:
                return blocks
            self._cache[key] = blocks
            return None
        block = blocks.pop(block_id, None)
        if blocks:
            self._cache[key] = blocks
        return block

    def cached_mask(self, hashes: Sequence[BlockHash], suffix: bytes) -> list[bool]:
        """For each hash, whether ``hash + suffix`` (its key in one group) is in the map."""
        cache = self._cache
        return [(h + suffix) in cache for h in hashes]

    def missing(self, keys: Sequence[BlockHashWithGroupId]) -> tuple[BlockHashWithGroupId, ...]:
        """The keys no block is cached under any more."""
        cache = self._cache
        return tuple(k for k in keys if k not in cache)

    def get_all_blocks(self, key: BlockHashWithGroupId) -> list[KVCacheBlock]:
        """Every block cached under ``key``, in insertion order."""
        blocks = self._cache.get(key)
        if blocks is None:
            return []
        return [blocks] if isinstance(blocks, KVCacheBlock) else list(blocks.values())

    def items(self) -> Iterable[tuple[BlockHashWithGroupId, list[KVCacheBlock]]]:
        """(key, blocks in insertion order) for every key."""
        for key, blocks in self._cache.items():
            yield key, [blocks] if isinstance(blocks, KVCacheBlock) else list(blocks.values())

    def __len__(self) -> int:
        return len(self._cache)
