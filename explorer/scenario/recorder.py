"""What a replay keeps from the core: the observer's reports of one op, and the manager it builds.

`StepRecorder` observes the core (kv_cache_observer.py) during one op and keeps each report
as a typed record (records.py), in report order (snapshot.py freezes the pool and the live
requests). Both replays use them: manager-level scenarios (engine.py) and engine-step
scenarios (engine_steps.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from explorer.core.hashing import BlockHash, HashContext, init_none_hash
from explorer.core.kv_cache_manager import KVCacheManager
from explorer.core.kv_cache_observer import AdmissionCheck, FreedTo, GroupLookup, KVCacheObserver
from explorer.core.kv_cache_utils import generate_block_hash_extra_keys, get_request_block_hasher
from explorer.core.release import VLLM_0_31, VllmRelease
from explorer.core.request import Request
from explorer.core.sched.speculative import SpeculativeConfig
from explorer.errors import BadInput
from explorer.scenario.parse_groups import GroupsSpec
from explorer.scenario.records import (
    CacheCall,
    CachedBlock,
    DraftsVerified,
    EagleDropped,
    Freed,
    HashedBlock,
    Lookup,
    Popped,
    Record,
    Retention,
    SkippedFreed,
    Touched,
)
from explorer.scenario.spec import EngineConfig, Scenario


class StepError(BadInput):
    """A step the engine's state refuses (an id that is not live, nothing to compute, ...)."""


# The replay JSON's per-request block ids are the first KV cache group's (design sections 5, 8).
GROUP_0 = 0


def block_hasher(
    cfg: EngineConfig,
    hash_seed: str | None,
    hash_block_size: int | None = None,
    connector: bool = False,
    num_hash_lookahead_tokens: int = 0,
) -> tuple[HashContext | None, Callable[[Request], list[BlockHash]] | None]:
    """The engine's NONE_HASH context and request block hasher (at ``hash_block_size``, by
    default the block size); none with caching off and no KV connector (vLLM's EngineCore
    builds it for either, core.py:225-234). ``hash_seed`` overrides the scenario's: the
    resolved (maybe drawn) seed of an earlier replay, so that replaying again gives the same
    hashes."""
    if not cfg.enable_prefix_caching and not connector:
        return None, None
    seed = hash_seed if hash_seed is not None else (cfg.hash_seed or None)
    ctx = init_none_hash(cfg.hash_algo, seed)
    return ctx, get_request_block_hasher(hash_block_size or cfg.block_size, ctx, num_hash_lookahead_tokens)


def hash_lookahead(scenario: Scenario) -> int:
    """The scenario's lookahead tokens per block hash under its vLLM release (0 = legacy)."""
    spec = scenario.speculative
    if spec is None:
        return 0
    return spec.num_hash_lookahead_tokens(
        scenario.release.eagle_lookahead_hashes, scenario.engine.enable_prefix_caching, scenario.connector is not None
    )


class StepRecorder(KVCacheObserver):
    """Turns what the core reports during one op into typed records (records.py), appended to
    one list in report order: the panels select them by kind."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.clear()

    def clear(self) -> None:
        self._records: list[Record] = []
        self._probes: list[tuple[int, bool, int | None]] = []  # the lookup being walked, group 0
        # EAGLE drops, reported inside find_longest_cache_hit before the lookup names its
        # request (on_lookup): (block index, block id), emitted with the lookup.
        self._drops: list[tuple[int, int]] = []
        self._allocating = ""  # the request of the last allocate_slots check: its pops follow it
        self._cache_group = 0  # the group of the last cache_blocks call: its on_cache follow it

    def add(self, records: Iterable[Record]) -> None:
        """Records the replay itself made during the op (the block hashes a request learned)."""
        self._records.extend(records)

    def records(self) -> tuple[Record, ...]:
        """Everything recorded since `clear`, in report order."""
        return tuple(self._records)

    def on_lookup(self, request_id: str, num_tokens: int, max_cache_hit_length: int, num_hit_tokens: int) -> None:
        self._records += [EagleDropped(request_id, index, block_id) for index, block_id in self._drops]
        cap = max_cache_hit_length // self.block_size
        self._records.append(Lookup(request_id, num_tokens, cap, tuple(self._probes), num_hit_tokens))
        self._probes, self._drops = [], []

    def on_lookup_skipped(self, request_id: str, num_tokens: int, reason: str) -> None:
        self._records.append(Lookup(request_id, num_tokens, 0, (), 0, reason))

    def on_lookup_probe(self, group_id: int, block_index: int, block_id: int | None) -> None:
        if group_id == GROUP_0:  # the lookup ruler draws group 0; each group's hit is in GroupLookup
            self._probes.append((block_index, block_id is not None, block_id))

    def on_group_lookup(self, lookup: GroupLookup) -> None:
        self._records.append(lookup)

    def on_retention(
        self,
        request_id: str,
        group_id: int,
        start_block: int,
        mask: tuple[bool, ...],
        retention_interval: int | None,
        boundaries: tuple[int, ...],
    ) -> None:
        self._records.append(Retention(request_id, group_id, start_block, mask, retention_interval, boundaries))

    def on_skipped_blocks_freed(self, request_id: str, group_id: int, block_ids: tuple[int, ...]) -> None:
        self._records.append(SkippedFreed(request_id, group_id, block_ids))

    def on_eagle_drop(self, group_id: int, block_index: int, block_id: int) -> None:
        self._drops.append((block_index, block_id))

    def on_drafts_verified(
        self, request_id: str, num_drafts: int, num_accepted: int, placeholders: bool, num_computed_tokens: int
    ) -> None:
        self._records.append(DraftsVerified(request_id, num_drafts, num_accepted, placeholders, num_computed_tokens))

    def on_admission_check(self, check: AdmissionCheck) -> None:
        self._records.append(check)
        self._allocating = check.request_id

    def on_touch(self, block_id: int, left_free_queue: bool) -> None:
        self._records.append(Touched(block_id, left_free_queue))

    def on_pop(self, block_id: int, evicted_hash: BlockHash | None) -> None:
        lost = None if evicted_hash is None else bytes(evicted_hash)
        self._records.append(Popped(self._allocating, block_id, lost))

    def on_cache_blocks(self, request_id: str, group_id: int, num_tokens: int, num_cached_blocks: int) -> None:
        self._records.append(CacheCall(group_id, num_tokens, num_cached_blocks))
        self._cache_group = group_id

    def on_cache(self, block_id: int, block_index: int, block_hash: BlockHash, duplicates: tuple[int, ...]) -> None:
        # block_pool.cache_full_blocks runs inside the group's cache_blocks, reported just before
        self._records.append(CachedBlock(block_id, block_index, bytes(block_hash), duplicates, self._cache_group))

    def on_free(self, block_id: int, ref_cnt: int, freed_to: FreedTo) -> None:
        self._records.append(Freed(block_id, ref_cnt, freed_to.value))


def hashed_since(req: Request, n_before: int, block_size: int) -> tuple[HashedBlock, ...]:
    """The block hashes the request learned after its first ``n_before``, with extra keys."""
    bs = block_size
    return tuple(
        HashedBlock(
            i, i * bs, (i + 1) * bs, req.block_hashes[i], generate_block_hash_extra_keys(req, i * bs, (i + 1) * bs)
        )
        for i in range(n_before, len(req.block_hashes))
    )


def new_manager(
    cfg: EngineConfig,
    observer: KVCacheObserver | None,
    groups: GroupsSpec | None = None,
    max_in_flight_tokens: int | None = None,
    speculative: SpeculativeConfig | None = None,
    num_hash_lookahead_tokens: int = 0,
    release: VllmRelease = VLLM_0_31,
) -> KVCacheManager:
    """The KV cache manager a scenario's engine settings describe (stats always on: the replay
    JSON reports them), with its hybrid KV cache groups if it has them, and with speculative
    decoding EAGLE's hit drop as the scheduler sets it."""
    hybrid: dict[str, Any] = {}
    if groups is not None:
        hybrid = {
            "kv_cache_groups": groups.groups,
            "hash_block_size": groups.hash_block_size,
            "prefix_cache_retention_interval": groups.retention_interval,
            "max_in_flight_tokens": max_in_flight_tokens,
        }
    return KVCacheManager(
        cfg.num_blocks,
        cfg.block_size,
        cfg.max_model_len,
        enable_caching=cfg.enable_prefix_caching,
        enable_kv_cache_events=cfg.events,
        log_stats=True,
        use_int_block_hashes=cfg.int_block_hashes,
        observer=observer,
        # Lookahead hashes prove the boundary token, so the drop goes (scheduler.py:342-345, 0.33.0).
        use_eagle=speculative is not None and speculative.use_eagle_block_drop() and not num_hash_lookahead_tokens,
        num_prefill_lookahead=0 if speculative is None else speculative.num_prefill_lookahead_tokens,
        num_hash_lookahead_tokens=num_hash_lookahead_tokens,
        release=release,
        **hybrid,
    )


class HybridLog(KVCacheObserver):
    """The hybrid lookups and the waiting pass's allocations, as the core reported them since
    the last take: the hybrid JSON fields (design section 8), which a lean replay writes too."""

    def __init__(self) -> None:
        self.lookups: list[GroupLookup] = []
        self.allocations: list[tuple[str, tuple[list[int], ...] | None]] = []

    def on_group_lookup(self, lookup: GroupLookup) -> None:
        self.lookups.append(lookup)

    def on_admission_allocated(self, request_id: str, block_ids: tuple[list[int], ...] | None) -> None:
        self.allocations.append((request_id, block_ids))

    def take(self) -> tuple[list[GroupLookup], list[tuple[str, tuple[list[int], ...] | None]]]:
        out = self.lookups, self.allocations
        self.lookups, self.allocations = [], []
        return out


def admit_fields(
    manager: KVCacheManager, log: HybridLog, new_block_ids: tuple[list[int], ...] | None
) -> dict[str, Any]:
    """An `admit`'s hybrid fields (design section 8), from what the manager reported: each
    group's own hit and the boundary of its lookup (zeros for a later chunk, which has none),
    and the new blocks per group (an empty list each when allocate_slots found no room)."""
    lookups, _ = log.take()
    n = manager.coordinator.num_groups
    last = lookups[-1] if lookups else None
    return {
        "group_hit_tokens": list(last.group_hit_tokens) if last else [0] * n,
        "shared_prefix_boundary": last.shared_prefix_boundary if last else 0,
        "new_block_ids_by_group": [list(g) for g in new_block_ids] if new_block_ids else [[] for _ in range(n)],
    }


def step_fields(manager: KVCacheManager, log: HybridLog) -> dict[str, Any]:
    """A `step`'s hybrid fields: maps keyed by request id, for the lookups and the
    waiting-queue admissions the scheduler made in it."""
    n = manager.coordinator.num_groups
    lookups, allocations = log.take()
    return {
        "group_hit_tokens": {g.request_id: list(g.group_hit_tokens) for g in lookups},
        "shared_prefix_boundary": {g.request_id: g.shared_prefix_boundary for g in lookups},
        "new_block_ids_by_group": {
            rid: [list(g) for g in ids] if ids else [[] for _ in range(n)] for rid, ids in allocations
        },
    }
