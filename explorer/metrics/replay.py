"""Metrics of an engine-step replay: feed each recorded step to vLLM's frontend and loggers.

`MetricsRecorder` is what vLLM's AsyncLLM does with each ``EngineCoreOutputs`` the engine core
sends (async_llm.py: output_handler): an ``IterationStats`` from the OutputProcessor when the
update has outputs, then ``record(scheduler_stats, iteration_stats)`` on the Prometheus and the
logging stat loggers. An `arrive` is the frontend's ``add_request``, an `abort` its
``abort_requests`` (before the engine core's). Nothing is worked out here: the numbers are the
core's reports (``EngineStepRecord.update``), summed as the loggers sum them.

The replay has no wall clock: each `step` op lasts ``pace`` seconds (``--pace``), which is
what the log line's throughputs divide by. `points` gives, after every op, the numbers a
metrics panel draws; `recorder_at` rebuilds the loggers up to one op (its exposition, its line).
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.core.metrics import CACHE_HIT_SOURCES, DEVICE
from explorer.core.release import VLLM_0_31, VllmRelease, vllm_release
from explorer.core.sched.output import EngineCoreOutputs
from explorer.metrics.cache_info import CacheConfigInfo
from explorer.metrics.frontend import SOURCES, OutputProcessor
from explorer.metrics.log_line import LoggingStatLogger, LogLine
from explorer.metrics.prom import PrometheusStatLogger
from explorer.scenario.ops import Abort, EngineArrive, StepOp
from explorer.scenario.spec import Scenario
from explorer.scenario.trace import Step, Trace


@dataclass(frozen=True)
class MetricsPoint:
    """The counters and gauges after one op (what a scrape right after it would read)."""

    index: int  # the op's index in the scenario
    op: str
    updated: bool  # an update of the engine core was recorded in this op
    queries: int
    hits: int
    external_queries: int
    external_hits: int
    window_rate: float | None  # the log line's "Prefix cache hit rate" (None: window empty)
    external_window_rate: float | None
    by_source: tuple[int, int, int]  # prompt tokens: local_compute, local_cache_hit, external_kv_transfer
    prompt_tokens: int
    preemptions: int
    kv_cache_usage: float
    running: int
    waiting: int

    @property
    def total_rate(self) -> float | None:
        """hits / queries since the start: what the raw counters say."""
        return self.hits / self.queries if self.queries else None


class MetricsRecorder:
    def __init__(
        self,
        max_model_len: int,
        pace: float = 1.0,
        device_type: str = "cuda",
        num_speculative_tokens: int = 0,
        offloading: bool = False,
        release: VllmRelease = VLLM_0_31,
        kv_consumer: bool = False,
        cache_config: CacheConfigInfo | None = None,
    ) -> None:
        self.pace = pace
        self.now = 0.0
        self.frontend = OutputProcessor()
        self.prom = PrometheusStatLogger(
            max_model_len,
            num_speculative_tokens=num_speculative_tokens,
            offloading=offloading,
            release=release,
            kv_consumer=kv_consumer,
            cache_config=cache_config,
        )
        self.logger = LoggingStatLogger(lambda: self.now, device_type)
        self.release = release
        # 0.33.0's vllm:prompt_tokens_cached_by_source totals (None under 0.31.0, which has none).
        self.cached_by_source: dict[str, int] | None = (
            dict.fromkeys(CACHE_HIT_SOURCES, 0) if release.cached_by_source_metrics else None
        )
        self.queries = self.hits = self.external_queries = self.external_hits = 0
        self.by_source = dict.fromkeys(SOURCES, 0)
        self.prompt_tokens = self.preemptions = 0
        self.usage = 0.0
        self.running = self.waiting = 0

    def feed(self, step: Step) -> MetricsPoint:
        op = step.op
        updated = False
        if isinstance(op, EngineArrive):
            self.frontend.add_request(op.id, len(op.prompt), len(op.output))
        elif isinstance(op, Abort):
            self.frontend.abort_request(op.id)
        elif isinstance(op, StepOp):
            self.now += self.pace
            es = step.engine_step
            if es is not None and es.update is not None:
                self._record(es.update)
                updated = True
        return self.point(step.index, op.op, updated)

    def _record(self, update: EngineCoreOutputs) -> None:
        iteration_stats = self.frontend.process_outputs(update)
        stats = update.scheduler_stats
        self.prom.record(stats, iteration_stats)
        self.logger.record(stats, iteration_stats)
        if stats is not None:
            self.queries += stats.prefix_cache_stats.queries
            self.hits += stats.prefix_cache_stats.hits
            if stats.connector_prefix_cache_stats is not None:
                self.external_queries += stats.connector_prefix_cache_stats.queries
                self.external_hits += stats.connector_prefix_cache_stats.hits
            if self.cached_by_source is not None:
                self.cached_by_source[DEVICE] += stats.prefix_cache_stats.hits
                if stats.connector_prefix_cache_stats is not None:
                    for source, n in stats.connector_prefix_cache_stats.hits_by_source.items():
                        self.cached_by_source[source] += n
            self.usage = stats.kv_cache_usage
            self.running = stats.num_running_reqs
            self.waiting = stats.num_waiting_reqs + stats.num_skipped_waiting_reqs
        if iteration_stats is not None:
            for source in SOURCES:
                self.by_source[source] += iteration_stats.prompt_token_stats.get_by_source(source)
            self.prompt_tokens += iteration_stats.num_prompt_tokens
            self.preemptions += iteration_stats.num_preempted_reqs

    def point(self, index: int, op: str, updated: bool) -> MetricsPoint:
        local, external = self.logger.prefix_caching_metrics, self.logger.connector_prefix_caching_metrics
        return MetricsPoint(
            index=index,
            op=op,
            updated=updated,
            queries=self.queries,
            hits=self.hits,
            external_queries=self.external_queries,
            external_hits=self.external_hits,
            window_rate=None if local.empty else local.hit_rate,
            external_window_rate=None if external.empty else external.hit_rate,
            by_source=(self.by_source[SOURCES[0]], self.by_source[SOURCES[1]], self.by_source[SOURCES[2]]),
            prompt_tokens=self.prompt_tokens,
            preemptions=self.preemptions,
            kv_cache_usage=self.usage,
            running=self.running,
            waiting=self.waiting,
        )

    def exposition(self) -> str:
        return self.prom.exposition()

    def log(self) -> LogLine:
        return self.logger.log()

    @classmethod
    def for_scenario(cls, scenario: Scenario, pace: float = 1.0, device_type: str = "cuda") -> MetricsRecorder:
        """The loggers vLLM builds for the scenario's engine (with speculative decoding, its
        spec-decode counters, one per draft position; with the offloading connector, its
        scheduler-side families)."""
        sp = scenario.speculative
        k = 0 if sp is None else sp.num_speculative_tokens
        offloading = scenario.connector is not None and scenario.connector.kind == "offloading"
        # Every connector the explorer models is kv_both: it loads, so it is a KV consumer.
        kv_consumer = scenario.connector is not None
        release = vllm_release(scenario.vllm)
        eng = scenario.engine
        cache = CacheConfigInfo(eng.block_size, eng.enable_prefix_caching, eng.hash_algo, eng.num_blocks)
        return cls(eng.max_model_len, pace, device_type, k, offloading, release, kv_consumer, cache)


def check_engine_steps(trace: Trace) -> None:
    assert trace.scenario.sched is not None, "metrics are recorded from engine-step scenarios"


def points(trace: Trace, pace: float = 1.0) -> list[MetricsPoint]:
    """The numbers after every op of the trace, in order."""
    check_engine_steps(trace)
    rec = MetricsRecorder.for_scenario(trace.scenario, pace)
    return [rec.feed(step) for step in trace.steps]


def recorder_at(trace: Trace, upto: int | None = None, pace: float = 1.0, device_type: str = "cuda") -> MetricsRecorder:
    """The loggers after the first ``upto`` ops (all by default)."""
    check_engine_steps(trace)
    rec = MetricsRecorder.for_scenario(trace.scenario, pace, device_type)
    for step in trace.steps if upto is None else trace.steps[:upto]:
        rec.feed(step)
    return rec


def step_rate(pts: list[MetricsPoint], k: int, n: int, external: bool = False) -> float | None:
    """A PromQL ``rate(hits[w]) / rate(queries[w])`` over the last ``n`` engine steps up to op k,
    scraped once per step: the increase of hits over the increase of queries between the
    step ``n`` steps before and now (rate's extrapolation scales both alike). None when no
    query arrived in the window (PromQL: NaN)."""
    steps = [p for p in pts[: k + 1] if p.op == "step"]
    if not steps:
        return None
    now = steps[-1]
    before = steps[-n - 1] if len(steps) > n else None
    q0, h0 = (0, 0) if before is None else _counts(before, external)
    q1, h1 = _counts(now, external)
    return (h1 - h0) / (q1 - q0) if q1 > q0 else None


def step_rates(pts: list[MetricsPoint], n: int, external: bool = False) -> list[float | None]:
    """``step_rate(pts, k, n)`` for every k, in one pass."""
    out: list[float | None] = []
    seen: list[tuple[int, int]] = [(0, 0)]  # counts before the first step, then after each
    for p in pts:
        if p.op == "step":
            seen.append(_counts(p, external))
        if len(seen) == 1:
            out.append(None)
            continue
        q0, h0 = seen[max(0, len(seen) - 1 - n)]
        q1, h1 = seen[-1]
        out.append((h1 - h0) / (q1 - q0) if q1 > q0 else None)
    return out


def _counts(p: MetricsPoint, external: bool) -> tuple[int, int]:
    return (p.external_queries, p.external_hits) if external else (p.queries, p.hits)


PROMQL_HIT_RATE = "sum(rate(vllm:prefix_cache_hits_total[{w}])) / sum(rate(vllm:prefix_cache_queries_total[{w}]))"
PROMQL_EXTERNAL_HIT_RATE = (
    "sum(rate(vllm:external_prefix_cache_hits_total[{w}])) / sum(rate(vllm:external_prefix_cache_queries_total[{w}]))"
)
PROMQL_CACHED_SHARE = "sum(rate(vllm:prompt_tokens_cached_total[{w}])) / sum(rate(vllm:prompt_tokens_total[{w}]))"


def promql(window: str = "5m") -> list[str]:
    """The PromQL a user pastes into Grafana (spec part 2 rule 75), for a range ``window``."""
    return [q.format(w=window) for q in (PROMQL_HIT_RATE, PROMQL_EXTERNAL_HIT_RATE, PROMQL_CACHED_SHARE)]
