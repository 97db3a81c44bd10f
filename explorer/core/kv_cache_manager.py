"""KVCacheManager: what the scheduler calls (vllm/v1/core/kv_cache_manager.py, 0.31.0).

A scheduler admitting a request calls, in order:
1. ``get_computed_blocks(request)``: the longest cached prefix, capped at num_tokens - 1;
2. ``allocate_slots(request, num_new_tokens, num_new_computed_tokens, new_computed_blocks)``:
   check there is room (new blocks + free hit blocks), touch the hits, pop new blocks, cache
   the blocks that are full after this step; None when there is no room;
3. ``record_prefix_cache_stats(request, num_hits)`` once admission succeeded.
``free(request)`` gives the blocks back when the request finishes or is preempted.

Every call reaches the KV cache groups through the coordinator (kv_cache_coordinator.py), as in
vLLM; an optional observer hears each decision (kv_cache_observer.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from explorer.core.block_pool import BlockPool
from explorer.core.errors import ConfigError, SchedulingError
from explorer.core.events import BlockStored, KVCacheEvent
from explorer.core.hashing import BlockHash, make_block_hash_with_group_id
from explorer.core.kv_cache_coordinator import get_kv_cache_coordinator
from explorer.core.kv_cache_interface import (
    FULL_ATTENTION,
    KVCacheSpec,
    check_retention_interval,
    default_hash_block_size,
    full_attention,
    scheduler_block_size,
)
from explorer.core.kv_cache_observer import AdmissionCheck, GroupLookup, KVCacheObserver
from explorer.core.kv_cache_utils import KVCacheBlock
from explorer.core.metrics import PrefixCacheStats
from explorer.core.release import VLLM_0_31, VllmRelease
from explorer.core.request import Request


@dataclass(frozen=True, slots=True)
class KVCacheBlocks:
    """Blocks per KV cache group, in group order, as allocate_slots returns them."""

    blocks: tuple[list[KVCacheBlock], ...]

    def get_block_ids(self) -> tuple[list[int], ...]:
        return tuple([b.block_id for b in group] for group in self.blocks)

    def get_block_ids_of_group(self, group_id: int) -> list[int]:
        return [b.block_id for b in self.blocks[group_id]]

    def __len__(self) -> int:
        """Blocks in all groups together."""
        return sum(len(group) for group in self.blocks)


class KVCacheManager:
    def __init__(
        self,
        num_blocks: int,
        block_size: int = 16,
        max_model_len: int = 1 << 20,
        enable_caching: bool = True,
        enable_kv_cache_events: bool = False,
        log_stats: bool = True,
        use_int_block_hashes: bool = True,
        observer: KVCacheObserver | None = None,
        use_eagle: bool = False,
        num_prefill_lookahead: int = 0,
        num_hash_lookahead_tokens: int = 0,
        kv_cache_groups: Sequence[KVCacheSpec] | None = None,
        hash_block_size: int | None = None,
        prefix_cache_retention_interval: int | None = 0,
        max_in_flight_tokens: int | None = None,
        release: VllmRelease = VLLM_0_31,
    ) -> None:
        """One full-attention group of ``block_size`` unless ``kv_cache_groups`` lists the
        groups (design section 8); the hasher then hashes at ``hash_block_size`` (default: the
        GCD of the group block sizes) and hits align to the LCM (``self.block_size``, vLLM's
        scheduler_block_size). ``max_in_flight_tokens`` (default max_model_len, as in vLLM)
        sizes a window group's admission cap."""
        if not isinstance(block_size, int) or block_size < 1:
            raise ConfigError(f"block_size must be a positive integer, got {block_size!r}")
        if not isinstance(max_model_len, int) or max_model_len < 1:
            raise ConfigError(f"max_model_len must be a positive integer, got {max_model_len!r}")
        self.hybrid = kv_cache_groups is not None
        specs = tuple(kv_cache_groups) if kv_cache_groups is not None else (full_attention(block_size),)
        if not specs:
            raise ConfigError("kv_cache_groups must list at least one group")
        self.kv_cache_groups = specs
        self.block_size = scheduler_block_size(specs)
        if len(specs) == 1 or hash_block_size is None:
            hash_block_size = specs[0].block_size if len(specs) == 1 else default_hash_block_size(specs)
        self.hash_block_size = hash_block_size
        check_retention_interval(prefix_cache_retention_interval, self.block_size, specs)
        self.max_model_len = max_model_len
        self.enable_caching = enable_caching
        self.enable_kv_cache_events = enable_kv_cache_events
        self.log_stats = log_stats
        self.observer = observer
        self.block_pool = BlockPool(
            num_blocks,
            enable_caching,
            enable_kv_cache_events,
            use_int_block_hashes,
            observer,
            hash_block_size,
            num_hash_lookahead_tokens,
        )
        self.use_eagle = use_eagle
        # Speculative decoding (core/sched/speculative.py): the drafter reads this many prefill
        # tokens ahead, so the last num_prefill_lookahead - 1 computed ones
        # (num_reprefillable_tokens) are never cached (kv_cache_coordinator.py:94, 353-358);
        # multi-module MTP needs blocks that hold them.
        self.num_prefill_lookahead = num_prefill_lookahead
        self.num_reprefillable_tokens = max(0, num_prefill_lookahead - 1)
        # vLLM 0.33 keeps the check for EAGLE with lookahead hashes, which clear use_eagle.
        eagle = use_eagle or num_hash_lookahead_tokens > 0
        if enable_caching and eagle and self.block_size < num_prefill_lookahead:
            raise ConfigError(
                f"Multi-module MTP with prefix caching requires scheduler_block_size (={self.block_size}) "
                f">= num_speculative_tokens (={num_prefill_lookahead})"
            )
        in_flight = max_model_len if max_in_flight_tokens is None else max_in_flight_tokens
        self.coordinator = get_kv_cache_coordinator(
            self.block_pool,
            specs,
            enable_caching,
            observer=observer,
            use_eagle=use_eagle,
            scheduler_block_size=self.block_size,
            hash_block_size=hash_block_size,
            retention_interval=prefix_cache_retention_interval,
            max_admission=[s.max_admission_blocks_per_request(in_flight, max_model_len) for s in specs],
            release=release,
        )
        self.prefix_cache_stats: PrefixCacheStats | None = PrefixCacheStats() if log_stats else None

    @property
    def usage(self) -> float:
        return self.block_pool.get_usage()

    # ---- lookup ----------------------------------------------------------------------------

    def prefix_cache_lookup_enabled(self, request: Request) -> bool:
        return self.enable_caching and not request.skip_reading_prefix_cache

    def get_computed_blocks(self, request: Request) -> tuple[KVCacheBlocks, int, int]:
        """The cached prefix of a new request, its length in tokens, and the shared-prefix
        boundary (kv_cache_manager.py:264-321).

        The lookup never covers the last token: the model must run at least one token to
        produce logits, and since hits are whole blocks a fully cached prompt recomputes its
        whole last block (kv_cache_manager.py:295). Nothing is touched and no stats recorded.
        ``shared_prefix_boundary`` is the longest single-group hit when a lagging window group
        made the reconciled hit shorter (else 0): the scheduler stores it on the request, and
        retention keeps the window tail there so a sibling can hit it later.
        """
        if not self.prefix_cache_lookup_enabled(request):
            if self.observer is not None:
                reason = (
                    "prefix caching is off"
                    if not self.enable_caching
                    else "prompt_logprobs: every prompt token must be computed"
                )
                self.observer.on_lookup_skipped(request.request_id, request.num_tokens, reason)
            if self.hybrid and self.observer is not None:
                n = self.coordinator.num_groups
                self.observer.on_group_lookup(GroupLookup(request.request_id, (0,) * n, (), 0, 0, 0))
            return self.empty_blocks(), 0, 0
        max_cache_hit_length = request.num_tokens - 1
        coordinator = self.coordinator
        if self.observer is not None:
            self._report_lookup_blocks(request)
        hits, num_hit_tokens, num_uncached = coordinator.find_longest_cache_hit(
            request.block_hashes, max_cache_hit_length
        )
        shared_prefix_boundary = num_hit_tokens + num_uncached if num_uncached else 0
        if self.observer is not None:
            self.observer.on_lookup(request.request_id, request.num_tokens, max_cache_hit_length, num_hit_tokens)
        if self.hybrid and self.observer is not None:  # explanation only: each group's own hit
            per_group = coordinator.find_longest_cache_hit_per_group(request.block_hashes, max_cache_hit_length)
            calls, passes = coordinator.last_calls, coordinator.last_num_passes
            lookup = GroupLookup(request.request_id, per_group, calls, passes, num_hit_tokens, shared_prefix_boundary)
            self.observer.on_group_lookup(lookup)
        return KVCacheBlocks(hits), num_hit_tokens, shared_prefix_boundary

    def _report_lookup_blocks(self, request: Request) -> None:
        """What each of the request's hashes is in the cache now (for the miss reasons), probed
        where the listener reads it; with extra keys, also the same token ids hashed under none
        (what other_keys needs)."""
        assert self.observer is not None
        group_ids = self.coordinator.miss_group_ids()
        suffixes = [make_block_hash_with_group_id(BlockHash(b""), g) for g in group_ids]
        lazy = self.block_pool.cached_block_hash_to_block.lazy_mask
        managers = self.coordinator.single_type_managers  # one full-attention group: see CachedMask
        whole = len(managers) == 1 and managers[0].spec.kind == FULL_ATTENTION
        hashes = tuple(request.block_hashes)
        self.observer.on_lookup_blocks(request.request_id, group_ids[0], hashes, lazy(hashes, suffixes, whole))
        if request.has_extra_keys:  # few requests have them: the second chain costs the rest nothing
            plain = tuple(request.block_hashes_without_extra_keys())
            self.observer.on_lookup_without_extra_keys(
                request.request_id, group_ids[0], plain, lazy(plain, suffixes, whole)
            )

    # ---- allocation ------------------------------------------------------------------------

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: KVCacheBlocks | None = None,
        *,
        num_lookahead_tokens: int = 0,
        num_external_computed_tokens: int = 0,
        delay_cache_blocks: bool = False,
        full_sequence_must_fit: bool = False,
        reserved_blocks: int = 0,
    ) -> KVCacheBlocks | None:
        """Slots for ``num_new_tokens`` more tokens after the computed ones and the new hits,
        plus ``num_lookahead_tokens`` slots for a drafter's KV (speculative decoding), which
        are never cached: the cache cap below stays ``request.num_tokens``.

        Returns only the newly allocated blocks, or None (changing nothing) when the free queue
        cannot supply the new blocks plus the free hit blocks. On success the blocks that are
        full after this step are cached at once, before the model computes them, capped at
        ``request.num_tokens`` (kv_cache_manager.py:371-614). ``full_sequence_must_fit`` is the
        scheduler's admission gate (its default ``scheduler_reserve_full_isl``): first the
        whole sequence so far must fit, not only this chunk (kv_cache_manager.py:519-535).

        With a KV connector: ``num_external_computed_tokens`` follow the local hit and get
        blocks of their own (popped after the hits are touched, and not in the return value);
        ``delay_cache_blocks`` (an async load) returns before anything is cached, so the loaded
        blocks get their hash only when the load is done; ``reserved_blocks`` must stay free
        for in-flight prefills (kv_cache_manager.py:572-601).
        """
        num_external = num_external_computed_tokens
        if num_new_tokens == 0 and num_new_computed_tokens == 0 and num_external == 0:
            raise SchedulingError("num_new_tokens must be greater than 0 when there are no computed tokens to adopt")
        coordinator = self.coordinator
        hit_blocks = new_computed_blocks.blocks if new_computed_blocks is not None else coordinator.empty_blocks()
        num_local_computed = request.num_computed_tokens + num_new_computed_tokens
        total_computed = min(num_local_computed + num_external, self.max_model_len)
        rid = request.request_id
        if full_sequence_must_fit:
            full_num_tokens = min(request.num_tokens, self.max_model_len)
            if not self._fits(request, num_new_tokens, total_computed, full_num_tokens, hit_blocks, True):
                return None
        num_tokens_need_slot = min(total_computed + num_new_tokens + num_lookahead_tokens, self.max_model_len)
        # Blocks wholly below a window are freed first, even if the request then does not fit,
        # counting only processed tokens (in-flight steps still read them; L541-556).
        coordinator.remove_skipped_blocks(rid, max(0, total_computed - request.num_in_flight_tokens))
        if not self._fits(
            request,
            num_new_tokens,
            total_computed,
            num_tokens_need_slot,
            hit_blocks,
            False,
            reserved_blocks,
            num_lookahead_tokens,
        ):
            return None

        # Touch before popping: a request can never evict its own hits.
        if any(hit_blocks) or num_external > 0:
            coordinator.allocate_new_computed_blocks(rid, hit_blocks, num_local_computed, num_external)
        new_blocks = coordinator.allocate_new_blocks(rid, num_tokens_need_slot)

        if not delay_cache_blocks:
            self.cache_blocks(request, min(total_computed + num_new_tokens, request.num_tokens))
        return KVCacheBlocks(new_blocks)

    def _fits(
        self,
        request: Request,
        num_new_tokens: int,
        total_computed: int,
        num_tokens_need_slot: int,
        hit_blocks: tuple[list[KVCacheBlock], ...],
        full_sequence: bool,
        reserved_blocks: int = 0,
        num_lookahead_tokens: int = 0,
    ) -> bool:
        """``allocate_slots``' capacity check (kv_cache_manager.py:558-576): the new blocks plus
        the free hit blocks must come out of the free queue (less the blocks reserved for
        others)."""
        coordinator = self.coordinator
        rid = request.request_id
        num_free = self.block_pool.get_num_free_blocks() - reserved_blocks
        args = (rid, num_tokens_need_slot, hit_blocks, total_computed, full_sequence)
        required = coordinator.get_num_blocks_to_allocate(*args)
        if self.observer is not None:
            num_new, num_evictable = coordinator.get_num_new_and_evictable_blocks(*args)
            self.observer.on_admission_check(
                AdmissionCheck(
                    rid,
                    num_new_tokens,
                    total_computed,
                    num_tokens_need_slot,
                    num_new,
                    num_evictable,
                    num_free,
                    required <= num_free,
                    full_sequence,
                    num_lookahead_tokens,
                )
            )
        return required <= num_free

    def cache_blocks(self, request: Request, num_computed_tokens: int) -> None:
        """Hash the blocks full within the first ``num_computed_tokens`` tokens, if caching is
        on: the async scheduler does it when sampled tokens arrive (kv_cache_manager.py:808-818).
        The last ``num_reprefillable_tokens`` are left out (kv_cache_coordinator.py:353-358)."""
        if self.enable_caching:
            self.coordinator.cache_blocks(request, max(0, num_computed_tokens - self.num_reprefillable_tokens))

    def free(self, request: Request) -> None:
        self.coordinator.free(request.request_id)
        if self.observer is not None:
            self.observer.on_request_freed(request.request_id)

    def pop_blocks_for_free(self, request: Request) -> list[KVCacheBlock]:
        """Forget the request's blocks without freeing them (a deferred free): its blocks in
        table order, for the caller to free in reverse later (kv_cache_manager.py:647-659)."""
        blocks = self.coordinator.pop_blocks_for_free(request.request_id)
        if self.observer is not None:
            self.observer.on_request_freed(request.request_id)
        return blocks

    def remove_skipped_blocks(self, request_id: str, processed_computed_tokens: int) -> None:
        """Free the blocks wholly below each window group's window (kv_cache_manager.py:627-645);
        nothing for full attention."""
        self.coordinator.remove_skipped_blocks(request_id, processed_computed_tokens)

    def evict_blocks(self, block_ids: set[int]) -> None:
        """Drop the hashes of these blocks (a failed KV load), one BlockRemoved each; ref counts
        and free-queue places stay (block_pool.py:810-828). The set's order is vLLM's."""
        self.block_pool.evict_blocks(block_ids)

    def empty_blocks(self) -> KVCacheBlocks:
        return KVCacheBlocks(self.coordinator.empty_blocks())

    def get_blocks(self, request_id: str) -> KVCacheBlocks:
        return KVCacheBlocks(self.coordinator.get_blocks(request_id))

    def get_block_ids(self, request_id: str) -> tuple[list[int], ...]:
        return self.get_blocks(request_id).get_block_ids()

    # ---- reset, stats, events --------------------------------------------------------------

    def reset_prefix_cache(self) -> bool:
        """Forget every cached hash; refused (False) while any request holds blocks."""
        if not self.coordinator.reset_prefix_cache():
            return False
        if self.log_stats:
            assert self.prefix_cache_stats is not None
            self.prefix_cache_stats.reset = True
        return True

    def record_prefix_cache_stats(self, request: Request, num_hits: int) -> None:
        """Count an admitted request's lookup; nothing for a request that skipped it."""
        if not self.log_stats or not self.prefix_cache_lookup_enabled(request):
            return
        assert self.prefix_cache_stats is not None
        self.prefix_cache_stats.record(request.num_tokens, num_hits, preempted=request.num_preemptions > 0)

    def make_prefix_cache_stats(self) -> PrefixCacheStats | None:
        """The stats since the last call, replaced by fresh ones."""
        if not self.log_stats:
            return None
        stats, self.prefix_cache_stats = self.prefix_cache_stats, PrefixCacheStats()
        return stats

    def take_events(self) -> list[KVCacheEvent]:
        """The pool's queued events; BlockStored gets its group's spec kind and window."""
        events = self.block_pool.take_events()
        managers = self.coordinator.single_type_managers
        for ev in events:
            if isinstance(ev, BlockStored) and ev.group_idx is not None and 0 <= ev.group_idx < len(managers):
                m = managers[ev.group_idx]
                ev.kv_cache_spec_kind = m.kind
                ev.kv_cache_spec_sliding_window = m.sliding_window
        return events
