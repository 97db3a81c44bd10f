"""The coordinator: how the manager asks every KV cache group (vllm/v1/core/kv_cache_coordinator.py).

`KVCacheManager` never talks to a per-group manager itself. Every call goes through a
coordinator, which holds the one `BlockPool` that all groups share (so block ids are unique
across groups, coordinator.py:96-102) and one `SingleTypeKVCacheManager` per group, and fans
each call out to them in group order. What differs between coordinators is the lookup:

- `UnitaryKVCacheCoordinator`: one group; its longest hit is the request's.
- A `HybridKVCacheCoordinator` (several groups, e.g. full attention + sliding window) must find
  one hit length that every group accepts, by a fixed point over the groups
  (coordinator.py:842-977). It fills the same interface: ``find_longest_cache_hit``.

Blocks travel as one list per group, in group order: ``tuple[list[KVCacheBlock], ...]``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING

from explorer.core.block_pool import BlockPool
from explorer.core.errors import ConfigError
from explorer.core.hashing import BlockHash
from explorer.core.kv_cache_observer import KVCacheObserver
from explorer.core.kv_cache_utils import KVCacheBlock
from explorer.core.single_type_kv_cache_manager import FullAttentionManager, SingleTypeKVCacheManager

if TYPE_CHECKING:
    from explorer.core.request import Request

GroupBlocks = tuple[Sequence[KVCacheBlock], ...]


class KVCacheCoordinator(ABC):
    """What every coordinator does: fan each manager call out to the groups, in group order."""

    def __init__(
        self,
        block_pool: BlockPool,
        single_type_managers: Sequence[SingleTypeKVCacheManager],
        enable_caching: bool,
        use_eagle: bool = False,
    ) -> None:
        self.block_pool = block_pool
        self.single_type_managers = tuple(single_type_managers)
        self.enable_caching = enable_caching
        # EAGLE-family speculative decoding: every group drops its last hit block (coordinator.py:104-110)
        self.use_eagle = use_eagle

    @property
    def num_groups(self) -> int:
        return len(self.single_type_managers)

    def empty_blocks(self) -> tuple[list[KVCacheBlock], ...]:
        return tuple([] for _ in self.single_type_managers)

    def get_num_blocks_to_allocate(self, request_id: str, num_tokens: int, new_computed_blocks: GroupBlocks) -> int:
        """Blocks the admission check needs from the free queue, summed over the groups."""
        return sum(
            m.get_num_blocks_to_allocate(request_id, num_tokens, hits)
            for m, hits in zip(self.single_type_managers, new_computed_blocks, strict=True)
        )

    def get_num_new_and_evictable_blocks(
        self, request_id: str, num_tokens: int, new_computed_blocks: GroupBlocks
    ) -> tuple[int, int]:
        """The two terms of `get_num_blocks_to_allocate`, each summed over the groups."""
        num_new = num_evictable = 0
        for m, hits in zip(self.single_type_managers, new_computed_blocks, strict=True):
            new, evictable = m.get_num_new_and_evictable_blocks(request_id, num_tokens, hits)
            num_new += new
            num_evictable += evictable
        return num_new, num_evictable

    def allocate_new_computed_blocks(self, request_id: str, new_computed_blocks: GroupBlocks) -> None:
        """Touch every group's hits before anything is popped (coordinator.py:238-282), so a
        request can never evict its own hits."""
        for m, hits in zip(self.single_type_managers, new_computed_blocks, strict=True):
            m.add_local_computed_blocks(request_id, hits)

    def allocate_external_computed_blocks(self, request_id: str, num_total_computed_tokens: int) -> None:
        """Blocks for a KV connector's tokens after the local hit, in every group, once every
        group's hits are touched (coordinator.py:275-282)."""
        for m in self.single_type_managers:
            m.allocate_external_computed_blocks(request_id, num_total_computed_tokens)

    def allocate_new_blocks(self, request_id: str, num_tokens: int) -> tuple[list[KVCacheBlock], ...]:
        return tuple(m.allocate_new_blocks(request_id, num_tokens) for m in self.single_type_managers)

    def cache_blocks(self, request: Request, num_computed_tokens: int) -> None:
        """Hash the blocks that are full within the first ``num_computed_tokens`` tokens."""
        for m in self.single_type_managers:
            m.cache_blocks(request, num_computed_tokens)

    def free(self, request_id: str) -> None:
        for m in self.single_type_managers:
            m.free(request_id)

    def pop_blocks_for_free(self, request_id: str) -> list[KVCacheBlock]:
        """Every group's blocks of the request, in group then table order, forgotten here."""
        return [b for m in self.single_type_managers for b in m.pop_blocks_for_free(request_id)]

    def get_blocks(self, request_id: str) -> tuple[list[KVCacheBlock], ...]:
        """Each group's block table of the request (a copy)."""
        return tuple(list(m.req_to_blocks.get(request_id, ())) for m in self.single_type_managers)

    def reset_prefix_cache(self) -> bool:
        """One pool for every group, so one reset (coordinator.py:380-385)."""
        return self.block_pool.reset_prefix_cache()

    @abstractmethod
    def find_longest_cache_hit(
        self, block_hashes: Sequence[BlockHash], max_cache_hit_length: int
    ) -> tuple[tuple[list[KVCacheBlock], ...], int]:
        """Each group's hit blocks and the hit length in tokens that every group accepts."""


class UnitaryKVCacheCoordinator(KVCacheCoordinator):
    """One KV cache group (every full-attention model): its longest hit is the answer."""

    def __init__(
        self, block_pool: BlockPool, manager: SingleTypeKVCacheManager, enable_caching: bool, use_eagle: bool = False
    ) -> None:
        super().__init__(block_pool, (manager,), enable_caching, use_eagle)
        self.block_size = manager.block_size

    def find_longest_cache_hit(
        self, block_hashes: Sequence[BlockHash], max_cache_hit_length: int
    ) -> tuple[tuple[list[KVCacheBlock], ...], int]:
        (manager,) = self.single_type_managers
        hits = manager.find_longest_cache_hit(block_hashes, max_cache_hit_length, self.use_eagle)
        return (hits,), len(hits) * self.block_size


def get_kv_cache_coordinator(
    block_pool: BlockPool,
    block_size: int,
    enable_caching: bool,
    num_groups: int = 1,
    observer: KVCacheObserver | None = None,
    use_eagle: bool = False,
) -> KVCacheCoordinator:
    """The coordinator for the groups (coordinator.py:1014-1072). With caching off vLLM builds a
    coordinator without lookup; here the manager skips the lookup, so one group is unitary."""
    if num_groups != 1:
        raise ConfigError(f"only one KV cache group (full attention) is modelled, got {num_groups}")
    manager = FullAttentionManager(block_pool, block_size, 0, enable_caching, observer)
    return UnitaryKVCacheCoordinator(block_pool, manager, enable_caching, use_eagle)
