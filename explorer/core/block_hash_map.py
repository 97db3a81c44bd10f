"""BlockHashToBlockMap: the prefix-cache hash map of the BlockPool (vllm/v1/core/block_pool.py)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import filterfalse
from typing import overload

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

    def pop_last(self, key: BlockHashWithGroupId, block_id: int) -> bool:
        """`pop` (the same re-insertion order), and whether that block was the last under ``key``."""
        blocks = self._cache.pop(key, None)
        if blocks is None:
            return False
        if isinstance(blocks, KVCacheBlock):
            if blocks.block_id == block_id:
                return True
            self._cache[key] = blocks
            return False
        blocks.pop(block_id, None)
        if blocks:
            self._cache[key] = blocks
            return False
        return True

    def lazy_mask(self, hashes: Sequence[BlockHash], suffixes: Sequence[bytes], whole_prefixes: bool) -> CachedMask:
        """For each hash, whether ``hash + suffix`` (its key in a group) is in the map for every
        suffix, probed only where it is read (a lookup report's mask)."""
        return CachedMask(self._cache, hashes, tuple(suffixes), whole_prefixes)

    def missing(self, keys: Sequence[BlockHashWithGroupId]) -> tuple[BlockHashWithGroupId, ...]:
        """The keys no block is cached under any more."""
        return tuple(filterfalse(self._cache.__contains__, keys))

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


class CachedMask(Sequence[bool]):
    """Whether each hash is in the map under every suffix (each a group's key), probed when read.

    A lookup report hands it over: it reads the map as it is, so it holds only during that call.
    Most of a long miss is never read (a block never cached tells the rest, see
    ``whole_prefixes``), so a replay that explains its misses probes a few blocks, not all.
    ``whole_prefixes``: the one group caches each request's blocks as a prefix (a single
    full-attention group), so a hash never cached has no block after it that ever was.
    """

    __slots__ = ("_cache", "_hashes", "_suffixes", "whole_prefixes")

    def __init__(
        self,
        cache: dict[BlockHashWithGroupId, KVCacheBlock | dict[int, KVCacheBlock]],
        hashes: Sequence[BlockHash],
        suffixes: tuple[bytes, ...],
        whole_prefixes: bool,
    ) -> None:
        self._cache = cache
        self._hashes = hashes
        self._suffixes = suffixes
        self.whole_prefixes = whole_prefixes

    def __len__(self) -> int:
        return len(self._hashes)

    @overload
    def __getitem__(self, i: int) -> bool: ...
    @overload
    def __getitem__(self, i: slice) -> list[bool]: ...
    def __getitem__(self, i: int | slice) -> bool | list[bool]:
        cache, suffixes = self._cache, self._suffixes
        if isinstance(i, slice):  # a run of blocks in one list comprehension
            if len(suffixes) == 1:
                (s,) = suffixes
                return [(h + s) in cache for h in self._hashes[i]]
            return [all((h + s) in cache for s in suffixes) for h in self._hashes[i]]
        h = self._hashes[i]
        return all((h + s) in cache for s in suffixes)

    def __iter__(self) -> Iterator[bool]:
        return iter(self[:])
