"""The offloading connector's scheduler-side families, as vLLM 0.31.0's ``OffloadPromMetrics``
(kv_connector/v1/offloading/metrics.py, kv_offload/cpu/spec.py) exports them for the CPU tier.

Exported: ``vllm:kv_offload_allocation_failure`` (stores the tier refused),
``vllm:kv_offload_cpu_allocation_size`` (the chunks each store asked for) and the gauges
``vllm:kv_offload_cpu_cache_usage_perc``, ``_write_usage_perc``, ``_read_usage_perc``, from the
core's ``OffloadingConnectorStats`` of each update. As in vLLM, a series appears with its first
observation: the gauges with the first update, the histogram with the first store, the counter
with the first refusal. Not exported: the transfer families (bytes, times, sizes, and their
deprecated ``transfer_type`` forms), which come from the worker's transfer stats, and the
lookup delays (wall clock); ``vllm:kv_offload_stores_skipped`` is registered only with a store
threshold, which the explorer does not model.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from explorer.core.sched.output import OffloadingConnectorStats

CPU_ALLOCATION_SIZE_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144)
USAGE_DOCS = {
    "vllm:kv_offload_cpu_cache_usage_perc": "Fraction of CPU KV-cache space currently pinned by active transfers "
    "(0.0 = idle, 1.0 = saturated). Sustained high values indicate transfers (stores or promotions) may be "
    "dropped due to insufficient capacity.",
    "vllm:kv_offload_cpu_cache_write_usage_perc": "Fraction of CPU KV-cache space currently pinned by in-flight "
    "stores that have not yet completed (0.0 = idle, 1.0 = saturated).",
    "vllm:kv_offload_cpu_cache_read_usage_perc": "Fraction of CPU KV-cache space currently pinned by in-flight "
    "loads that have not yet completed (0.0 = idle, 1.0 = saturated).",
}


class OffloadPromMetrics:
    def __init__(self, registry: CollectorRegistry, labelnames: list[str], labelvalues: list[str]) -> None:
        self.lv = labelvalues
        self.usage, self.write_usage, self.read_usage = (
            Gauge(name, doc, labelnames, registry=registry) for name, doc in USAGE_DOCS.items()
        )
        self.allocation_size = Histogram(
            "vllm:kv_offload_cpu_allocation_size",
            "Histogram of the number of CPU chunks requested by each KV offload prepare_store call.",
            labelnames,
            registry=registry,
            buckets=CPU_ALLOCATION_SIZE_BUCKETS,
        )
        self.allocation_failure = Counter(
            "vllm:kv_offload_allocation_failure",
            "Number of KV offload store allocation attempts that failed.",
            labelnames,
            registry=registry,
        )

    def observe(self, stats: OffloadingConnectorStats) -> None:
        """One update's stats (OffloadPromMetrics.observe): gauges set, sizes observed, failures added."""
        self.usage.labels(*self.lv).set(stats.cpu_cache_usage)
        self.write_usage.labels(*self.lv).set(stats.cpu_cache_write_usage)
        self.read_usage.labels(*self.lv).set(stats.cpu_cache_read_usage)
        for size in stats.cpu_allocation_sizes:
            self.allocation_size.labels(*self.lv).observe(size)
        if stats.allocation_failures:
            self.allocation_failure.labels(*self.lv).inc(stats.allocation_failures)
