"""The ``lru`` and ``unbounded`` policies: small simulators over block hashes, NOT vLLM.

- ``lru``: a cache of ``num_blocks - 1`` blocks with plain least-recently-used eviction,
  recency in token order (a request's first block is its least recent one). vLLM frees a
  request's blocks in reverse, so its tail is evicted before its head; plain LRU does the
  opposite, and the comparison shows what that order is worth.
- ``unbounded``: every block ever cached stays cached; nothing is skipped. The ceiling: no
  eviction policy can hit more, at any cache size.

Both use the same block hashes as the engine, the same lookup rule (the longest cached prefix,
never covering a prompt's last token) and the same blocks the engine would cache.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Container, Sequence

from explorer.core.hashing import BlockHash
from explorer.core.kv_cache_utils import find_cached_prefix
from explorer.traffic.hashing import PreparedTrace
from explorer.traffic.results import RunResult, check_num_blocks, tick
from explorer.traffic.trace import cdiv, footprint_tokens, is_skipped


def _cached_hashes(prep: PreparedTrace, k: int) -> list[BlockHash]:
    """The hashes of the blocks the engine caches for request k: its prompt's full blocks,
    then (with outputs) the full blocks of its output."""
    ph = prep.prompt_hashes[k]
    if prep.outputs:
        assert prep.output_hashes is not None
        return ph + prep.output_hashes[k]
    return ph


def _prefix_hit(hashes: Sequence[BlockHash], cache: Container[BlockHash], cap_blocks: int) -> int:
    """How many blocks of ``hashes[:cap_blocks]``, from the first, are in ``cache``."""
    return len(find_cached_prefix(hashes[:cap_blocks], lambda h: h if h in cache else None))


def simulate_lru(prep: PreparedTrace, num_blocks: int, progress: Callable[[int], None] | None = None) -> RunResult:
    """NOT vLLM: plain LRU over block hashes, recency in token order (see the module doc).

    The cache holds ``num_blocks - 1`` blocks. A request occupies ``cdiv(footprint,
    block_size)`` of them while it runs, its full blocks cached and the partial tail not;
    the least recently used blocks of other requests are evicted to make room.
    """
    check_num_blocks(num_blocks)
    t0 = time.perf_counter()
    bs, outputs = prep.block_size, prep.outputs
    capacity = num_blocks - 1
    cache: OrderedDict[BlockHash, None] = OrderedDict()
    requests = prep.trace.requests
    hits = [0] * len(requests)
    skipped = 0
    for k, tr in enumerate(requests):
        if is_skipped(tr, bs, num_blocks, outputs):
            skipped += 1
            continue
        own = _cached_hashes(prep, k)
        hit = _prefix_hit(own, cache, (tr.input_length - 1) // bs)
        hits[k] = hit * bs
        move = cache.move_to_end
        for h in own:
            if h in cache:
                move(h)
            else:
                cache[h] = None
        unhashed = cdiv(footprint_tokens(tr, outputs), bs) - len(own)
        while len(cache) > capacity - unhashed:
            cache.popitem(last=False)
        tick(progress, k)
    return RunResult(
        "lru",
        num_blocks,
        len(requests),
        skipped,
        prep.trace.prompt_tokens,
        sum(hits),
        time.perf_counter() - t0,
        hits,
    )


def simulate_unbounded(prep: PreparedTrace, progress: Callable[[int], None] | None = None) -> RunResult:
    """NOT vLLM: an infinite cache; every block ever cached stays, no request is skipped."""
    t0 = time.perf_counter()
    bs = prep.block_size
    cache: set[BlockHash] = set()
    requests = prep.trace.requests
    hits = [0] * len(requests)
    for k, tr in enumerate(requests):
        own = _cached_hashes(prep, k)
        hits[k] = _prefix_hit(own, cache, (tr.input_length - 1) // bs) * bs
        cache.update(own)
        tick(progress, k)
    return RunResult(
        "unbounded",
        None,
        len(requests),
        0,
        prep.trace.prompt_tokens,
        sum(hits),
        time.perf_counter() - t0,
        hits,
    )
