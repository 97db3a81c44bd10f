"""``vllm:cache_config_info``: the info gauge (value 1) vLLM's PrometheusStatLogger registers
once the engine is initialized (loggers.py: log_engine_initialized -> log_metrics_info), one
label per attribute of the engine's CacheConfig, each value ``str()`` of it (cache.py:
metrics_info), plus ``engine``; no ``model_name`` label.

The scenario sets the block size, prefix caching, the hash algorithm and the pool
(``num_gpu_blocks``, which vLLM learns from profiling the GPU and the explorer is given). Every
other label is CacheConfig's default as vLLM builds it on the CPU harness the conformance tier
runs (a dense full-attention model, no mamba, no KV offloading size, no memory profiling), so:
``gpu_memory_utilization`` 0.92 and ``num_cpu_blocks`` None (no GPU profiled);
``sliding_window`` None and ``prefix_cache_retention_interval`` 0 also for a hybrid scenario,
whose groups are the KV cache config's, not the cache config's; ``kv_offloading_size`` None
and ``kv_offloading_backend`` native also with the offloading connector, which is configured
through the KV transfer config; ``user_specified_block_size`` True (every scenario names one).
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Gauge

from explorer.core.release import VllmRelease

FAMILY = "vllm:cache_config_info"
DOCUMENTATION = "Information of the LLMEngine CacheConfig"


@dataclass(frozen=True)
class CacheConfigInfo:
    """The engine settings of a scenario that vLLM's CacheConfig carries."""

    block_size: int
    enable_prefix_caching: bool
    prefix_caching_hash_algo: str
    num_gpu_blocks: int

    def labels(self, release: VllmRelease, engine_index: int = 0) -> dict[str, str]:
        """The gauge's labels in CacheConfig's field order, as the release names them: 0.33.0
        drops ``user_specified_mamba_block_size`` and adds ``simple_cpu_offload_num_blocks``,
        ``hash_block_size`` and ``cache_hit_alignment_tokens`` (``cached_by_source_metrics``)."""
        since_033 = release.cached_by_source_metrics
        out: dict[str, str] = {
            "block_size": str(self.block_size),
            "user_specified_block_size": "True",
        }
        if not since_033:
            out["user_specified_mamba_block_size"] = "False"
        out |= {
            "kv_cache_layout": "None",
            "prefix_match_unit": "None",
            "gpu_memory_utilization": "0.92",
            "cache_dtype": "auto",
            "is_attention_free": "False",
            "num_gpu_blocks_override": "None",
            "sliding_window": "None",
            "enable_prefix_caching": str(self.enable_prefix_caching),
            "prefix_caching_hash_algo": self.prefix_caching_hash_algo,
            "prefix_cache_retention_interval": "0",
            "kv_cache_dtype_skip_layers": "[]",
            "mamba_page_size_padded": "None",
            "skip_page_size_padded": "None",
            "mamba_block_size": "None",
            "mamba_cache_dtype": "auto",
            "mamba_ssm_cache_dtype": "auto",
            "mamba_cache_mode": "none",
            "enable_mamba_shared_prefix_checkpoint": "False",
            "replayssm_buffer_len": "16",
            "use_replayssm": "False",
            "use_kda_recoverssm": "False",
            "num_gpu_blocks": str(self.num_gpu_blocks),
            "num_cpu_blocks": "None",
        }
        if since_033:
            out["simple_cpu_offload_num_blocks"] = "None"
        out |= {
            "effective_attention_block_size": "None",
            "kv_cache_size_tokens": "None",
            "kv_cache_max_concurrency": "None",
        }
        if since_033:
            out |= {"hash_block_size": "None", "cache_hit_alignment_tokens": "None"}
        out |= {
            "kv_sharing_fast_prefill": "False",
            "swa_bounded_replay": "True",
            "kv_cache_memory_bytes": "None",
            "kv_offloading_size": "None",
            "kv_offloading_backend": "native",
            "_block_size_resolved": "True",
            "engine": str(engine_index),
        }
        return out


def register(registry: CollectorRegistry, info: CacheConfigInfo, release: VllmRelease, engine_index: int = 0) -> None:
    """Register the gauge in ``registry`` and set its one series to 1."""
    labels = info.labels(release, engine_index)
    gauge = Gauge(FAMILY, DOCUMENTATION, list(labels), registry=registry, multiprocess_mode="mostrecent")
    gauge.labels(**labels).set(1)
