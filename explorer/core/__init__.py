"""A faithful, pure-Python model of vLLM 0.31.0's engine-core prefix cache.

Names follow vLLM (`KVCacheBlock`, `FreeKVCacheBlockQueue`, `BlockPool`, `KVCacheManager`,
`touch`, `get_new_blocks`, `allocate_slots`, `ref_cnt`, `num_computed_tokens`) so that a
reader of this package can read `vllm/v1/core/` next. Nothing here imports Streamlit, plotly
or torch, and nothing is module-global: every engine owns its NONE_HASH, hash function and
seed, because one web server serves every browser session.

In scope: one full-attention KV cache group, watermark 0, no KV connector, no EAGLE, KV cache
report mode "incremental". The single-type manager is its own class so that a sliding-window
group can join later without a rewrite.
"""
