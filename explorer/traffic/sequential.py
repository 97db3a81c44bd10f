"""The default policy, ``vllm``: one request at a time, in file order, through the real engine.

The real `KVCacheManager`, `Request` and sha256 block hasher (default seed), driven as vLLM's
scheduler drives them. Each request, in file order, arrives, is admitted whole
(``get_computed_blocks``, ``allocate_slots``, then the stats are recorded), with ``--outputs``
generates `output_length` tokens of 0 (each step first computes the pending token, then
samples one; the last sampled token stays pending, as in vLLM) and finishes before the next
one arrives. The hit tokens are exactly vLLM's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from explorer.core.hashing import BlockHash, init_none_hash
from explorer.core.kv_cache_utils import get_request_block_hasher
from explorer.core.request import Request
from explorer.errors import BadInput
from explorer.miss.reasons import MissTracker
from explorer.traffic.engine_calls import admit, finish, generate, new_engine
from explorer.traffic.hashing import PrecomputedBlockHasher, PreparedTrace, arrive, output_block_hashes
from explorer.traffic.results import RunResult, add_miss, check_num_blocks, ordered_reasons, tick
from explorer.traffic.trace import RequestTrace, TraceRequest, expand_prompt, is_skipped


def replay_vllm(
    prep: PreparedTrace,
    num_blocks: int,
    progress: Callable[[int], None] | None = None,
    reasons: bool = True,
    keep_misses: bool = False,
) -> RunResult:
    """The default policy through the real engine: one request at a time, in file order.
    ``reasons``: why the rest missed (``miss_tokens``); ``keep_misses``: each request's Miss."""
    check_num_blocks(num_blocks)
    t0 = time.perf_counter()
    tracker = MissTracker(prep.block_size, records=keep_misses) if reasons else None
    sched = new_engine(num_blocks, prep.block_size, tracker)
    miss_tokens: dict[str, int] = {}
    kept: list[Any] = []
    hasher = PrecomputedBlockHasher(prep.block_size, prep.ctx)
    requests = prep.trace.requests
    bs, outputs = prep.block_size, prep.outputs
    hits = [0] * len(requests)
    skipped = 0
    for k, tr in enumerate(requests):
        if is_skipped(tr, bs, num_blocks, outputs):
            skipped += 1
            if tracker is not None:
                add_miss(miss_tokens, {"skipped": tr.input_length})
                if keep_misses:
                    kept.append(None)
            continue
        request = arrive(prep, k, hasher)
        if tracker is not None:
            tracker.step = k
        hit = admit(sched, request)
        if hit is None:
            raise AssertionError(f"request on line {tr.line} did not fit although it is not skipped")
        hits[k] = hit
        if tracker is not None:
            miss = tracker.take()[request.request_id]
            add_miss(miss_tokens, miss.tokens)
            if keep_misses:
                kept.append(miss)
        if outputs:
            generate(sched, request, tr.output_length)
        finish(sched, request)
        tick(progress, k)
    stats = sched.kv_cache_manager.prefix_cache_stats
    assert stats is not None and stats.hits == sum(hits)
    return RunResult(
        "vllm",
        num_blocks,
        len(requests),
        skipped,
        prep.trace.prompt_tokens,
        stats.hits,
        time.perf_counter() - t0,
        hits,
        miss_tokens=None if tracker is None else ordered_reasons(miss_tokens),
        misses=kept if keep_misses else None,
    )


def replay_vllm_plain(trace: RequestTrace, block_size: int, num_blocks: int, outputs: bool = False) -> RunResult:
    """`replay_vllm` without the shared hashes: every Request is hashed in full by the core's
    request block hasher when it is built, as in a real engine (and as vLLM's side of the
    benchmark does). Same hits; slower. For benchmarks and checks."""
    return replay_vllm_stream(trace.requests, block_size, num_blocks, outputs)


def replay_vllm_stream(
    requests: Iterable[TraceRequest],
    block_size: int,
    num_blocks: int,
    outputs: bool = False,
    keep_hits: bool = True,
    reasons: bool = False,
) -> RunResult:
    """The default policy over requests as they come (a file streamed line by line): each is
    hashed by the core's request hasher when it is built, so memory holds the cache and one
    request (and, with ``keep_hits``, one int per request).

    ``reasons``: also the missed tokens by reason (``miss_tokens``, summed as each lookup is
    classified) and ``bound_infinite`` (the ``unbounded`` policy's hits, from a set of every
    block hash seen). Both remember one entry per distinct block of the trace (the reasons: the
    last removal of every hash the pool ever evicted; the bound: every hash seen), so their
    memory grows with the trace's distinct blocks, not with its requests. ``bound_belady``
    needs every later reference and stays None."""
    check_num_blocks(num_blocks)
    if not isinstance(block_size, int) or block_size < 1:
        raise BadInput(f"block size must be a positive integer, got {block_size!r}")
    t0 = time.perf_counter()
    ctx = init_none_hash("sha256", None)
    hasher = get_request_block_hasher(block_size, ctx)
    tracker = MissTracker(block_size, records=False) if reasons else None
    sched = new_engine(num_blocks, block_size, tracker)
    miss_tokens: dict[str, int] = {}
    seen: set[BlockHash] = set()  # every block the unbounded pool ever cached
    infinite = 0
    hits: list[int] = []
    skipped = n = prompt_tokens = 0
    for k, tr in enumerate(requests):
        n, prompt_tokens = n + 1, prompt_tokens + tr.input_length
        skip = is_skipped(tr, block_size, num_blocks, outputs)
        if skip and tracker is None:
            skipped += 1
            if keep_hits:
                hits.append(0)
            continue
        request = Request(str(k), expand_prompt(tr), block_hasher=hasher)
        if tracker is not None:  # the unbounded pool skips nothing (simulators.simulate_unbounded)
            prompt = request.block_hashes
            run = _seen_prefix(prompt, seen)
            infinite += min(run, (tr.input_length - 1) // block_size) * block_size
            seen.update(prompt[run:])  # the blocks before run are in the set already
            if outputs:
                seen.update(output_block_hashes(tr, prompt, block_size, ctx))
        if skip:
            skipped += 1
            add_miss(miss_tokens, {"skipped": tr.input_length})
            if keep_hits:
                hits.append(0)
            continue
        if tracker is not None:
            tracker.step = k
        hit = admit(sched, request)
        assert hit is not None
        if keep_hits:
            hits.append(hit)
        if tracker is not None:
            add_miss(miss_tokens, tracker.take()[request.request_id].tokens)
        if outputs:
            generate(sched, request, tr.output_length)
        finish(sched, request)
    stats = sched.kv_cache_manager.prefix_cache_stats
    assert stats is not None
    return RunResult(
        "vllm",
        num_blocks,
        n,
        skipped,
        prompt_tokens,
        stats.hits,
        time.perf_counter() - t0,
        hits,
        miss_tokens=None if tracker is None else ordered_reasons(miss_tokens),
        bound_infinite=None if tracker is None else infinite,
    )


def _seen_prefix(hashes: Sequence[BlockHash], seen: set[BlockHash]) -> int:
    """How many leading hashes the set holds. It holds whole prefixes (each request adds every
    hash of its chain, and a hash names its parent), so membership is a prefix of the chain:
    bisection finds its end in a few probes, however long the run."""
    lo, hi = 0, len(hashes)  # held below lo, not at hi and above
    while lo < hi:
        mid = (lo + hi) // 2
        if hashes[mid] in seen:
            lo = mid + 1
        else:
            hi = mid
    return lo
