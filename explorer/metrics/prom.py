"""vLLM's PrometheusStatLogger (vllm/v1/metrics/loggers.py), for one engine, with
``prometheus_client``: the same families, types, labels, help texts and bucket bounds as the
release the scenario follows. 0.33.0 adds (the switch ``cached_by_source_metrics``)
``vllm:prompt_tokens_cached_by_source{source}``, ``vllm:admission_rejections{model_name,reason}``
(no engine label; a replay has no frontend queue limits, so it stays 0) and, with a KV consumer
connector, ``vllm:num_requests_kv_fetch_by_stage{stage}``.

Every family vLLM registers for a text-only engine without LoRA is here (with speculative
decoding, SpecDecodingProm's counters; with the offloading connector, its scheduler-side
families, offload_prom.py), except the timing histograms (TTFT, inter-token latency, time
per output token, e2e, queue, inference, prefill, decode: wall clock). Given the scenario's
cache settings, ``vllm:cache_config_info`` is registered as vLLM does once the engine is up
(cache_info.py). Counters are exported as
``*_total`` (plus ``*_created``) by prometheus_client. Each logger has its own registry: no
module-level state, one Streamlit server serves every session.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from explorer.core.metrics import CACHE_HIT_SOURCES, DEVICE
from explorer.core.release import VLLM_0_31, VllmRelease
from explorer.core.sched.output import KV_FETCH_STAGES, SchedulerStats
from explorer.metrics import cache_info
from explorer.metrics.frontend import FINISH_REASONS, SOURCES, IterationStats
from explorer.metrics.offload_prom import OffloadPromMetrics

MODEL_NAME = "explorer"
LABELS = ["model_name", "engine"]
ITERATION_TOKENS_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
REQUEST_PARAMS_N_BUCKETS = (1, 2, 5, 10, 20)
REQUEST_NUM_PREEMPTIONS_BUCKETS = (1, 2, 3, 4, 5, 10, 20)
# 0.33.0's frontend admission limits (loggers.py:46-47 there).
ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")


def request_tokens_buckets(max_model_len: int) -> list[float]:
    """1, 2, 5, 10, 20, 50, ... up to max_model_len (buckets.py: build_1_2_5_buckets)."""
    out: list[float] = []
    scale = 1
    while True:
        for m in (1, 2, 5):
            if m * scale > max_model_len:
                return out
            out.append(m * scale)
        scale *= 10


class PrometheusStatLogger:
    def __init__(
        self,
        max_model_len: int,
        model_name: str = MODEL_NAME,
        engine_index: int = 0,
        num_speculative_tokens: int = 0,
        offloading: bool = False,
        release: VllmRelease = VLLM_0_31,
        kv_consumer: bool = False,
        cache_config: cache_info.CacheConfigInfo | None = None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        lv = [model_name, str(engine_index)]
        reg = self.registry

        def gauge(name: str, doc: str) -> Any:
            return Gauge(name, doc, LABELS, registry=reg, multiprocess_mode="mostrecent").labels(*lv)

        def counter(name: str, doc: str) -> Any:
            return Counter(name, doc, LABELS, registry=reg).labels(*lv)

        def histogram(name: str, doc: str, buckets: Any) -> Any:
            return Histogram(name, doc, LABELS, registry=reg, buckets=buckets).labels(*lv)

        # PerfMetricsProm (vllm/v1/metrics/perf.py): registered always, counted only with
        # --enable-mfu-metrics (off by default).
        for what, doc in (("flops", "floating point operations"), ("read_bytes", "bytes read from memory")) + (
            ("write_bytes", "bytes written to memory"),
        ):
            counter(
                f"vllm:estimated_{what}_per_gpu_total",
                f"Estimated number of {doc} per GPU (for Model Flops Utilization calculations).",
            )
        self.gauge_scheduler_running = gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches."
        )
        self.gauge_scheduler_waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        by_reason = Gauge(
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling "
            "capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked "
            "status). Sum of all reasons equals vllm:num_requests_waiting.",
            LABELS + ["reason"],
            registry=reg,
            multiprocess_mode="mostrecent",
        )
        self.gauge_waiting_capacity = by_reason.labels(*lv, "capacity")
        self.gauge_waiting_deferred = by_reason.labels(*lv, "deferred")
        self.gauge_kv_fetch_by_stage: dict[str, Any] = {}
        if release.cached_by_source_metrics and kv_consumer:
            # Registered only for a connector that loads KV (kv_consumer or kv_both).
            by_stage = Gauge(
                "vllm:num_requests_kv_fetch_by_stage",
                "Number of waiting requests by async KV load stage. Stage labels: 'waiting_to_start' = "
                "needs an async KV load that has not started; 'in_progress' = load started and not yet "
                "reported finished; 'completed_waiting' = load finished, request not running yet.",
                LABELS + ["stage"],
                registry=reg,
                multiprocess_mode="mostrecent",
            )
            self.gauge_kv_fetch_by_stage = {st: by_stage.labels(*lv, st) for st in KV_FETCH_STAGES}
        sleep = Gauge(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
            "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
            LABELS + ["sleep_state"],
            registry=reg,
            multiprocess_mode="mostrecent",
        )
        for state, value in (("awake", 1), ("weights_offloaded", 0), ("discard_all", 0)):
            sleep.labels(*lv, state).set(value)
        self.gauge_kv_cache_usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.counter_prefix_cache_queries = counter(
            "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."
        )
        self.counter_prefix_cache_hits = counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."
        )
        self.counter_connector_prefix_cache_queries = counter(
            "vllm:external_prefix_cache_queries",
            "External prefix cache queries from KV connector cross-instance cache sharing, in terms of "
            "number of queried tokens.",
        )
        self.counter_connector_prefix_cache_hits = counter(
            "vllm:external_prefix_cache_hits",
            "External prefix cache hits from KV connector cross-instance cache sharing, in terms of "
            "number of cached tokens.",
        )
        # Multi-modal cache: registered, never incremented by a text-only engine.
        counter("vllm:mm_cache_queries", "Multi-modal cache queries, in terms of number of queried items.")
        counter("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items.")
        self.counter_num_preempted_reqs = counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine."
        )
        self.counter_prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        by_source = Counter(
            "vllm:prompt_tokens_by_source", "Number of prompt tokens by source.", LABELS + ["source"], registry=reg
        )
        self.counter_prompt_tokens_by_source = {s: by_source.labels(*lv, s) for s in SOURCES}
        self.counter_prompt_tokens_cached = counter(
            "vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external)."
        )
        self.counter_prompt_tokens_cached_by_source: dict[str, Any] = {}
        if release.cached_by_source_metrics:
            cached_by_source = Counter(
                "vllm:prompt_tokens_cached_by_source",
                "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host "
                "(offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or "
                "external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + "
                "vllm:external_prefix_cache_hits.",
                LABELS + ["source"],
                registry=reg,
            )
            self.counter_prompt_tokens_cached_by_source = {
                src: cached_by_source.labels(*lv, src) for src in CACHE_HIT_SOURCES
            }
        self.counter_generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            LABELS + ["finished_reason"],
            registry=reg,
        )
        self.counter_request_success = {r: success.labels(*lv, r) for r in FINISH_REASONS}
        tokens = request_tokens_buckets(max_model_len)
        self.histogram_num_prompt_tokens_request = histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens
        )
        self.histogram_num_generation_tokens_request = histogram(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", tokens
        )
        self.histogram_iteration_tokens = histogram(
            "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", ITERATION_TOKENS_BUCKETS
        )
        self.histogram_max_num_generation_tokens_request = histogram(
            "vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.",
            tokens,
        )
        self.histogram_n_request = histogram(
            "vllm:request_params_n", "Histogram of the n request parameter.", REQUEST_PARAMS_N_BUCKETS
        )
        self.histogram_max_tokens_request = histogram(
            "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", tokens
        )
        self.histogram_request_num_preemptions = histogram(
            "vllm:request_num_preemptions",
            "Histogram of the number of times a request was preempted.",
            REQUEST_NUM_PREEMPTIONS_BUCKETS,
        )
        self.histogram_prefill_kv_computed_request = histogram(
            "vllm:request_prefill_kv_computed_tokens",
            "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
            tokens,
        )
        if release.cached_by_source_metrics:
            rejections = Counter(
                "vllm:admission_rejections",
                "Number of admission attempts rejected by a queue limit, by reason.",
                ["model_name", "reason"],
                registry=reg,
            )
            for reason in ADMISSION_REASONS:
                rejections.labels(model_name, reason)
        # SpecDecodingProm (vllm/v1/spec_decode/metrics.py): registered only with a speculative
        # config, one accepted-tokens counter per draft position.
        self.spec_decode: tuple[Any, Any, Any, list[Any]] | None = None
        if num_speculative_tokens:
            per_pos = Counter(
                "vllm:spec_decode_num_accepted_tokens_per_pos",
                "Accepted tokens per draft position.",
                LABELS + ["position"],
                registry=reg,
            )
            self.spec_decode = (
                counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts."),
                counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens."),
                counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens."),
                [per_pos.labels(*lv, str(pos)) for pos in range(num_speculative_tokens)],
            )

        # The offloading connector's KVConnectorPromMetrics (OffloadPromMetrics).
        self.offload = OffloadPromMetrics(reg, LABELS, lv) if offloading else None
        if cache_config is not None:  # log_engine_initialized: the engine is up with its pool
            cache_info.register(reg, cache_config, release, engine_index)

    def record(self, scheduler_stats: SchedulerStats | None, iteration_stats: IterationStats | None) -> None:
        """loggers.py: PrometheusStatLogger.record, for engine 0 and no multi-modal cache."""
        if scheduler_stats is not None:
            s = scheduler_stats
            self.gauge_scheduler_running.set(s.num_running_reqs)
            self.gauge_scheduler_waiting.set(s.num_waiting_reqs + s.num_skipped_waiting_reqs)
            self.gauge_waiting_capacity.set(s.num_waiting_reqs)
            self.gauge_waiting_deferred.set(s.num_skipped_waiting_reqs)
            self.gauge_kv_cache_usage.set(s.kv_cache_usage)
            self.counter_prefix_cache_queries.inc(s.prefix_cache_stats.queries)
            for stage, g in self.gauge_kv_fetch_by_stage.items():
                g.set(s.num_kv_fetch_reqs_by_stage.get(stage, 0))
            self.counter_prefix_cache_hits.inc(s.prefix_cache_stats.hits)
            by_source = self.counter_prompt_tokens_cached_by_source
            if by_source:
                by_source[DEVICE].inc(s.prefix_cache_stats.hits)  # every local hit is the device's
            if s.connector_prefix_cache_stats is not None:
                self.counter_connector_prefix_cache_queries.inc(s.connector_prefix_cache_stats.queries)
                self.counter_connector_prefix_cache_hits.inc(s.connector_prefix_cache_stats.hits)
                if by_source:
                    for src, n in s.connector_prefix_cache_stats.hits_by_source.items():
                        by_source[src].inc(n)
            if s.spec_decoding_stats is not None and self.spec_decode is not None:
                sd = s.spec_decoding_stats
                drafts, draft_tokens, accepted, per_pos = self.spec_decode
                drafts.inc(sd.num_drafts)
                draft_tokens.inc(sd.num_draft_tokens)
                accepted.inc(sd.num_accepted_tokens)
                for c, n in zip(per_pos, sd.num_accepted_tokens_per_pos, strict=True):
                    c.inc(n)
            if s.kv_connector_stats is not None and self.offload is not None:
                self.offload.observe(s.kv_connector_stats)
        if iteration_stats is None:
            return
        it = iteration_stats
        pts = it.prompt_token_stats
        self.counter_num_preempted_reqs.inc(it.num_preempted_reqs)
        self.counter_prompt_tokens.inc(it.num_prompt_tokens)
        for source, c in self.counter_prompt_tokens_by_source.items():
            c.inc(pts.get_by_source(source))
        self.counter_prompt_tokens_cached.inc(pts.cached_tokens)
        self.counter_generation_tokens.inc(it.num_generation_tokens)
        self.histogram_iteration_tokens.observe(pts.computed + it.num_generation_tokens)
        for v in it.max_num_generation_tokens_iter:
            self.histogram_max_num_generation_tokens_request.observe(v)
        for v in it.n_params_iter:
            self.histogram_n_request.observe(v)
        for f in it.finished_requests:
            self.counter_request_success[f.finish_reason].inc()
            self.histogram_request_num_preemptions.observe(f.num_preemptions)
            self.histogram_prefill_kv_computed_request.observe(f.num_prompt_tokens - max(f.num_cached_tokens, 0))
            self.histogram_num_prompt_tokens_request.observe(f.num_prompt_tokens)
            self.histogram_num_generation_tokens_request.observe(f.num_generation_tokens)
            if f.max_tokens_param:
                self.histogram_max_tokens_request.observe(f.max_tokens_param)

    def exposition(self) -> str:
        """The text exposition format, as vLLM's /metrics serves it (generate_latest)."""
        return generate_latest(self.registry).decode("utf-8")
