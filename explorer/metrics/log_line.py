"""vLLM's LoggingStatLogger (vllm/v1/metrics/loggers.py): the periodic "Engine 000: ..."
line, for one engine. 0.33.0 adds "KV fetch: ..." after "Deferred" while any request has an
async KV load pending (its scheduler's stats carry the stages only with 0.33.0).

Where spec part 2 rule 76 and 0.31.0's code differ, the code is followed: ``log()`` resets the
interval's counters *before* it formats the line, so "Preemptions: N" never appears; the line
is logged at DEBUG when the interval and the one before it had no throughput at all (the engine
is idle), else at INFO. The hit rates are the windows of ``CachingMetrics`` over about the last
1,000 requests, fed by every update's stats; a successful reset empties them. The clock is
given: a replay's clock advances one pace per engine step.

With speculative decoding the logger logs, after the main line and at its level,
SpecDecodingLogging's "SpecDecoding metrics: ..." line (vllm/v1/spec_decode/metrics.py) for
the updates that verified drafts since that line was last logged, when there were any.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from explorer.core.metrics import CachingMetrics
from explorer.core.sched.output import KV_FETCH_STAGES, SchedulerStats, SpecDecodingStats
from explorer.metrics.frontend import IterationStats


@dataclass(frozen=True)
class LogLine:
    level: str  # "INFO" or "DEBUG"
    text: str
    spec_decoding: str | None = None  # the SpecDecoding metrics line logged after it, at its level

    @property
    def lines(self) -> list[str]:
        """The texts logged, in order."""
        return [self.text] if self.spec_decoding is None else [self.text, self.spec_decoding]


class SpecDecodingLogging:
    """vLLM's SpecDecodingLogging: each update's SpecDecodingStats, summed when logged. Its
    interval runs from its last line (or its start) to now; no drafts, no line (and no reset)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.reset()

    def reset(self) -> None:
        self.num_drafts: list[int] = []
        self.num_draft_tokens: list[int] = []
        self.num_accepted_tokens: list[int] = []
        self.accepted_tokens_per_pos_lists: list[list[int]] = []
        self.last_log_time = self.clock()

    def observe(self, stats: SpecDecodingStats) -> None:
        self.num_drafts.append(stats.num_drafts)
        self.num_draft_tokens.append(stats.num_draft_tokens)
        self.num_accepted_tokens.append(stats.num_accepted_tokens)
        self.accepted_tokens_per_pos_lists.append(stats.num_accepted_tokens_per_pos)

    def log(self) -> str | None:
        if not self.num_drafts:
            return None
        drafts, draft_tokens = sum(self.num_drafts), sum(self.num_draft_tokens)
        accepted = sum(self.num_accepted_tokens)
        elapsed = self.clock() - self.last_log_time
        draft_throughput = draft_tokens / elapsed if elapsed > 0 else 0.0
        accepted_throughput = accepted / elapsed if elapsed > 0 else 0.0
        rate = accepted / draft_tokens * 100 if draft_tokens > 0 else math.nan
        mean_length = 1 + _div(accepted, drafts)  # the bonus token counts
        per_pos = [_div(sum(col), drafts) for col in zip(*self.accepted_tokens_per_pos_lists, strict=True)]
        rates = ", ".join(f"{p:.3f}" for p in per_pos)
        self.reset()
        return (
            f"SpecDecoding metrics: Mean acceptance length: {mean_length:.2f}, "
            f"Accepted throughput: {accepted_throughput:.2f} tokens/s, "
            f"Drafted throughput: {draft_throughput:.2f} tokens/s, "
            f"Accepted: {accepted:d} tokens, Drafted: {draft_tokens:d} tokens, "
            f"Per-position acceptance rate: {rates}, Avg Draft acceptance rate: {rate:.1f}%"
        )


def _div(a: int, b: int) -> float:
    """a / b as numpy divides (vLLM sums with numpy): nan for 0 / 0, inf for a / 0."""
    if b:
        return a / b
    return math.nan if a == 0 else math.inf


class LoggingStatLogger:
    def __init__(self, clock: Callable[[], float], device_type: str = "cuda", engine_index: int = 0) -> None:
        self.clock = clock
        self.engine_index = engine_index
        self.kv_cache_device = "GPU" if device_type == "cuda" else device_type.upper()
        self._reset(clock())
        self.last_scheduler_stats = SchedulerStats()
        self.prefix_caching_metrics = CachingMetrics()
        self.connector_prefix_caching_metrics = CachingMetrics()
        self.last_prompt_throughput = 0.0
        self.last_generation_throughput = 0.0
        self.engine_is_idle = False
        self.spec_decoding_logging = SpecDecodingLogging(clock)

    def _reset(self, now: float) -> None:
        self.last_log_time = now
        self.num_prompt_tokens = 0
        self.num_generation_tokens = 0
        self.num_preemptions = 0

    def record(self, scheduler_stats: SchedulerStats | None, iteration_stats: IterationStats | None) -> None:
        if iteration_stats is not None:
            # Computed tokens: cached and transferred ones are not prompt throughput.
            self.num_prompt_tokens += iteration_stats.prompt_token_stats.computed
            self.num_generation_tokens += iteration_stats.num_generation_tokens
            self.num_preemptions += iteration_stats.num_preempted_reqs
        if scheduler_stats is not None:
            self.prefix_caching_metrics.observe(scheduler_stats.prefix_cache_stats)
            if scheduler_stats.connector_prefix_cache_stats is not None:
                self.connector_prefix_caching_metrics.observe(scheduler_stats.connector_prefix_cache_stats)
            if scheduler_stats.spec_decoding_stats is not None:
                self.spec_decoding_logging.observe(scheduler_stats.spec_decoding_stats)
            self.last_scheduler_stats = scheduler_stats

    def _throughput(self, tokens: int, now: float) -> float:
        delta = now - self.last_log_time
        return 0.0 if delta <= 0.0 else float(tokens / delta)

    def log(self) -> LogLine:
        now = self.clock()
        prompt = self._throughput(self.num_prompt_tokens, now)
        generation = self._throughput(self.num_generation_tokens, now)
        self._reset(now)  # before the line is formatted: num_preemptions is 0 below (0.31.0)
        self.engine_is_idle = not any(
            (prompt, generation, self.last_prompt_throughput, self.last_generation_throughput)
        )
        self.last_prompt_throughput, self.last_generation_throughput = prompt, generation
        s = self.last_scheduler_stats
        parts = [
            f"Avg prompt throughput: {prompt:.1f} tokens/s",
            f"Avg generation throughput: {generation:.1f} tokens/s",
            f"Running: {s.num_running_reqs:d} reqs",
            f"Waiting: {s.num_waiting_reqs + s.num_skipped_waiting_reqs:d} reqs",
        ]
        if s.num_skipped_waiting_reqs > 0:
            parts.append(f"Deferred: {s.num_skipped_waiting_reqs:d} reqs")
        kv_fetch = s.num_kv_fetch_reqs_by_stage  # 0.33.0 with a KV connector; else empty
        if any(kv_fetch.values()):
            waiting, loading, loaded = (kv_fetch.get(stage, 0) for stage in KV_FETCH_STAGES)
            parts.append(
                f"KV fetch: {waiting:d} waiting to start, {loading:d} in progress, {loaded:d} completed waiting"
            )
        if self.num_preemptions > 0:
            parts.append(f"Preemptions: {self.num_preemptions:d}")
        parts.append(f"{self.kv_cache_device} KV cache usage: {s.kv_cache_usage * 100:.1f}%")
        if not self.prefix_caching_metrics.empty:
            parts.append("Prefix cache hit rate: %.1f%%" % (self.prefix_caching_metrics.hit_rate * 100))
        if not self.connector_prefix_caching_metrics.empty:
            parts.append(
                "External prefix cache hit rate: %.1f%%" % (self.connector_prefix_caching_metrics.hit_rate * 100)
            )
        text = f"Engine {self.engine_index:03d}: " + ", ".join(parts)
        return LogLine("DEBUG" if self.engine_is_idle else "INFO", text, self.spec_decoding_logging.log())
