"""What both vLLM drivers build vLLM's configs from (runs in .venv-vllm; imported by
vllm_driver.py and vllm_sched_driver.py, which run as scripts from this folder): a normalized
scenario's engine keys -> vLLM's KVCacheGroupSpecs, hash and scheduler block sizes and retention
interval, and the tiny model shape whose config.json ModelConfig reads."""

from __future__ import annotations

import math

import torch
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheGroupSpec, SlidingWindowSpec

# A 2-layer Llama shape: ModelConfig reads only config.json (no weights, no tokenizer); each
# driver adds the max_position_embeddings its max_model_len needs.
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 1000,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def kv_cache_groups(eng: dict) -> tuple[list, int, int, int | None]:
    """The KVCacheGroupSpecs of an engine, normalized or as a TOML has it (one full-attention
    group without ``kv_cache_groups``), the hash and scheduler block sizes, and the retention."""
    bs = int(eng["block_size"])
    raw = eng.get("kv_cache_groups") or [{"kind": "full_attention", "block_size": bs, "sliding_window": None}]
    groups = []
    for i, g in enumerate(raw):
        common = {
            "block_size": int(g.get("block_size") or bs),
            "num_kv_heads": 1,
            "head_size": 1,
            "dtype": torch.float32,
        }
        if g["kind"] == "sliding_window":
            spec = SlidingWindowSpec(**common, sliding_window=int(g["sliding_window"]))
        else:
            spec = FullAttentionSpec(**common)
        groups.append(KVCacheGroupSpec([f"{g['kind']}.{i}"], spec))
    sizes = [int(g.get("block_size") or bs) for g in raw]
    hash_bs = int(eng.get("hash_block_size") or math.gcd(*sizes)) if len(sizes) > 1 else sizes[0]
    retention = eng.get("prefix_cache_retention_interval", 0)  # a raw TOML's "dense" is vLLM's None
    return groups, hash_bs, math.lcm(*sizes), None if retention == "dense" else retention


def check_release(eng: dict) -> None:
    """A scenario names the release it expects (``engine.vllm``, default 0.31.0); a driver
    running another one refuses it, so a wrong venv can never pass for the right one."""
    import vllm

    wanted = eng.get("vllm", "0.31.0")
    if not vllm.__version__.startswith(wanted):
        raise ValueError(f"scenario expects vLLM {wanted}, this driver runs vLLM {vllm.__version__}")
