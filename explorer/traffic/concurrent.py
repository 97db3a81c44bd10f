"""Concurrency from the timestamps (``--concurrent``, vllm policy only), through the real engine.

This replaces "one request at a time" by a simple timed policy, documented in
`replay_concurrent`: requests arrive at their timestamps, wait in FIFO order until the engine
has room for them, run for ``output_length * decode_ms`` and hold their blocks until they
finish.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass

from explorer.core.request import Request
from explorer.traffic.engine_calls import admit, finish, footprint_fits, generate, new_engine
from explorer.traffic.hashing import PrecomputedBlockHasher, PreparedTrace, arrive
from explorer.traffic.results import RunResult, check_num_blocks, tick
from explorer.traffic.trace import footprint_tokens, is_skipped

DEFAULT_DECODE_MS = 20.0


@dataclass(frozen=True)
class ConcurrencyConfig:
    decode_ms: float = DEFAULT_DECODE_MS  # ms per output token


def replay_concurrent(
    prep: PreparedTrace,
    num_blocks: int,
    config: ConcurrencyConfig = ConcurrencyConfig(),
    progress: Callable[[int], None] | None = None,
) -> RunResult:
    """Concurrency from the timestamps, through the real engine.

    The policy (a simple model, not vLLM's scheduler loop):
    - A request arrives at its ``timestamp`` (ms) and joins a FIFO waiting queue (arrivals
      with equal timestamps in file order).
    - Whenever the head of the queue can be admitted, it is: lookup, ``allocate_slots`` for the
      whole prompt, stats, exactly as in the default policy. If it cannot (no room) it waits,
      and so does everyone behind it (first come, first served, as vLLM's FCFS scheduler),
      until a running request finishes and frees its blocks. A waiting request is looked up
      again at each attempt, so it can hit blocks cached while it waited.
    - With ``--outputs`` a request is admitted only if its whole footprint (prompt plus every
      output token but the last) fits, and its output tokens are generated right away; so a
      running request never needs preempting. Without ``--outputs`` it holds its prompt blocks.
    - It runs for ``output_length * decode_ms`` ms, holding its blocks (other requests can hit
      them meanwhile), then finishes and frees them (finishes before arrivals at equal times).
    Skipped requests (the skip rule) never enter the queue.
    Reported: peak running requests, mean and largest queueing delay, the time the last
    request finished.
    """
    check_num_blocks(num_blocks)
    t0 = time.perf_counter()
    sched = new_engine(num_blocks, prep.block_size)
    hasher = PrecomputedBlockHasher(prep.block_size, prep.ctx)
    requests = prep.trace.requests
    bs, outputs = prep.block_size, prep.outputs
    hits = [0] * len(requests)
    order = sorted(range(len(requests)), key=lambda k: requests[k].timestamp)
    arrivals = [k for k in order if not is_skipped(requests[k], bs, num_blocks, outputs)]
    skipped = len(requests) - len(arrivals)
    waiting: list[int] = []  # FIFO of request indices; the head is waiting[w_head]
    w_head = 0
    # Only the head of the queue is built as a Request (its prompt expanded): a long queue
    # must not hold every waiting prompt. Its hashes are precomputed, so when it is built
    # changes nothing.
    head: Request | None = None
    running: list[tuple[float, int, Request]] = []  # heap of (finish time, k, request)
    waits: list[float] = []
    peak_running = 0
    done = 0
    last_finish = 0.0
    a = 0
    now = 0.0
    while a < len(arrivals) or w_head < len(waiting) or running:
        # the next event time: a finish or an arrival
        candidates = []
        if running:
            candidates.append(running[0][0])
        if a < len(arrivals):
            candidates.append(float(requests[arrivals[a]].timestamp))
        if candidates:
            now = max(now, min(candidates))
        while running and running[0][0] <= now:
            _, _, request = heapq.heappop(running)
            finish(sched, request)
            done += 1
            tick(progress, done - 1)
        while a < len(arrivals) and requests[arrivals[a]].timestamp <= now:
            waiting.append(arrivals[a])
            a += 1
        while w_head < len(waiting):
            k = waiting[w_head]
            tr = requests[k]
            if head is None:
                head = arrive(prep, k, hasher)
            request = head
            if outputs and not footprint_fits(sched, request, footprint_tokens(tr, True)):
                break
            got = admit(sched, request)
            if got is None:
                if not running:
                    raise AssertionError(f"request on line {tr.line} does not fit in an idle engine")
                break
            w_head += 1
            head = None
            hits[k] = got
            if outputs:
                generate(sched, request, tr.output_length)
            waits.append(now - tr.timestamp)
            finish_at = now + tr.output_length * config.decode_ms
            heapq.heappush(running, (finish_at, k, request))
            last_finish = max(last_finish, finish_at)
            peak_running = max(peak_running, len(running))
        if w_head > 4096 and w_head * 2 > len(waiting):
            del waiting[:w_head]
            w_head = 0
    stats = sched.kv_cache_manager.prefix_cache_stats
    assert stats is not None and stats.hits == sum(hits)
    conc = {
        "decode_ms": config.decode_ms,
        "peak_running": peak_running,
        "mean_wait_ms": round(sum(waits) / len(waits), 3) if waits else 0.0,
        "max_wait_ms": round(max(waits), 3) if waits else 0.0,
        "last_finish_ms": round(last_finish, 3),
    }
    return RunResult(
        "vllm",
        num_blocks,
        len(requests),
        skipped,
        prep.trace.prompt_tokens,
        stats.hits,
        time.perf_counter() - t0,
        hits,
        conc,
    )
