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
from collections.abc import Callable

from explorer.core.hashing import init_none_hash
from explorer.core.kv_cache_utils import get_request_block_hasher
from explorer.core.request import Request
from explorer.errors import BadInput
from explorer.traffic.engine_calls import admit, finish, generate, new_engine
from explorer.traffic.hashing import PrecomputedBlockHasher, PreparedTrace, arrive
from explorer.traffic.results import RunResult, check_num_blocks, tick
from explorer.traffic.trace import RequestTrace, expand_prompt, is_skipped


def replay_vllm(prep: PreparedTrace, num_blocks: int, progress: Callable[[int], None] | None = None) -> RunResult:
    """The default policy through the real engine: one request at a time, in file order."""
    check_num_blocks(num_blocks)
    t0 = time.perf_counter()
    sched = new_engine(num_blocks, prep.block_size)
    hasher = PrecomputedBlockHasher(prep.block_size, prep.ctx)
    requests = prep.trace.requests
    bs, outputs = prep.block_size, prep.outputs
    hits = [0] * len(requests)
    skipped = 0
    for k, tr in enumerate(requests):
        if is_skipped(tr, bs, num_blocks, outputs):
            skipped += 1
            continue
        request = arrive(prep, k, hasher)
        hit = admit(sched, request)
        if hit is None:
            raise AssertionError(f"request on line {tr.line} did not fit although it is not skipped")
        hits[k] = hit
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
    )


def replay_vllm_plain(trace: RequestTrace, block_size: int, num_blocks: int, outputs: bool = False) -> RunResult:
    """`replay_vllm` without the shared hashes: every Request is hashed in full by the core's
    request block hasher when it is built, as in a real engine (and as vLLM's side of the
    benchmark does). Same hits; slower. For benchmarks and checks."""
    check_num_blocks(num_blocks)
    if not isinstance(block_size, int) or block_size < 1:
        raise BadInput(f"block size must be a positive integer, got {block_size!r}")
    t0 = time.perf_counter()
    ctx = init_none_hash("sha256", None)
    hasher = get_request_block_hasher(block_size, ctx)
    sched = new_engine(num_blocks, block_size)
    hits = [0] * len(trace.requests)
    skipped = 0
    for k, tr in enumerate(trace.requests):
        if is_skipped(tr, block_size, num_blocks, outputs):
            skipped += 1
            continue
        request = Request(str(k), expand_prompt(tr), block_hasher=hasher)
        hit = admit(sched, request)
        assert hit is not None
        hits[k] = hit
        if outputs:
            generate(sched, request, tr.output_length)
        finish(sched, request)
    stats = sched.kv_cache_manager.prefix_cache_stats
    assert stats is not None
    return RunResult(
        "vllm",
        num_blocks,
        len(trace.requests),
        skipped,
        trace.prompt_tokens,
        stats.hits,
        time.perf_counter() - t0,
        hits,
    )
