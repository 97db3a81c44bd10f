"""The coordinator: how the manager asks every KV cache group (vllm/v1/core/kv_cache_coordinator.py).

`KVCacheManager` never talks to a per-group manager itself. Every call goes through a
coordinator, which holds the one `BlockPool` that all groups share (so block ids are unique
across groups, coordinator.py:96-102) and one `SingleTypeKVCacheManager` per group, and fans
each call out to them in group order. What differs between coordinators is the lookup:

- `UnitaryKVCacheCoordinator`: one group; its longest hit is the request's.
- `HybridKVCacheCoordinator`: several groups (e.g. full attention + sliding window) must
  agree on one hit length, found by a fixed point over the groups.

Blocks travel as one list per group, in group order: ``tuple[list[KVCacheBlock], ...]``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING

from explorer.core.block_pool import BlockPool
from explorer.core.errors import ConfigError
from explorer.core.hashing import BlockHash
from explorer.core.kv_cache_interface import FULL_ATTENTION, KVCacheSpec
from explorer.core.kv_cache_observer import GroupCall, KVCacheObserver
from explorer.core.kv_cache_utils import KVCacheBlock
from explorer.core.release import VLLM_0_31, VllmRelease
from explorer.core.single_type_kv_cache_manager import FullAttentionManager, SingleTypeKVCacheManager, cdiv
from explorer.core.sliding_window_manager import SlidingWindowManager

if TYPE_CHECKING:
    from explorer.core.request import Request

GroupBlocks = tuple[Sequence[KVCacheBlock], ...]
# find_longest_cache_hit: each group's hit blocks, the reconciled hit, and the tokens of a
# shared prefix that a lagging group has not cached (0 unless hybrid).
CacheHit = tuple[tuple[list[KVCacheBlock], ...], int, int]


class KVCacheCoordinator(ABC):
    """What every coordinator does: fan each manager call out to the groups, in group order."""

    def __init__(
        self,
        block_pool: BlockPool,
        single_type_managers: Sequence[SingleTypeKVCacheManager],
        enable_caching: bool,
        use_eagle: bool = False,
        scheduler_block_size: int | None = None,
        retention_interval: int | None = 0,
    ) -> None:
        self.block_pool = block_pool
        self.single_type_managers = tuple(single_type_managers)
        self.enable_caching = enable_caching
        # EAGLE-family speculative decoding: no group is flagged, so all get the drop (L104-110).
        self.use_eagle = use_eagle
        self.eagle_group_ids = set(range(len(self.single_type_managers))) if use_eagle else set()
        self.scheduler_block_size = scheduler_block_size or self.single_type_managers[0].block_size
        # 0 = only the replay boundary's tail; None = dense; N = one tail per N tokens (L163-169).
        self.retention_interval = retention_interval
        # The calls of the last lookup (a report for the observer; empty for one group).
        self.last_calls: tuple[GroupCall, ...] = ()
        self.last_num_passes = 1

    @property
    def num_groups(self) -> int:
        return len(self.single_type_managers)

    def empty_blocks(self) -> tuple[list[KVCacheBlock], ...]:
        return tuple([] for _ in self.single_type_managers)

    def get_num_blocks_to_allocate(
        self,
        request_id: str,
        num_tokens: int,
        new_computed_blocks: GroupBlocks,
        total_computed_tokens: int = 0,
        apply_admission_cap: bool = False,
    ) -> int:
        """Blocks the admission check needs from the free queue, summed over the groups."""
        return sum(
            self.get_num_new_and_evictable_blocks(
                request_id, num_tokens, new_computed_blocks, total_computed_tokens, apply_admission_cap
            )
        )

    def get_num_new_and_evictable_blocks(
        self,
        request_id: str,
        num_tokens: int,
        new_computed_blocks: GroupBlocks,
        total_computed_tokens: int = 0,
        apply_admission_cap: bool = False,
    ) -> tuple[int, int]:
        """The two terms of `get_num_blocks_to_allocate`, each summed over the groups."""
        num_new = num_evictable = 0
        for m, hits in zip(self.single_type_managers, new_computed_blocks, strict=True):
            new, evictable = m.get_num_new_and_evictable_blocks(
                request_id, num_tokens, hits, total_computed_tokens, apply_admission_cap
            )
            num_new += new
            num_evictable += evictable
        return num_new, num_evictable

    def allocate_new_computed_blocks(
        self,
        request_id: str,
        new_computed_blocks: GroupBlocks,
        num_local_computed_tokens: int = 0,
        num_external_computed_tokens: int = 0,
    ) -> None:
        """Touch every group's hits before anything is popped, then pop every group's blocks
        for a KV connector's tokens after the local hit (coordinator.py:238-282), so a
        request can never evict its own hits. A running request has none to adopt."""
        if any(request_id in m.num_cached_block for m in self.single_type_managers):
            return
        for m, hits in zip(self.single_type_managers, new_computed_blocks, strict=True):
            m.add_local_computed_blocks(request_id, hits, num_local_computed_tokens, num_external_computed_tokens)
        if num_external_computed_tokens > 0:
            for m in self.single_type_managers:
                m.allocate_external_computed_blocks(request_id, num_local_computed_tokens, num_external_computed_tokens)

    def allocate_new_blocks(self, request_id: str, num_tokens: int) -> tuple[list[KVCacheBlock], ...]:
        return tuple(m.allocate_new_blocks(request_id, num_tokens) for m in self.single_type_managers)

    def get_replay_boundaries(self, request: Request) -> tuple[int, ...]:
        """Where a later request replaying this prompt can resume (coordinator.py:319-338): the
        resend of the same prompt stops at num_prompt - 1; with EAGLE one block earlier, at the
        resend's and at a longer sibling's last aligned block."""
        if not self.eagle_group_ids:
            return (request.num_prompt_tokens - 1,)
        block = self.scheduler_block_size
        resend = (request.num_prompt_tokens - 1) // block * block
        extension = request.num_prompt_tokens // block * block
        return tuple(sorted({max(resend - block, 0), max(extension - block, 0)}))

    def cache_blocks(self, request: Request, num_computed_tokens: int) -> None:
        """Hash the blocks that are full within the first ``num_computed_tokens`` tokens."""
        boundaries = self.get_replay_boundaries(request)
        for m in self.single_type_managers:
            m.cache_blocks(request, num_computed_tokens, self.retention_interval, boundaries)

    def remove_skipped_blocks(self, request_id: str, processed_computed_tokens: int) -> None:
        """Free every group's blocks that fell below its window (coordinator.py:433-454)."""
        for m in self.single_type_managers:
            m.remove_skipped_blocks(request_id, processed_computed_tokens)

    def free(self, request_id: str) -> None:
        for m in self.single_type_managers:
            m.free(request_id)

    def pop_blocks_for_free(self, request_id: str) -> list[KVCacheBlock]:
        """Every group's blocks of the request, in group then table order, forgotten here."""
        return [b for m in self.single_type_managers for b in m.pop_blocks_for_free(request_id)]

    def get_blocks(self, request_id: str) -> tuple[list[KVCacheBlock], ...]:
        """Each group's block table of the request (a copy)."""
        return tuple(list(m.req_to_blocks.get(request_id, ())) for m in self.single_type_managers)

    def miss_group_ids(self) -> list[int]:
        """The groups whose hash map says whether a hash is "in the cache" for a miss reason."""
        return [0]

    def reset_prefix_cache(self) -> bool:
        """One pool for every group, so one reset (coordinator.py:380-385)."""
        return self.block_pool.reset_prefix_cache()

    @abstractmethod
    def find_longest_cache_hit(self, block_hashes: Sequence[BlockHash], max_cache_hit_length: int) -> CacheHit:
        """Each group's hit blocks, the hit length every group accepts, and the uncached common prefix."""

    def find_longest_cache_hit_per_group(
        self, block_hashes: Sequence[BlockHash], max_cache_hit_length: int
    ) -> tuple[int, ...]:
        """Each group's own hit, alone (coordinator.py:979-1011); explanatory only."""
        out = []
        for i, m in enumerate(self.single_type_managers):
            m.quiet = True
            try:
                eagle = i in self.eagle_group_ids
                out.append(
                    m.find_longest_cache_hit(
                        block_hashes, max_cache_hit_length, None, eagle, self.scheduler_block_size
                    )[1]
                )
            finally:
                m.quiet = False
        return tuple(out)


class UnitaryKVCacheCoordinator(KVCacheCoordinator):
    """One KV cache group (every full-attention model): its longest hit is the answer."""

    def __init__(
        self,
        block_pool: BlockPool,
        manager: SingleTypeKVCacheManager,
        enable_caching: bool,
        use_eagle: bool = False,
        retention_interval: int | None = 0,
    ) -> None:
        super().__init__(block_pool, (manager,), enable_caching, use_eagle, manager.block_size, retention_interval)
        self.block_size = manager.block_size
        manager.use_eagle = use_eagle

    def find_longest_cache_hit(self, block_hashes: Sequence[BlockHash], max_cache_hit_length: int) -> CacheHit:
        (manager,) = self.single_type_managers
        hits, hit_length = manager.find_longest_cache_hit(
            block_hashes, max_cache_hit_length, [0], self.use_eagle, self.block_size
        )
        return hits, hit_length, 0


class SpecGroup:
    """Groups that share one spec, looked up together (coordinator.py:601-613)."""

    def __init__(self, spec: KVCacheSpec, group_ids: list[int], use_eagle: bool) -> None:
        self.spec = spec
        self.group_ids = group_ids
        self.use_eagle = use_eagle

    @property
    def is_full_attention(self) -> bool:
        return self.spec.kind == FULL_ATTENTION


class HybridKVCacheCoordinator(KVCacheCoordinator):
    """Several KV cache groups over one pool (coordinator.py:616-1011). A hit must hold in
    every group, so the lookup is a fixed point: each group may only shorten the candidate."""

    def __init__(
        self,
        block_pool: BlockPool,
        single_type_managers: Sequence[SingleTypeKVCacheManager],
        enable_caching: bool,
        use_eagle: bool,
        scheduler_block_size: int,
        hash_block_size: int,
        retention_interval: int | None = 0,
        release: VllmRelease = VLLM_0_31,
    ) -> None:
        super().__init__(
            block_pool, single_type_managers, enable_caching, use_eagle, scheduler_block_size, retention_interval
        )
        self.hash_block_size = hash_block_size
        self.eagle_lookup_to_hashed_length = release.eagle_lookup_to_hashed_length
        sizes = [m.block_size for m in self.single_type_managers]
        if any(bs % hash_block_size for bs in sizes):
            raise ConfigError(
                f"every KV cache group's block size must be a multiple of hash_block_size = {hash_block_size}, "
                f"got {sizes}"
            )
        for m in self.single_type_managers:
            m.cache_hit_alignment_tokens = scheduler_block_size
        # One spec group per distinct spec, full attention first (coordinator.py:737-794).
        self.attention_groups: list[SpecGroup] = []
        for i, m in enumerate(self.single_type_managers):
            eagle = i in self.eagle_group_ids
            for g in self.attention_groups:
                if g.spec == m.spec:
                    g.group_ids.append(i)
                    g.use_eagle = g.use_eagle or eagle
                    break
            else:
                self.attention_groups.append(SpecGroup(m.spec, [i], eagle))
        self.attention_groups.sort(key=lambda g: not g.is_full_attention)
        for g in self.attention_groups:
            if g.use_eagle:
                for gid in g.group_ids:
                    self.single_type_managers[gid].use_eagle = True

    def miss_group_ids(self) -> list[int]:
        """The full-attention group's ids (the first spec group otherwise): "in the cache"."""
        return list(self.attention_groups[0].group_ids)

    def cache_blocks(self, request: Request, num_computed_tokens: int) -> None:
        """Every group caches up to the last scheduler-block boundary; an EAGLE group one block
        further, since it matches one block past a boundary and drops it (coordinator.py:808-840)."""
        aligned = num_computed_tokens // self.scheduler_block_size * self.scheduler_block_size
        boundaries = self.get_replay_boundaries(request)
        for m in self.single_type_managers:
            n = aligned
            if m.use_eagle and aligned > 0:
                n = min(num_computed_tokens, aligned + m.block_size)
            m.cache_blocks(request, n, self.retention_interval, boundaries)

    def find_longest_cache_hit(self, block_hashes: Sequence[BlockHash], max_cache_hit_length: int) -> CacheHit:
        """The fixed point (coordinator.py:842-977): start at ``max_cache_hit_length``; each
        pass asks every spec group for at most the current candidate. Full attention is looked
        up once (its hits are downward-closed) and later only trimmed. A pass that changes
        nothing ends the loop; with two groups and full attention first ("simple hybrid") one
        pass is enough. Full-attention blocks are then truncated to the hit, and the longest
        single-group hit beyond it is the uncached common prefix."""
        num_groups = self.num_groups
        hit_length = max_cache_hit_length
        longest = 0
        blocks_by_group: list[list[KVCacheBlock] | None] = [None] * num_groups
        length_by_group = [0] * num_groups
        groups = self.attention_groups
        simple_hybrid = len(groups) == 2 and groups[0].is_full_attention
        eagle_verified: set[int] = set()
        # An EAGLE group matches one block past the candidate, then drops it: up to the lookup's
        # cap, max_cache_hit_length (coordinator.py:919-921), or under 0.33.0 up to the hashed
        # tokens, len(block_hashes) * hash_block_size (coordinator.py:882-885 in 0.33.0).
        hashed = len(block_hashes) * self.hash_block_size
        eagle_cap = hashed if self.eagle_lookup_to_hashed_length else max_cache_hit_length
        calls: list[GroupCall] = []
        passes = 0
        while True:
            passes += 1
            curr = hit_length
            for idx, g in enumerate(groups):
                first = g.group_ids[0]
                manager = self.single_type_managers[first]
                if g.is_full_attention and blocks_by_group[first] is not None:
                    curr = min(curr, length_by_group[first])
                    continue
                drop = g.use_eagle and idx not in eagle_verified
                max_length = min(curr + manager.block_size, eagle_cap) if drop else curr
                hits, new_length = manager.find_longest_cache_hit(
                    block_hashes, max_length, g.group_ids, drop, self.scheduler_block_size
                )
                calls.append(
                    GroupCall(
                        passes, tuple(g.group_ids), g.spec.kind, g.spec.sliding_window, max_length, new_length, drop
                    )
                )
                if drop:
                    eagle_verified.add(idx)
                elif new_length < curr:
                    eagle_verified.clear()
                curr = new_length
                for gid, blks in zip(g.group_ids, hits):
                    blocks_by_group[gid] = blks
                    length_by_group[gid] = new_length
                longest = max(longest, curr)
            if curr >= hit_length:
                break
            hit_length = curr
            if simple_hybrid:
                break
        for g in groups:
            if not g.is_full_attention:
                continue
            n = cdiv(hit_length, self.single_type_managers[g.group_ids[0]].block_size)
            for gid in g.group_ids:
                if (trimmed := blocks_by_group[gid]) is not None:
                    del trimmed[n:]
        self.last_calls, self.last_num_passes = tuple(calls), passes
        hits_out = tuple(b if b is not None else [] for b in blocks_by_group)
        return hits_out, hit_length, longest - hit_length

    def find_longest_cache_hit_per_group(
        self, block_hashes: Sequence[BlockHash], max_cache_hit_length: int
    ) -> tuple[int, ...]:
        """Each spec group alone, at the full cap (coordinator.py:979-1011)."""
        out = [0] * self.num_groups
        for g in self.attention_groups:
            m = self.single_type_managers[g.group_ids[0]]
            n = max_cache_hit_length
            if g.use_eagle and self.eagle_lookup_to_hashed_length:  # coordinator.py:968-971 in 0.33.0
                n = min(n + m.block_size, len(block_hashes) * self.hash_block_size)
            m.quiet = True
            try:
                _, hit = m.find_longest_cache_hit(block_hashes, n, g.group_ids, g.use_eagle, self.scheduler_block_size)
            finally:
                m.quiet = False
            for gid in g.group_ids:
                out[gid] = hit
        return tuple(out)


def get_kv_cache_coordinator(
    block_pool: BlockPool,
    specs: Sequence[KVCacheSpec],
    enable_caching: bool,
    observer: KVCacheObserver | None = None,
    use_eagle: bool = False,
    scheduler_block_size: int | None = None,
    hash_block_size: int | None = None,
    retention_interval: int | None = 0,
    max_admission: Sequence[int | None] = (),
    release: VllmRelease = VLLM_0_31,
) -> KVCacheCoordinator:
    """The coordinator for the groups (coordinator.py:1014-1072): unitary for one group, hybrid
    for several. (With caching off vLLM builds one without lookup; the manager skips the
    lookup instead, and the coordinator is the same.)"""
    sbs = scheduler_block_size or specs[0].block_size
    managers: list[SingleTypeKVCacheManager] = []
    for i, spec in enumerate(specs):
        cls = FullAttentionManager if spec.kind == FULL_ATTENTION else SlidingWindowManager
        cap = max_admission[i] if i < len(max_admission) else None
        managers.append(cls(block_pool, spec, i, enable_caching, observer, sbs, cap, release))
    if len(managers) == 1:
        return UnitaryKVCacheCoordinator(block_pool, managers[0], enable_caching, use_eagle, retention_interval)
    return HybridKVCacheCoordinator(
        block_pool, managers, enable_caching, use_eagle, sbs, hash_block_size or sbs, retention_interval, release
    )
