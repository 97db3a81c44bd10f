"""What the core tells an observer: each decision a panel draws, reported where it is made.

vLLM's block pool reports allocations, accesses and evictions to a ``KVCacheMetricsCollector``
(vllm/v1/core/kv_cache_metrics.py). This observer follows the same idea one level finer: the
per-group managers report each lookup probe and the blocks they cache, the manager reports its
admission check, and the pool reports each touched, popped and freed block. A replay that draws
panels records these reports instead of predicting what the core would do, so a panel can never
disagree with the engine. Without an observer (``None``) each call site costs one test.

The scheduler (core/sched/) reports the same way what an engine step decides: which request
was scheduled with how many tokens, who was preempted and why, who finished.

The observer only listens: the core never reads anything back from it.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from explorer.core.hashing import BlockHash, BlockHashWithGroupId


class FreedTo(enum.Enum):
    """Where ``free_blocks`` put a block whose ref_cnt it dropped."""

    FRONT = "front"  # ref_cnt 0 and no hash: reused first, it can never be hit
    BACK = "back"  # ref_cnt 0 with a hash: least recently freed is evicted first
    HELD = "held"  # still referenced by another request: not in the free queue


@dataclass(frozen=True, slots=True)
class AdmissionCheck:
    """``allocate_slots``' capacity check (kv_cache_manager.py:558-576), as it was decided.

    Required blocks = new blocks for the slots + hit blocks that sit in the free queue now
    (touching them takes them out of it as surely as popping does).
    """

    request_id: str
    num_new_tokens: int
    num_computed_tokens: int  # already computed + this call's new hits
    num_tokens_need_slot: int
    num_new_blocks: int
    num_evictable_hit_blocks: int
    num_free_blocks: int
    ok: bool
    # The scheduler's admission gate (scheduler_reserve_full_isl: full_sequence_must_fit,
    # kv_cache_manager.py:519-535): the whole sequence so far must fit before the first chunk
    # is allocated.
    full_sequence: bool = False
    # Speculative decoding: slots past the scheduled tokens for the drafter's KV, included in
    # num_tokens_need_slot and never cached (spec part 2, rule 73).
    num_lookahead_tokens: int = 0

    @property
    def num_required_blocks(self) -> int:
        return self.num_new_blocks + self.num_evictable_hit_blocks


@dataclass(frozen=True, slots=True)
class GroupCall:
    """One call of a spec group's ``find_longest_cache_hit`` inside the hybrid fixed point
    (coordinator.py:842-977): pass ``pass_index`` asked the group ``group_ids`` for at most
    ``max_length`` tokens and got ``hit_tokens``."""

    pass_index: int
    group_ids: tuple[int, ...]
    kind: str
    sliding_window: int | None
    max_length: int
    hit_tokens: int
    drop_eagle_block: bool = False


@dataclass(frozen=True, slots=True)
class GroupLookup:
    """A hybrid lookup as `get_computed_blocks` decided it: each group's own hit (alone, as
    ``find_longest_cache_hit_per_group``), the fixed point's calls, the reconciled hit and
    ``shared_prefix_boundary`` (the longest single-group hit when it exceeds the reconciled one)."""

    request_id: str
    group_hit_tokens: tuple[int, ...]
    calls: tuple[GroupCall, ...]
    num_passes: int
    hit_tokens: int
    shared_prefix_boundary: int


class KVCacheObserver:
    """Receives the core's reports. Every method does nothing here: override what you record."""

    # False: the pool and the managers skip the per-block reports (on_touch, on_pop, on_cache,
    # on_free, on_lookup_probe), which cost a long replay most of its time when nobody draws them.
    block_reports: bool = True

    def on_lookup(self, request_id: str, num_tokens: int, max_cache_hit_length: int, num_hit_tokens: int) -> None:
        """``get_computed_blocks`` looked the request up: at most ``max_cache_hit_length``
        tokens could hit (num_tokens - 1), ``num_hit_tokens`` did."""

    def on_lookup_skipped(self, request_id: str, num_tokens: int, reason: str) -> None:
        """``get_computed_blocks`` did not look (caching off, or the request may not read the cache)."""

    def on_lookup_probe(self, group_id: int, block_index: int, block_id: int | None) -> None:
        """``find_longest_cache_hit`` probed hash ``block_index``: a hit on ``block_id``, or
        the first miss (``None``), after which the walk stops."""

    def on_lookup_blocks(
        self, request_id: str, group_id: int, block_hashes: tuple[BlockHash, ...], cached: Sequence[bool]
    ) -> None:
        """Before the walk: every full-block hash of the request (at the hash block size) and
        whether group ``group_id`` (the full-attention group) holds it now, so a miss can say why: a
        cached hash after the first miss is behind it, an uncached one was removed or never
        stored (what removed it is told by ``on_hash_removed`` and ``on_prefix_cache_reset``).
        ``cached`` is probed where it is read, so read it during this call only (block_hash_map.py
        CachedMask; its ``whole_prefixes`` says whether a never-cached hash ends the story)."""

    def on_lookup_without_extra_keys(
        self, request_id: str, group_id: int, block_hashes: tuple[BlockHash, ...], cached: Sequence[bool]
    ) -> None:
        """After ``on_lookup_blocks``, for a request with extra keys (LoRA, images, cache salt):
        its hashes as they would be with none, and whether group ``group_id`` holds each now, so a
        miss can say the same token ids were cached under other keys (``other_keys``)."""

    def on_cache_without_extra_keys(
        self,
        request_id: str,
        group_id: int,
        block_hashes: tuple[BlockHash, ...],
        without_extra_keys: tuple[BlockHash, ...],
    ) -> None:
        """A group's ``cache_blocks`` of a request with extra keys is about to cache blocks: the
        hash each is cached under and the same without extra keys (its token ids), in pairs."""

    def on_hashes_removed(self, keys: tuple[BlockHashWithGroupId, ...], cause: str) -> None:
        """The last block cached under each of these keys (hash + group id) lost it, in one
        call: ``cause`` is ``"evicted"`` (popped by ``get_new_blocks`` for an allocation) or
        ``"failed_load"`` (``evict_blocks``: a connector's load reported the blocks invalid)."""

    def on_prefix_cache_reset(self, keys: tuple[BlockHashWithGroupId, ...]) -> None:
        """``reset_prefix_cache`` succeeded: these keys, every one cached, are gone."""

    def on_request_freed(self, request_id: str) -> None:
        """The manager freed the request's blocks (finished or preempted): it holds nothing now."""

    def on_eagle_drop(self, group_id: int, block_index: int, block_id: int) -> None:
        """EAGLE dropped the last hit block (``block_index``, held by ``block_id``) from the
        lookup's result: the drafter needs that block's hidden states recomputed (rule 74)."""

    def on_group_lookup(self, lookup: GroupLookup) -> None:
        """A lookup with several KV cache groups: what each group hit and how the fixed point settled."""

    def on_retention(
        self,
        request_id: str,
        group_id: int,
        start_block: int,
        mask: tuple[bool, ...],
        retention_interval: int | None,
        boundaries: tuple[int, ...],
    ) -> None:
        """A window group's retention kept ``mask[i]`` for block ``start_block + i``: only
        those get a hash (None retention = dense; boundaries = replay ends and the shared prefix)."""

    def on_skipped_blocks_freed(self, request_id: str, group_id: int, block_ids: tuple[int, ...]) -> None:
        """``remove_skipped_blocks`` freed these blocks (in this order), wholly below the window."""

    def on_admission_check(self, check: AdmissionCheck) -> None:
        """``allocate_slots`` decided whether the request fits."""

    def on_touch(self, block_id: int, left_free_queue: bool) -> None:
        """A hit block got ref_cnt + 1; ``left_free_queue`` if it was free (ref_cnt was 0)."""

    def on_pop(self, block_id: int, evicted_hash: BlockHash | None) -> None:
        """``get_new_blocks`` popped a block from the free-queue head; ``evicted_hash`` is the
        digest it lost (``None`` if it held no hash)."""

    def on_cache_blocks(self, request_id: str, group_id: int, num_tokens: int, num_cached_blocks: int) -> None:
        """A group's ``cache_blocks`` ran for the first ``num_tokens`` tokens, with
        ``num_cached_blocks`` of the request's blocks already cached."""

    def on_cache(self, block_id: int, block_index: int, block_hash: BlockHash, duplicates: tuple[int, ...]) -> None:
        """``cache_full_blocks`` gave block ``block_index`` of a request its hash;
        ``duplicates`` are the other blocks already cached under the same key."""

    def on_free(self, block_id: int, ref_cnt: int, freed_to: FreedTo) -> None:
        """``free_blocks`` dropped the block's ref_cnt to ``ref_cnt`` and put it ``freed_to``."""

    # ---- the scheduler (core/sched/scheduler.py) -----------------------------------------------

    def on_scheduled(
        self, request_id: str, num_tokens: int, num_computed_tokens: int, is_prefill_chunk: bool, num_placeholders: int
    ) -> None:
        """``schedule()`` gave the request ``num_tokens`` tokens of this step's budget; after
        ``_update_after_schedule`` it has ``num_computed_tokens`` computed (placeholders included),
        ``is_prefill_chunk`` says whether prompt tokens are left, ``num_placeholders`` counts
        async output placeholders (tokens in flight whose value is not known yet)."""

    def on_admission_allocated(self, request_id: str, block_ids: tuple[list[int], ...] | None) -> None:
        """The waiting pass's ``allocate_slots`` for the request gave it ``block_ids`` (new
        block ids per KV cache group), or None: no room, nothing changed."""

    def on_preempted(self, request_id: str, reason: str) -> None:
        """The request lost its blocks and went back to the waiting queue, for ``reason``."""

    def on_finished(self, request_id: str, status: str) -> None:
        """The request finished (``status`` is vLLM's RequestStatus name in lower case) and its
        blocks were freed."""

    # ---- the KV connector (core/sched/waiting.py, connector_path.py) ---------------------------

    def on_external_lookup(
        self, request_id: str, num_local_tokens: int, num_external_tokens: int | None, load_async: bool
    ) -> None:
        """After the local hit of ``num_local_tokens`` the connector offered
        ``num_external_tokens`` more (None: it cannot tell yet), to load asynchronously or not."""

    def on_kv_load_done(self, request_id: str, num_computed_tokens: int, failed: bool) -> None:
        """An async load finished: its blocks were cached up to ``num_computed_tokens`` (after a
        failure under ``recompute``, only the valid prefix) and the request waits again."""

    def on_kv_load_failed(self, request_id: str, num_valid_tokens: int, evicted_block_ids: tuple[int, ...]) -> None:
        """A load reported invalid blocks: the request keeps ``num_valid_tokens``; under ``fail``
        the hashes of ``evicted_block_ids`` were dropped (one BlockRemoved each)."""

    # ---- the offloading connector's CPU tier (core/sched/kv_connector/offloading.py) ------------

    def on_cpu_store(
        self, request_id: str, hashes: tuple[bytes, ...], evicted: tuple[bytes, ...], refused: bool
    ) -> None:
        """A store job for these block hashes went to the CPU tier, which evicted ``evicted``
        (least recently used first) to make room; ``refused``: too few chunks could be evicted,
        nothing was stored (the request tries again at its next step)."""

    def on_cpu_load(self, request_id: str, hashes: tuple[bytes, ...], block_ids: tuple[int, ...]) -> None:
        """A load job: these chunks of the CPU tier go into these GPU blocks."""

    def on_cpu_jobs_done(self, stored: tuple[bytes, ...], loaded: tuple[bytes, ...]) -> None:
        """The worker's report: these chunks are now written (ready), these loads are done."""

    # ---- speculative decoding (core/sched/spec_decode.py) ----------------------------------------

    def on_drafts_proposed(self, request_id: str, num_drafts: int) -> None:
        """The drafter proposed ``num_drafts`` tokens for the request's next step."""

    def on_drafts_verified(
        self, request_id: str, num_drafts: int, num_accepted: int, placeholders: bool, num_computed_tokens: int
    ) -> None:
        """``update_from_output`` verified the ``num_drafts`` drafts scheduled with the request
        (``placeholders``: the padding of an admission, which stand for nothing): ``num_accepted``
        were accepted, the rest rolled back, leaving ``num_computed_tokens``."""
