"""The ``scheduler`` policy: a trace through vLLM's own scheduler loop, mirrored (core/sched/).

Exact concurrency from the timestamps, in vLLM's terms:
- The engine steps once every ``step_ms`` of trace time: step k runs at ``k x step_ms``
  (`arrival_step`), one ``EngineCore.step()`` (``scheduler = "sync"``) or
  ``step_with_batch_queue()`` (``"async"``, vLLM 0.31's default). Before step k, every request
  whose ``timestamp <= k x step_ms`` arrives (``EngineCore.add_request``), in timestamp order
  and, at equal timestamps, in file order. When the engine has nothing to do the clock jumps to
  the step of the next arrival (an idle step changes nothing).
- The mirrored `Scheduler` / `AsyncScheduler` decides everything else: FCFS queues, the token
  budget ``max_num_batched_tokens`` (chunked prefill), ``max_num_seqs`` (64), admission with
  the whole sequence fitting, preemption when a running request finds no room, and freeing a
  request once it has its ``max_tokens``.
- The played model samples token 0 for every output position, as ``--outputs`` does; a
  request generates ``output_length`` tokens (``max_tokens``; an ``output_length`` of 0 counts
  as 1, vLLM's smallest). Its output blocks are hashed and cached like any others.
- Reported besides the hits: the engine steps that did something, the preemptions, the peak
  of running requests (the largest batch one step ran) and the queueing delay of each
  request (from its timestamp to the step that first scheduled it), in trace milliseconds.
- A request's hit is what vLLM reports for it (``RequestOutput.num_cached_tokens``): the
  ``PrefillStats`` of its first admission, which come with its first output. Preempted
  re-admissions count in the stats apart (``preempted_*``), as in vLLM.
- A request is skipped iff its whole footprint (prompt plus every output token but the last)
  could not fit an empty cache (the ``--outputs`` skip rule): alone, it would preempt itself
  forever.
Memory stays bounded: a request is built (its prompt expanded) only when the engine could
reach it. The engine's waiting queue holds at most ``max_num_seqs + 1`` requests that were never
admitted (one ``schedule()`` admits at most ``max_num_seqs``, so it never reaches past them);
later arrivals wait as trace indices.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from explorer.core.errors import ConfigError
from explorer.core.kv_cache_manager import KVCacheManager
from explorer.core.kv_cache_observer import KVCacheObserver
from explorer.core.metrics import PrefixCacheStats
from explorer.core.sched.config import SchedulerConfig
from explorer.core.sched.engine_core import EngineCore, make_engine_core
from explorer.errors import BadInput
from explorer.miss.reasons import Miss, MissTracker
from explorer.traffic.clock import arrival_step, check_step_ms
from explorer.traffic.hashing import PrecomputedBlockHasher, PreparedTrace, arrive
from explorer.traffic.results import RunResult, add_miss, check_num_blocks, ordered_reasons, tick
from explorer.traffic.trace import MAX_MODEL_LEN, is_skipped

SCHEDULERS = ("async", "sync")
DEFAULT_STEP_MS = 20.0
MAX_BATCHED_TOKENS = 1 << 20  # the engine's max_model_len


@dataclass(frozen=True)
class SchedulerPolicy:
    """The engine settings of the ``scheduler`` policy (design section 7's defaults)."""

    scheduler: str = "async"
    max_num_batched_tokens: int = 2048
    step_ms: float = DEFAULT_STEP_MS
    max_num_seqs: int = 64

    def config(self) -> SchedulerConfig:
        """vLLM's SchedulerConfig for these settings; BadInput for what vLLM would refuse."""
        if self.scheduler not in SCHEDULERS:
            raise BadInput(f"scheduler must be one of {', '.join(SCHEDULERS)}, got {self.scheduler!r}")
        check_step_ms(self.step_ms)
        mnbt = self.max_num_batched_tokens
        if not isinstance(mnbt, int) or mnbt > MAX_BATCHED_TOKENS:
            raise BadInput(f"max_num_batched_tokens must be an integer of at most {MAX_BATCHED_TOKENS:,}, got {mnbt!r}")
        config = SchedulerConfig(mnbt, self.max_num_seqs, 0, self.scheduler == "async")
        try:
            config.check(MAX_MODEL_LEN)
        except ConfigError as e:
            raise BadInput(str(e)) from None
        return config

    def as_dict(self) -> dict[str, Any]:
        return {
            "scheduler": self.scheduler,
            "step_ms": self.step_ms,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_num_seqs": self.max_num_seqs,
        }


def new_engine_core(
    num_blocks: int, block_size: int, config: SchedulerConfig, observer: KVCacheObserver | None = None
) -> EngineCore:
    """A fresh engine for one run: prefix caching and stats on, no KV events (``observer``:
    the miss reasons)."""
    manager = KVCacheManager(
        num_blocks,
        block_size,
        MAX_MODEL_LEN,
        enable_caching=True,
        enable_kv_cache_events=False,
        log_stats=True,
        observer=observer,
    )
    return make_engine_core(manager, config)


def replay_scheduler(
    prep: PreparedTrace,
    num_blocks: int,
    policy: SchedulerPolicy = SchedulerPolicy(),
    progress: Callable[[int], None] | None = None,
    feed_window: int | None = None,
) -> RunResult:
    """The trace through the mirrored engine loop (see the module doc). ``feed_window``
    overrides how many never-admitted requests the engine's waiting queue may hold (a test
    shows any window from ``max_num_seqs + 1`` up gives the same run)."""
    check_num_blocks(num_blocks)
    config = policy.config()
    t0 = time.perf_counter()
    bs, step_ms = prep.block_size, float(policy.step_ms)
    tracker = MissTracker(bs, records=False)  # the sweep reads tokens by reason only
    core = new_engine_core(num_blocks, bs, config, tracker)
    latest: dict[str, Miss] = {}  # each request's last lookup, until its first admission reports
    miss_tokens: dict[str, int] = {}
    hasher = PrecomputedBlockHasher(bs, prep.ctx)
    requests = prep.trace.requests
    order = sorted(range(len(requests)), key=lambda k: requests[k].timestamp)
    arrivals = [k for k in order if not is_skipped(requests[k], bs, num_blocks, True)]
    skipped = len(requests) - len(arrivals)
    zeros = (0,) * max([1] + [requests[k].output_length for k in arrivals])  # the played outputs
    window = feed_window if feed_window is not None else config.max_num_seqs + 1
    hits = [0] * len(requests)
    pending: deque[int] = deque()  # arrived, not yet handed to the engine
    fresh = 0  # handed to the engine, never admitted yet
    queued = 0  # requests admitted so far, their queueing delays' sum and largest
    queue_sum = queue_max = 0.0
    totals = PrefixCacheStats()
    steps = preemptions = peak_running = done = 0
    last_finish = 0.0
    a = 0
    k = arrival_step(requests[arrivals[0]].timestamp, step_ms) if arrivals else 0
    while arrivals:
        now = k * step_ms
        while a < len(arrivals) and requests[arrivals[a]].timestamp <= now:
            pending.append(arrivals[a])
            a += 1
        while pending and fresh < window:
            j = pending.popleft()
            request = arrive(prep, j, hasher, max_tokens=max(requests[j].output_length, 1))
            core.add_request(request, zeros)
            fresh += 1
        tracker.step = k
        result = core.step_fn()
        latest.update(tracker.take())
        so, outs = result.scheduler_output, result.engine_core_outputs
        if so is None and outs is None:  # nothing to do: jump to the next arrival
            if a == len(arrivals):
                break
            k = max(k + 1, arrival_step(requests[arrivals[a]].timestamp, step_ms))
            continue
        steps += 1
        if so is not None:
            preemptions += len(so.preempted_reqs)
            for rid in so.scheduled_new_reqs:
                delay = now - requests[int(rid)].timestamp
                queued, queue_sum, queue_max = queued + 1, queue_sum + delay, max(queue_max, delay)
            fresh -= len(so.scheduled_new_reqs)
            peak_running = max(peak_running, len(so.num_scheduled_tokens))
        if outs is not None:
            for out in outs.outputs:
                if out.prefill_stats is not None:
                    hits[int(out.request_id)] = out.prefill_stats.num_cached_tokens
                    first = latest.pop(out.request_id, None)  # the lookup of the admission it reports
                    if first is not None:
                        add_miss(miss_tokens, first.tokens)
                if out.finished:
                    done += 1
                    last_finish = now
                    tick(progress, done - 1)
            if outs.scheduler_stats is not None:
                totals.add(outs.scheduler_stats.prefix_cache_stats)
        k += 1
    assert done == len(arrivals) and totals.hits == sum(hits), "every request finished, and reported its hit"
    for j in range(len(requests)):
        if is_skipped(requests[j], bs, num_blocks, True):
            add_miss(miss_tokens, {"skipped": requests[j].input_length})
    figures = {
        **policy.as_dict(),
        "steps": steps,
        "preemptions": preemptions,
        "peak_running": peak_running,
        "mean_queueing_ms": round(queue_sum / queued, 3) if queued else 0.0,
        "max_queueing_ms": round(queue_max, 3),
        "last_finish_ms": round(last_finish, 3),
        "preempted_hits": totals.preempted_hits,
    }
    return RunResult(
        "scheduler",
        num_blocks,
        len(requests),
        skipped,
        prep.trace.prompt_tokens,
        totals.hits,
        time.perf_counter() - t0,
        hits,
        figures,
        miss_tokens=ordered_reasons(miss_tokens),
    )
