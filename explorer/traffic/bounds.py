"""What was possible: Belady's MIN on a trace's block references (design section 14).

One request at a time in arrival order references every full-block hash of its prompt in
order. Its hit is the leading run of those hashes resident when it arrives, within the lookup
cap (``(input_length - 1) // block_size`` blocks); then all of them are resident, and while
more than ``num_blocks - 1`` hashes are, the one whose next reference is farthest away (never
again first; ties: the least recently referenced) is evicted, never one of the request's own.
A request the replay skips references nothing. NOT vLLM: what a policy that knew the future
would get, so a sweep can show how far vLLM's LRU is from it.

A next-use index (each reference's next position of the same hash) and a heap with lazy
deletion keep it O(references x log references).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from explorer.core.hashing import BlockHash
from explorer.traffic.hashing import PreparedTrace
from explorer.traffic.trace import is_skipped

NEVER = 1 << 62  # "never referenced again": farther than any position


def references(prep: PreparedTrace, num_blocks: int) -> list[tuple[Sequence[BlockHash], int]]:
    """Each request the replay keeps at this size: (its prompt's hashes, its cap in blocks)."""
    bs = prep.block_size
    out: list[tuple[Sequence[BlockHash], int]] = []
    for k, tr in enumerate(prep.trace.requests):
        if not is_skipped(tr, bs, num_blocks, prep.outputs):
            out.append((prep.prompt_hashes[k], (tr.input_length - 1) // bs))
    return out


def belady_hit_blocks(refs: Sequence[tuple[Sequence[BlockHash], int]], capacity: int) -> list[int]:
    """Each request's hit in blocks under Belady's MIN with ``capacity`` slots."""
    flat = [h for hashes, _ in refs for h in hashes]
    next_use = [NEVER] * len(flat)
    seen: dict[BlockHash, int] = {}
    for pos in range(len(flat) - 1, -1, -1):
        h = flat[pos]
        next_use[pos] = seen.get(h, NEVER)
        seen[h] = pos
    # resident hash -> (its next reference, its last reference); the heap holds
    # (-next, last, hash) entries, stale ones skipped when popped.
    resident: dict[BlockHash, tuple[int, int]] = {}
    heap: list[tuple[int, int, BlockHash]] = []
    hits: list[int] = []
    pos = 0
    for hashes, cap in refs:
        hit = 0
        while hit < min(cap, len(hashes)) and hashes[hit] in resident:
            hit += 1
        hits.append(hit)
        start = pos
        for h in hashes:
            entry = (next_use[pos], pos)
            resident[h] = entry
            heapq.heappush(heap, (-entry[0], entry[1], h))
            pos += 1
        own: list[tuple[int, int, BlockHash]] = []
        while len(resident) > capacity and heap:
            item = heapq.heappop(heap)
            neg_next, last, h = item
            if resident.get(h) != (-neg_next, last):
                continue  # stale
            if last >= start:  # one of this request's own: never evicted for it
                own.append(item)
                continue
            del resident[h]
        for item in own:
            heapq.heappush(heap, item)
    return hits


def bound_belady(prep: PreparedTrace, num_blocks: int) -> int:
    """Belady's hit tokens for the trace at ``num_blocks`` (the null block takes one slot)."""
    bs = prep.block_size
    return sum(belady_hit_blocks(references(prep, num_blocks), num_blocks - 1)) * bs
