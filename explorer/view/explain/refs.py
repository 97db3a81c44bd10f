"""The vLLM 0.31.0 functions, and their file:lines, that the explorer's sentences cite."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Ref:
    func: str
    loc: str  # repo-relative path:lines in vLLM 0.31.0

    def __str__(self) -> str:
        return f"{self.func} ({self.loc})"


_KCU = "vllm/v1/core/kv_cache_utils.py"
_BP = "vllm/v1/core/block_pool.py"
_KCM = "vllm/v1/core/kv_cache_manager.py"
_STM = "vllm/v1/core/single_type_kv_cache_manager.py"

REFS: dict[str, Ref] = {
    "request_init": Ref("Request.__init__ runs the block hasher (update_block_hashes)", "vllm/v1/request.py:225-231"),
    "append_output": Ref("Request.append_output_token_ids -> update_block_hashes", "vllm/v1/request.py:272-288"),
    "block_hasher": Ref("get_request_block_hasher", f"{_KCU}:836-895"),
    "hash_block_tokens": Ref("hash_block_tokens", f"{_KCU}:684-714"),
    "none_hash": Ref("init_none_hash / NONE_HASH", f"{_KCU}:104-172"),
    "extra_keys": Ref("generate_block_hash_extra_keys", f"{_KCU}:614-652"),
    "event_hash": Ref("maybe_convert_block_hash", f"{_KCU}:96-99"),
    "get_computed_blocks": Ref("KVCacheManager.get_computed_blocks", f"{_KCM}:264-321"),
    "hit_cap": Ref("max_cache_hit_length = num_tokens - 1", f"{_KCM}:295"),
    "find_longest_cache_hit": Ref("FullAttentionManager.find_longest_cache_hit", f"{_STM}:747-843"),
    "allocate_slots": Ref("KVCacheManager.allocate_slots", f"{_KCM}:371-614"),
    "admission_check": Ref(
        "allocate_slots' admission check (required_blocks > available_blocks: None)", f"{_KCM}:558-576"
    ),
    "blocks_to_allocate": Ref("get_num_blocks_to_allocate", f"{_STM}:178-268"),
    "touch": Ref("BlockPool.touch", f"{_BP}:755-771"),
    "get_new_blocks": Ref("BlockPool.get_new_blocks", f"{_BP}:669-703"),
    "cache_full_blocks": Ref("BlockPool.cache_full_blocks", f"{_BP}:226-344"),
    "tokens_to_cache": Ref("num_tokens_to_cache = min(computed + new, num_tokens)", f"{_KCM}:608-612"),
    "hash_map": Ref("BlockHashToBlockMap (duplicates kept)", f"{_BP}:35-133"),
    "free": Ref("SingleTypeKVCacheManager.free", f"{_STM}:562-589"),
    "free_blocks": Ref("BlockPool.free_blocks", f"{_BP}:777-808"),
    "evict": Ref("BlockPool._maybe_evict_cached_block", f"{_BP}:732-753"),
    "map_pop": Ref("BlockHashToBlockMap.pop", f"{_BP}:101-127"),
    "reset": Ref("BlockPool.reset_prefix_cache", f"{_BP}:830-869"),
    "reset_running": Ref(
        "Scheduler.reset_prefix_cache preempts the running queue from the end (_preempt_request)",
        "vllm/v1/core/sched/scheduler.py:2794-2804",
    ),
    "record_stats": Ref("record_prefix_cache_stats (at admission)", "vllm/v1/core/sched/scheduler.py:1252-1256"),
    "prefix_cache_stats": Ref("PrefixCacheStats", "vllm/v1/metrics/stats.py:116-143"),
    "caching_metrics": Ref("CachingMetrics (window of ~1000 requests)", "vllm/v1/metrics/stats.py:35-113"),
    "null_block": Ref("BlockPool.__init__ takes block 0 as the null block", f"{_BP}:157-196"),
}
