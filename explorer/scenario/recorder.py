"""What a replay keeps from the core: the observer's reports of one op, and snapshots.

`StepRecorder` observes the core (kv_cache_observer.py) during one op and keeps what it
reports in the terms the panels draw; `take_snapshot` freezes the pool and the live requests.
Both replays use them: manager-level scenarios (engine.py) and engine-step scenarios
(engine_steps.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from explorer.core.hashing import BlockHash, HashContext, init_none_hash
from explorer.core.kv_cache_manager import KVCacheManager
from explorer.core.kv_cache_observer import AdmissionCheck, FreedTo, KVCacheObserver
from explorer.core.kv_cache_utils import generate_block_hash_extra_keys, get_request_block_hasher
from explorer.core.request import Request
from explorer.core.sched.speculative import SpeculativeConfig
from explorer.errors import BadInput
from explorer.scenario.spec import EngineConfig
from explorer.scenario.trace import CacheCall, CachedBlock, DraftsVerified, Freed, HashedBlock, Lookup


class StepError(BadInput):
    """A step the engine's state refuses (an id that is not live, nothing to compute, ...)."""


# The replay JSON's per-request block ids are the first KV cache group's (design sections 5, 8).
GROUP_0 = 0


def block_hasher(
    cfg: EngineConfig, hash_seed: str | None, connector: bool = False
) -> tuple[HashContext | None, Callable[[Request], list[BlockHash]] | None]:
    """The engine's NONE_HASH context and request block hasher; none with caching off and no
    KV connector (vLLM's EngineCore builds it for either, core.py:225-234).
    ``hash_seed`` overrides the scenario's: the resolved (maybe drawn) seed of an earlier
    replay, so that replaying again gives the same hashes."""
    if not cfg.enable_prefix_caching and not connector:
        return None, None
    seed = hash_seed if hash_seed is not None else (cfg.hash_seed or None)
    ctx = init_none_hash(cfg.hash_algo, seed)
    return ctx, get_request_block_hasher(cfg.block_size, ctx)


class StepRecorder(KVCacheObserver):
    """Keeps what the core reports during one op, in the terms the panels draw."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.clear()

    def clear(self) -> None:
        self.lookup: Lookup | None = None
        self.probes: list[tuple[int, bool, int | None]] = []
        self.admissions: list[AdmissionCheck] = []
        self.cache_calls: list[CacheCall] = []
        self.touched: list[int] = []
        self.touched_from_free: list[int] = []
        self.evicted: list[tuple[int, bytes]] = []
        self.cached: list[CachedBlock] = []
        self.freed: list[Freed] = []
        self.eagle_dropped: list[tuple[int, int]] = []
        self.drafts: list[DraftsVerified] = []

    def on_lookup(self, request_id: str, num_tokens: int, max_cache_hit_length: int, num_hit_tokens: int) -> None:
        cap = max_cache_hit_length // self.block_size
        self.lookup = Lookup(num_tokens, cap, tuple(self.probes), num_hit_tokens)

    def on_lookup_skipped(self, request_id: str, num_tokens: int, reason: str) -> None:
        self.lookup = Lookup(num_tokens, 0, (), 0, reason)

    def on_lookup_probe(self, group_id: int, block_index: int, block_id: int | None) -> None:
        self.probes.append((block_index, block_id is not None, block_id))

    def on_eagle_drop(self, group_id: int, block_index: int, block_id: int) -> None:
        self.eagle_dropped.append((block_index, block_id))

    def on_drafts_verified(
        self, request_id: str, num_drafts: int, num_accepted: int, placeholders: bool, num_computed_tokens: int
    ) -> None:
        self.drafts.append(DraftsVerified(request_id, num_drafts, num_accepted, placeholders, num_computed_tokens))

    def on_admission_check(self, check: AdmissionCheck) -> None:
        self.admissions.append(check)

    def on_touch(self, block_id: int, left_free_queue: bool) -> None:
        self.touched.append(block_id)
        if left_free_queue:
            self.touched_from_free.append(block_id)

    def on_pop(self, block_id: int, evicted_hash: BlockHash | None) -> None:
        if evicted_hash is not None:
            self.evicted.append((block_id, bytes(evicted_hash)))

    def on_cache_blocks(self, request_id: str, group_id: int, num_tokens: int, num_cached_blocks: int) -> None:
        self.cache_calls.append(CacheCall(group_id, num_tokens, num_cached_blocks))

    def on_cache(self, block_id: int, block_index: int, block_hash: BlockHash, duplicates: tuple[int, ...]) -> None:
        self.cached.append(CachedBlock(block_id, block_index, bytes(block_hash), duplicates))

    def on_free(self, block_id: int, ref_cnt: int, freed_to: FreedTo) -> None:
        self.freed.append(Freed(block_id, ref_cnt, freed_to.value))

    def records(self) -> dict[str, Any]:
        """The step fields recorded since `clear`."""
        return {
            "lookup": self.lookup,
            "admissions": tuple(self.admissions),
            "cache_calls": tuple(self.cache_calls),
            "touched": tuple(self.touched),
            "touched_from_free": tuple(self.touched_from_free),
            "evicted": tuple(self.evicted),
            "cached": tuple(self.cached),
            "freed": tuple(self.freed),
            "eagle_dropped": tuple(self.eagle_dropped),
            "drafts": tuple(self.drafts),
        }


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
    cfg: EngineConfig, observer: KVCacheObserver | None, speculative: SpeculativeConfig | None = None
) -> KVCacheManager:
    """The KV cache manager a scenario's engine settings describe (stats always on: the replay
    JSON reports them); with speculative decoding, EAGLE's hit drop as the scheduler sets it."""
    return KVCacheManager(
        cfg.num_blocks,
        cfg.block_size,
        cfg.max_model_len,
        enable_caching=cfg.enable_prefix_caching,
        enable_kv_cache_events=cfg.events,
        log_stats=True,
        use_int_block_hashes=cfg.int_block_hashes,
        observer=observer,
        use_eagle=speculative is not None and speculative.use_eagle_block_drop(),
        num_prefill_lookahead=0 if speculative is None else speculative.num_prefill_lookahead_tokens,
    )
