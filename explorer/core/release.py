"""The vLLM release the engine follows: 0.31.0 (the reference) or 0.33.0 (design section 15).

The two releases share every class here. Each measured difference between them (the drift
list of 0.31.0 -> 0.33.0) is one named switch of a `VllmRelease`, a frozen profile the engine
is built with and passes down; code that differs asks the switch, never the version string, so
a reader finds every place a release changes behaviour by the switch's name.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.core.errors import ConfigError


@dataclass(frozen=True)
class VllmRelease:
    version: str
    # 1. EAGLE-family hashes cover the token after each block (num_hash_lookahead_tokens,
    #    config/vllm.py:677-692 in 0.33.0): a block is hashed once its next token exists, its
    #    extra keys become (E, next token), BlockStored gains lookahead_token_ids, and the hit
    #    drop is gone.
    eagle_lookahead_hashes: bool
    # 2. Caching when sampled tokens arrive runs in Scheduler.update_from_output for the async
    #    scheduler OR any speculative decoding (scheduler.py:2403-2415 in 0.33.0), not only in
    #    AsyncScheduler._update_request_with_output (async_scheduler.py:59-78 in 0.31.0).
    cache_on_token_arrival_with_drafts: bool
    # 3. The offloading connector's CPU tier ranks chunks per request (request, -position) and
    #    refreshes them on access (LRUCachePolicy._get_request_rank,
    #    kv_offload/cpu/policies/lru.py:51-61, 108-152 in 0.33.0); a failed store frees its
    #    chunks with a metadata-only removal (complete_store, cpu/manager.py:382-410 in 0.33.0).
    request_scoped_cpu_lru: bool
    # 4. A hash block size (prefix_match_unit) different from the block size with one group
    #    is refused, since 0.32 (kv_cache_utils.py:843-857 in 0.33.0).
    refuse_hash_block_size_one_group: bool
    # 5. The metric families added since 0.32 (prompt_tokens_cached_by_source,
    #    admission_rejections, ...) and 0.33's cache_config_info labels.
    cached_by_source_metrics: bool
    # 6. A full-attention group whose blocks are larger than the hash block registers the
    #    prompt's partial tail at (num_prompt - 1) rounded down to the hash block (num_prompt
    #    with EAGLE), capped by the hashes the request has (_cache_partial_tail_block,
    #    single_type_kv_cache_manager.py:869-896 in 0.33.0; num_prompt in 0.31.0).
    partial_tail_below_last_token: bool
    # 7. cache_blocks caches only the full blocks the request has hashes for, whatever the
    #    method (single_type_kv_cache_manager.py:501-503 in 0.33.0; 0.31.0 takes every full
    #    block of num_tokens, single_type_kv_cache_manager.py:501). It matters where caching
    #    at token arrival is asked past the request's tokens: a verify step that accepted
    #    drafts beyond max_tokens leaves num_computed_tokens above the trimmed token count.
    cache_capped_by_hashes: bool
    # 8. A request that stops inside a step's tokens (a verify step past max_tokens) drops
    #    the trimmed tokens from num_computed_tokens, so it counts every kept token but the
    #    last, and its output placeholders are resolved by all the tokens returned, trimmed
    #    ones included (scheduler.py:2752-2769 in 0.33.0; 0.31.0 only trims the list in
    #    _update_request_with_output, scheduler.py:2442-2451, and the AsyncScheduler's override
    #    resolves the kept ones, async_scheduler.py:67-70).
    trim_computed_at_stop: bool
    # 9. The offloading connector's flush of a preempted request's jobs (preempted_req_ids in
    #    build_connector_meta) leaves out the loads of the step being built, which a reset with
    #    running can issue for the request it preempted (offloading/scheduler.py:2137-2151 in
    #    0.33.0); 0.31.0's build_connector_meta asserts that every such job is a store
    #    (offloading/scheduler.py:1788-1794).
    flush_skips_new_loads: bool
    # 10. The offloading connector's lookup for a request (get_num_new_matched_tokens, at its
    #     admission or re-admission after a preemption) sets next_stored_chunk_idx to 0, so the
    #     chunks it stored before are offered again (offloading/scheduler.py:1243-1245 in
    #     0.33.0); 0.31.0's get_num_new_matched_tokens clears only the block ids
    #     (offloading/scheduler.py:1063-1065).
    lookup_restarts_stores: bool
    # 11. With drafts, an async load's admission keeps free, for each in-flight prefill, the
    #     blocks of its whole sequence plus one decode step's slots (1 + k + lookahead) counted
    #     together (_request_remaining_blocks, scheduler.py:3404-3420 in 0.33.0), and for itself
    #     that step's blocks summed over the groups at each group's block size
    #     (_spec_decode_step_blocks, scheduler.py:371-381 in 0.33.0). 0.31.0 adds the step's
    #     own whole blocks at the scheduler's block size to each in-flight prefill
    #     (_request_remaining_blocks, scheduler.py:3003-3030), so it keeps a block more free
    #     whenever the step fits in a sequence's last partial block.
    spec_step_within_sequence: bool
    # 12. With hybrid groups an EAGLE group that drops its last hit block (with a KV connector,
    #     where 0.33.0 keeps the drop) may match up to the tokens the request has hashes for,
    #     len(block_hashes) * hash_block_size, before the drop (find_longest_cache_hit,
    #     kv_cache_coordinator.py:882-885 in 0.33.0, and find_longest_cache_hit_per_group,
    #     kv_cache_coordinator.py:968-971 in 0.33.0). 0.31.0 caps it at the lookup's
    #     max_cache_hit_length (kv_cache_coordinator.py:919-921), so a block-aligned hit up to
    #     the last full block keeps one block more under 0.33.0.
    eagle_lookup_to_hashed_length: bool
    # 13. With hybrid groups and an EAGLE drop, a window group's sparse retention also keeps
    #     the tail that reaches one block below a request's shared-prefix junction
    #     (reachable_boundaries, single_type_kv_cache_manager.py:513-520 in 0.33.0). 0.31.0
    #     keeps only the junction's (reachable_boundaries, single_type_kv_cache_manager.py:510-511).
    eagle_junction_block_below: bool


VLLM_0_31 = VllmRelease(
    version="0.31.0",
    eagle_lookahead_hashes=False,
    cache_on_token_arrival_with_drafts=False,
    request_scoped_cpu_lru=False,
    refuse_hash_block_size_one_group=False,
    cached_by_source_metrics=False,
    partial_tail_below_last_token=False,
    cache_capped_by_hashes=False,
    trim_computed_at_stop=False,
    flush_skips_new_loads=False,
    lookup_restarts_stores=False,
    spec_step_within_sequence=False,
    eagle_lookup_to_hashed_length=False,
    eagle_junction_block_below=False,
)
VLLM_0_33 = VllmRelease(
    version="0.33.0",
    eagle_lookahead_hashes=True,
    cache_on_token_arrival_with_drafts=True,
    request_scoped_cpu_lru=True,
    refuse_hash_block_size_one_group=True,
    cached_by_source_metrics=True,
    partial_tail_below_last_token=True,
    cache_capped_by_hashes=True,
    trim_computed_at_stop=True,
    flush_skips_new_loads=True,
    lookup_restarts_stores=True,
    spec_step_within_sequence=True,
    eagle_lookup_to_hashed_length=True,
    eagle_junction_block_below=True,
)
RELEASES: dict[str, VllmRelease] = {r.version: r for r in (VLLM_0_31, VLLM_0_33)}
DEFAULT_VLLM = VLLM_0_31.version


def vllm_release(version: str) -> VllmRelease:
    """The profile of ``version``; anything but a modelled release is a configuration error."""
    release = RELEASES.get(version)
    if release is None:
        raise ConfigError(f"unknown vLLM version {version!r} (modelled: {', '.join(RELEASES)})")
    return release
