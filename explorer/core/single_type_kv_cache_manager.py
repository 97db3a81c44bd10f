"""The per-KV-cache-group managers (vllm/v1/core/single_type_kv_cache_manager.py, 0.31.0).

vLLM has one manager per KV cache group and a coordinator (kv_cache_coordinator.py) that asks
every group. The base class holds what every group shares (block tables, new blocks, caching,
freeing); a group kind brings its own hit rule and its own skipped tokens:

- `FullAttentionManager`: every earlier token is attended, so the hit is the longest cached
  run from block 0, and nothing is ever skipped;
- `SlidingWindowManager` (sliding_window_manager.py): a token attends only the last
  ``sliding_window`` tokens, so a hit needs just the blocks inside the window (the rest is the
  null block), and blocks that fall wholly below the window are freed as the request advances.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from explorer.core.block_pool import BlockPool
from explorer.core.hashing import BlockHash
from explorer.core.kv_cache_interface import KVCacheSpec
from explorer.core.kv_cache_observer import KVCacheObserver
from explorer.core.kv_cache_utils import KVCacheBlock, find_cached_prefix, resolve_block_hashes
from explorer.core.release import VLLM_0_31, VllmRelease

if TYPE_CHECKING:
    from explorer.core.request import Request

# Each group's hit blocks, one list per group id of a spec group (vLLM batches groups that
# share a spec into one lookup), and the hit length in tokens.
GroupHit = tuple[tuple[list[KVCacheBlock], ...], int]


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class SingleTypeKVCacheManager:
    kind = "unknown"  # BlockStored.kv_cache_spec_kind of this group

    def __init__(
        self,
        block_pool: BlockPool,
        spec: KVCacheSpec,
        kv_cache_group_id: int = 0,
        enable_caching: bool = True,
        observer: KVCacheObserver | None = None,
        scheduler_block_size: int | None = None,
        max_admission_blocks_per_request: int | None = None,
        release: VllmRelease = VLLM_0_31,
    ) -> None:
        self.block_pool = block_pool
        self.release = release
        self.observer = observer
        self.spec = spec
        self.block_size = spec.block_size
        self.sliding_window = spec.sliding_window
        self.kv_cache_group_id = kv_cache_group_id
        self.enable_caching = enable_caching
        # Hits land on this boundary (the scheduler block size; single_type:108-111).
        self.cache_hit_alignment_tokens = scheduler_block_size or spec.block_size
        # Set by the coordinator for the groups that get the EAGLE drop (coordinator.py:790-794).
        self.use_eagle = False
        # A window group's cap for the whole-sequence admission gate (single_type:178-205).
        self.max_admission_blocks_per_request = max_admission_blocks_per_request
        # request id -> its blocks in token order (the block table; 0 = the null block)
        self.req_to_blocks: dict[str, list[KVCacheBlock]] = {}
        # request id -> how many of its leading blocks are cached (hit, null or given a hash)
        self.num_cached_block: dict[str, int] = {}
        # True while the coordinator asks for each group's own hit (an explanation, after the
        # lookup was reported): its probes and EAGLE drops are not the lookup's, so not reported.
        self.quiet = False

    # ---- what an allocation needs --------------------------------------------------------------

    def get_num_blocks_to_allocate(
        self,
        request_id: str,
        num_tokens: int,
        new_computed_blocks: Sequence[KVCacheBlock],
        total_computed_tokens: int = 0,
        apply_admission_cap: bool = False,
    ) -> int:
        """Blocks this step takes from the free queue (single_type:178-268).

        New blocks for the slots, *plus* every hit block that is free now: touching it takes it
        out of the free queue just as surely as popping a new block does.
        """
        num_new, num_evictable = self.get_num_new_and_evictable_blocks(
            request_id, num_tokens, new_computed_blocks, total_computed_tokens, apply_admission_cap
        )
        return num_new + num_evictable

    def get_num_new_and_evictable_blocks(
        self,
        request_id: str,
        num_tokens: int,
        new_computed_blocks: Sequence[KVCacheBlock],
        total_computed_tokens: int = 0,
        apply_admission_cap: bool = False,
    ) -> tuple[int, int]:
        """The two terms of `get_num_blocks_to_allocate`, apart (the admission check reports both).
        Blocks already below a window are neither needed nor touched."""
        num_required = cdiv(num_tokens, self.block_size)
        cap = self.max_admission_blocks_per_request
        if apply_admission_cap and cap is not None:
            num_required = min(num_required, cap)
        num_req_blocks = len(self.req_to_blocks.get(request_id, ()))
        if request_id in self.num_cached_block:  # running: no new hits to adopt
            return max(num_required - num_req_blocks, 0), 0
        num_skipped_blocks = self.get_num_skipped_tokens(total_computed_tokens) // self.block_size
        num_local = len(new_computed_blocks) + num_req_blocks
        num_new = max(num_required - max(num_skipped_blocks, num_local), 0)
        num_skipped_hits = max(0, num_skipped_blocks - num_req_blocks)
        return num_new, self.get_num_evictable_blocks(new_computed_blocks[num_skipped_hits:])

    @staticmethod
    def get_num_evictable_blocks(blocks: Sequence[KVCacheBlock]) -> int:
        """Hit blocks that sit in the free queue now: touching them takes them out of it."""
        return sum(1 for b in blocks if b.ref_cnt == 0 and not b.is_null)

    # ---- allocation ----------------------------------------------------------------------------

    def add_local_computed_blocks(
        self,
        request_id: str,
        new_computed_blocks: Sequence[KVCacheBlock],
        num_local_computed_tokens: int = 0,
        num_external_computed_tokens: int = 0,
    ) -> None:
        """Adopt the hit blocks (single_type:270-327): the ones already below the window become
        null blocks *without being touched*; the rest are touched (ref_cnt + 1). All of them
        count as cached, so they are never cached again. The window is measured after the
        connector's tokens too: with a long external hit the skipped nulls can reach past the
        local hits (the external blocks below the window are never allocated)."""
        req_blocks = self.req_to_blocks.setdefault(request_id, [])
        assert not req_blocks
        num_total_computed_tokens = num_local_computed_tokens + num_external_computed_tokens
        num_skipped_blocks = self.get_num_skipped_tokens(num_total_computed_tokens) // self.block_size
        if num_skipped_blocks > 0:
            new_computed_blocks = new_computed_blocks[num_skipped_blocks:]
        if self.enable_caching:
            self.block_pool.touch(new_computed_blocks)
        req_blocks.extend([self.block_pool.null_block] * num_skipped_blocks)
        req_blocks.extend(new_computed_blocks)
        self.num_cached_block[request_id] = len(req_blocks)

    def allocate_external_computed_blocks(
        self, request_id: str, num_local_computed_tokens: int, num_external_computed_tokens: int
    ) -> None:
        """Pop blocks for the connector's tokens after the local ones; they are not cached
        until their KV is there (single_type:329-367). A window group pops none for the
        external tokens already below its window (their place holds null blocks)."""
        num_total_computed_tokens = num_local_computed_tokens + num_external_computed_tokens
        num_skipped_tokens = self.get_num_skipped_tokens(num_total_computed_tokens)
        if num_skipped_tokens > 0:
            num_external_computed_tokens = min(
                num_total_computed_tokens - num_skipped_tokens, num_external_computed_tokens
            )
        if num_external_computed_tokens <= 0:
            return
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

    # ---- caching -------------------------------------------------------------------------------

    def cache_blocks(
        self,
        request: Request,
        num_tokens: int,
        retention_interval: int | None = None,
        replay_boundaries: Sequence[int] = (),
    ) -> None:
        """Hash every block that is full within the first ``num_tokens`` tokens, or, for a
        window group, those its retention keeps (single_type:476-534)."""
        rid = request.request_id
        num_cached = self.num_cached_block.get(rid, 0)
        if self.observer is not None:
            self.observer.on_cache_blocks(rid, self.kv_cache_group_id, num_tokens, num_cached)
        num_full = num_tokens // self.block_size
        if self.release.cache_capped_by_hashes:
            # Cache only what is hashed: with lookahead hashes the last full block may have no
            # hash yet, and caching at token arrival may be asked past the request's tokens
            # (single_type_kv_cache_manager.py:501-503 in 0.33.0).
            hbs = self.block_pool.hash_block_size or self.block_size
            num_full = min(num_tokens, len(request.block_hashes) * hbs) // self.block_size
        if num_cached >= num_full:
            return
        boundaries = [*replay_boundaries]
        if request.shared_prefix_boundary:
            boundaries.append(request.shared_prefix_boundary)
            if self.use_eagle and self.release.eagle_junction_block_below:
                # A request that diverges just past the junction has no block there for its
                # EAGLE drop, so its hit ends one block lower (0.33.0).
                boundaries.append(request.shared_prefix_boundary - self.block_size)
        mask = self.reachable_block_mask(num_cached, num_full, retention_interval, boundaries)
        if mask is not None and self.observer is not None:
            self.observer.on_retention(
                rid, self.kv_cache_group_id, num_cached, tuple(mask), retention_interval, tuple(boundaries)
            )
        if self.observer is not None and request.has_extra_keys:
            k = self.block_size // (self.block_pool.hash_block_size or self.block_size)
            # Each block is cached under the hash at its end (a coarser group: the last of k).
            lo, hi = num_cached * k + k - 1, num_full * k
            plain = request.block_hashes_without_extra_keys()[lo:hi:k]
            own = request.block_hashes[lo:hi:k]
            self.observer.on_cache_without_extra_keys(rid, self.kv_cache_group_id, tuple(own), tuple(plain))
        self.block_pool.cache_full_blocks(
            request, self.req_to_blocks[rid], num_cached, num_full, self.block_size, self.kv_cache_group_id, mask
        )
        self.num_cached_block[rid] = num_full

    def reachable_block_mask(
        self, start_block: int, end_block: int, retention_interval: int | None, boundaries: Sequence[int]
    ) -> list[bool] | None:
        """Which of blocks ``start_block..end_block`` get a hash; None: all of them (dense)."""
        return None

    # ---- freeing -------------------------------------------------------------------------------

    def free(self, request_id: str) -> None:
        """Return the request's blocks in *reverse* order, so the tail of its chain is evicted
        before its head (a shared system prompt at the head survives longest)."""
        self.block_pool.free_blocks(reversed(self.pop_blocks_for_free(request_id)))

    def pop_blocks_for_free(self, request_id: str) -> list[KVCacheBlock]:
        """Forget the request's blocks and hand them over, in table order, still held."""
        self.num_cached_block.pop(request_id, None)
        return self.req_to_blocks.pop(request_id, [])

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        """Tokens no later token attends (single_type:727-738): none for full attention."""
        return 0

    def remove_skipped_blocks(self, request_id: str, processed_computed_tokens: int) -> None:
        """Free the blocks wholly below the window and put the null block in their place
        (single_type:687-725); nothing for full attention."""
        num_skipped_tokens = self.get_num_skipped_tokens(processed_computed_tokens)
        if num_skipped_tokens <= 0:
            return
        blocks = self.req_to_blocks.get(request_id)
        if blocks is None:
            return
        num_skipped_blocks = min(num_skipped_tokens // self.block_size, len(blocks))
        # Walk backwards and stop at the first null: everything left of it was freed before.
        # The collected blocks are freed in that order, not reversed (single_type:660-685).
        freed: list[KVCacheBlock] = []
        for i in range(num_skipped_blocks - 1, -1, -1):
            if blocks[i].is_null:
                break
            freed.append(blocks[i])
            blocks[i] = self.block_pool.null_block
        if freed:
            if self.observer is not None:
                self.observer.on_skipped_blocks_freed(
                    request_id, self.kv_cache_group_id, tuple(b.block_id for b in freed)
                )
            self.block_pool.free_blocks(freed)

    # ---- lookup --------------------------------------------------------------------------------

    def view_hashes(self, block_hashes: Sequence[BlockHash]) -> Sequence[BlockHash]:
        """The request's hashes at this group's block size (rule 69)."""
        hash_block_size = self.block_pool.hash_block_size or self.block_size
        return resolve_block_hashes(block_hashes, hash_block_size, self.block_size)

    def _lookup(self, block_hash: BlockHash, group_ids: Sequence[int]) -> list[KVCacheBlock] | None:
        return self.block_pool.get_cached_block(block_hash, group_ids)

    def _probe(self, index: int, found: list[KVCacheBlock] | None) -> None:
        if self.observer is not None and not self.quiet:
            self.observer.on_lookup_probe(self.kv_cache_group_id, index, None if found is None else found[0].block_id)

    def find_longest_cache_hit(
        self,
        block_hashes: Sequence[BlockHash],
        max_length: int,
        kv_cache_group_ids: Sequence[int] | None = None,
        drop_eagle_block: bool = False,
        alignment_tokens: int | None = None,
    ) -> GroupHit:
        raise NotImplementedError


class FullAttentionManager(SingleTypeKVCacheManager):
    kind = "full_attention"

    def find_longest_cache_hit(
        self,
        block_hashes: Sequence[BlockHash],
        max_length: int,
        kv_cache_group_ids: Sequence[int] | None = None,
        drop_eagle_block: bool = False,
        alignment_tokens: int | None = None,
    ) -> GroupHit:
        """Walk the hashes from block 0 and stop at the first miss (single_type:747-843).

        Chaining makes a miss final: every later hash includes the missed one. At most
        ``max_length // block_size`` blocks are probed. With EAGLE the last hit block is
        dropped (single_type:834-839): the drafter needs the hidden states of the last
        matched position, which only a recompute of that block produces. The hit is then
        floored to ``alignment_tokens`` (the scheduler block size).
        """
        group_ids = [self.kv_cache_group_id] if kv_cache_group_ids is None else list(kv_cache_group_ids)
        align = self.block_size if alignment_tokens is None else alignment_tokens
        hashes = self.view_hashes(block_hashes)
        found = find_cached_prefix(
            hashes[: max_length // self.block_size],
            lambda h: self._lookup(h, group_ids),
            self._probe if self.observer is not None and self.observer.block_reports else None,
        )
        hit_length = len(found) * self.block_size
        if drop_eagle_block and hit_length > 0:
            hit_length -= min(align, self.block_size)
        hit_length -= hit_length % align
        kept = cdiv(hit_length, self.block_size)
        if drop_eagle_block and kept < len(found) and self.observer is not None and not self.quiet:
            self.observer.on_eagle_drop(self.kv_cache_group_id, len(found) - 1, found[-1][0].block_id)
        found = found[:kept]
        return tuple([f[j] for f in found] for j in range(len(group_ids))), hit_length

    def cache_blocks(
        self,
        request: Request,
        num_tokens: int,
        retention_interval: int | None = None,
        replay_boundaries: Sequence[int] = (),
    ) -> None:
        """Full blocks, then, when the blocks are larger than the hash block, the prompt's tail
        as a partial entry of the block it ends in (single_type:845-891)."""
        super().cache_blocks(request, num_tokens, retention_interval, replay_boundaries)
        hbs = self.block_pool.hash_block_size
        if hbs is None or hbs == self.block_size:
            return
        if self.release.partial_tail_below_last_token:
            # A resend hits at most num_prompt - 1 tokens; EAGLE reads the whole prompt first.
            limit = request.num_prompt_tokens if self.use_eagle else request.num_prompt_tokens - 1
            boundary = min(limit // hbs, len(request.block_hashes)) * hbs
        else:
            boundary = request.num_prompt_tokens // hbs * hbs
        if boundary == 0 or boundary > num_tokens or boundary % self.block_size == 0:
            return
        blocks = self.req_to_blocks[request.request_id]
        index = boundary // self.block_size
        if index < len(blocks):
            self.block_pool.cache_partial_block(request, blocks[index], boundary, self.kv_cache_group_id)
