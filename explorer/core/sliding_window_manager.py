"""The sliding-window group's manager, SlidingWindowManager (vllm/v1/core/single_type_kv_cache_manager.py:951-1196).

A sliding-window layer attends only the last ``sliding_window`` tokens. So:
- a hit needs only the ``cdiv(sliding_window - 1, block_size)`` blocks before the hit point
  (one more with EAGLE, which then drops it); everything left of them is the null block
  (block 0), and the scan runs right to left, from the longest candidate down;
- blocks that fall wholly below the window are freed as the request advances
  (`remove_skipped_blocks`), and hit blocks already below it are never touched;
- retention (``prefix_cache_retention_interval``) decides which full blocks get a hash:
  only the tails a later hit can reach (`reachable_block_mask`).
"""

from __future__ import annotations

from collections.abc import Sequence

from explorer.core.hashing import BlockHash
from explorer.core.kv_cache_utils import KVCacheBlock
from explorer.core.single_type_kv_cache_manager import GroupHit, SingleTypeKVCacheManager, cdiv


class SlidingWindowManager(SingleTypeKVCacheManager):
    kind = "sliding_window"

    @property
    def window(self) -> int:
        assert self.sliding_window is not None
        return self.sliding_window

    def contiguous_blocks_for_hit(self, use_eagle: bool) -> int:
        """Cached blocks a hit needs in a row (single_type:960-971): the window minus the token
        being computed, one more with EAGLE (its drop then lands back on the window)."""
        return cdiv(self.window - 1, self.block_size) + (1 if use_eagle else 0)

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        """Tokens before the window of the next token (single_type:1153-1188): with a window of
        4 and 7 tokens computed, token 7 attends tokens 4..7, so 4 tokens are skipped."""
        return max(0, num_computed_tokens - self.window + 1)

    def find_longest_cache_hit(
        self,
        block_hashes: Sequence[BlockHash],
        max_length: int,
        kv_cache_group_ids: Sequence[int] | None = None,
        drop_eagle_block: bool = False,
        alignment_tokens: int | None = None,
    ) -> GroupHit:
        """Right to left from block ``max_length // bs - 1``, the first run of enough cached
        blocks is the hit; left of it stays the null block (single_type:973-1069). A run whose
        right end is not on an ``alignment_tokens`` boundary is skipped. If no run is long
        enough, the run that starts at block 0 is the hit, however short. EAGLE pops the last
        block and re-aligns."""
        group_ids = [self.kv_cache_group_id] if kv_cache_group_ids is None else list(kv_cache_group_ids)
        bs = self.block_size
        align = bs if alignment_tokens is None else alignment_tokens
        hashes = self.view_hashes(block_hashes)
        need = self.contiguous_blocks_for_hit(drop_eagle_block)
        max_num_blocks = max_length // bs
        null = self.block_pool.null_block
        computed: list[list[KVCacheBlock]] = [[null] * max_num_blocks for _ in group_ids]
        run = 0
        match_found = False
        report = self.observer is not None
        for i in range(max_num_blocks - 1, -1, -1):
            found = self._lookup(hashes[i], group_ids)
            if report:
                self._probe(i, found)
            if found is None:
                run = 0
                continue
            if run == 0 and bs != align:
                post_pop = i if drop_eagle_block else i + 1
                if (post_pop * bs) % align != 0:
                    continue
            for c, blk in zip(computed, found):
                c[i] = blk
            run += 1
            if run >= need:
                for c in computed:
                    del c[i + run :]
                match_found = True
                break
        if not match_found:
            for c in computed:
                del c[run:]
            self._realign(computed, align)
        if drop_eagle_block and computed[0]:
            for c in computed:
                c.pop()
            self._realign(computed, align)
        return tuple(computed), len(computed[0]) * bs

    def _realign(self, computed: list[list[KVCacheBlock]], align: int) -> None:
        while self.block_size != align and len(computed[0]) * self.block_size % align != 0:
            for c in computed:
                c.pop()

    def reachable_block_mask(
        self, start_block: int, end_block: int, retention_interval: int | None, boundaries: Sequence[int]
    ) -> list[bool] | None:
        """The blocks a later hit can reach (single_type:1071-1151), so the ones that get a hash.

        A hit at boundary b needs the ``need`` blocks ending at b. Dense retention (None) keeps
        that tail at every aligned boundary, i.e. every block when a segment is no longer than
        ``need`` blocks; N keeps one tail per N-token segment; 0 keeps none of those. With any
        retention but dense, the tails ending at the replay boundaries (the prompt's last
        position, floored) and at ``shared_prefix_boundary`` are kept too.
        """
        align, bs = self.cache_hit_alignment_tokens, self.block_size
        if align % bs != 0:
            return None
        need = self.contiguous_blocks_for_hit(self.use_eagle)
        shift = 1 if self.use_eagle else 0
        mask = [False] * (end_block - start_block)
        segment_tokens = align if retention_interval is None else (retention_interval or None)
        if segment_tokens is not None:
            per_segment = segment_tokens // bs
            if need >= per_segment:
                return None
            for i in range(start_block, end_block):
                if i >= shift and (i - shift) % per_segment >= per_segment - need:
                    mask[i - start_block] = True
        if retention_interval is not None:
            for boundary in boundaries:
                end = boundary // align * align // bs + shift
                for j in range(max(start_block, end - need), min(end_block, end)):
                    mask[j - start_block] = True
        return mask
