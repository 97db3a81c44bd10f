"""The random scenario generator's knobs: profiles (op weights, lengths, features) and engine draws."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from explorer.scenario.spec import ENGINE_DEFAULTS

_EXPLICIT_SEEDS = ("0", "1", "42", "abc", "vllm-none-hash", "prefix-cache")


@dataclass(frozen=True)
class Profile:
    """Knobs of a generator run. Lengths are in blocks unless named tokens."""

    name: str
    max_live: int = 6  # live (not finished) requests at most
    system_prompts: tuple[int, int] = (2, 4)  # how many shared system prompts
    system_blocks: tuple[int, int] = (1, 4)  # length of one, in blocks
    suffix_blocks: tuple[int, int] = (0, 3)  # fresh tokens after a shared prefix
    fresh_blocks: tuple[int, int] = (0, 6)  # a prompt sharing nothing
    gen_tokens: tuple[int, int] = (1, 24)  # tokens per sample / generate op
    # op weights
    w_arrive: float = 3.0
    w_admit: float = 4.0
    w_continue: float = 3.0
    w_output: float = 3.0
    w_finish: float = 2.0
    w_preempt: float = 0.7
    w_reset: float = 0.35
    p_chunk: float = 0.35  # an admit names `tokens`
    p_reuse_id: float = 0.4  # a new arrival takes the id of a finished request
    # request features
    p_lora: float = 0.25
    p_salt: float = 0.15
    p_mm: float = 0.25
    p_logprobs: float = 0.08
    p_spec_string: float = 0.4  # a prompt written as a token spec, not an int array
    # engine: None = drawn per seed; else these settings
    engine: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


PROFILES: dict[str, Profile] = {
    # Every feature, small pools, all four hash algorithms, all engine switches.
    "mixed": Profile("mixed"),
    # "mixed" with hybrid KV cache groups (design section 8): windows, group block sizes, retention.
    "hybrid": Profile("hybrid", extra={"hybrid": True}),
    # One long run for `python -m explorer bench`: a serving-like mix with shared system
    # prompts, long prompts, decoding and steady eviction pressure.
    "bench": Profile(
        "bench",
        max_live=12,
        system_prompts=(6, 6),
        system_blocks=(8, 40),
        suffix_blocks=(1, 12),
        fresh_blocks=(4, 30),
        gen_tokens=(8, 64),
        w_arrive=3.0,
        w_admit=4.0,
        w_continue=2.0,
        w_output=5.0,
        w_finish=2.5,
        w_preempt=0.2,
        w_reset=0.02,
        p_chunk=0.15,
        p_reuse_id=0.3,
        p_lora=0.1,
        p_salt=0.05,
        p_mm=0.1,
        p_logprobs=0.02,
        p_spec_string=0.0,
        engine={
            "block_size": 16,
            "num_blocks": 320,
            "max_model_len": ENGINE_DEFAULTS["max_model_len"],
            "hash_algo": "sha256",
            "hash_seed": "",
            "enable_prefix_caching": True,
            "events": True,
            "int_block_hashes": True,
        },
    ),
}


# ---- engine settings --------------------------------------------------------------------------


def draw_engine(rng: random.Random) -> dict[str, Any]:
    bs = rng.choices([1, 2, 3, 4, 8, 16], weights=[2, 3, 1, 3, 2, 4])[0]
    pressure = rng.choices(["tight", "medium", "loose"], weights=[3, 4, 2])[0]
    num_blocks = {"tight": rng.randint(3, 12), "medium": rng.randint(13, 40), "loose": rng.randint(41, 200)}[pressure]
    algo = rng.choice(["sha256", "sha256_cbor", "xxhash", "xxhash_cbor"])
    explicit = rng.random() < (0.5 if algo.startswith("xxhash") else 0.3)
    eng: dict[str, Any] = {
        "block_size": bs,
        "num_blocks": num_blocks,
        "hash_algo": algo,
        "hash_seed": rng.choice(_EXPLICIT_SEEDS) if explicit else "",
        "enable_prefix_caching": rng.random() < 0.85,
        "events": rng.random() < 0.75,
        "int_block_hashes": rng.random() < 0.5,
    }
    if rng.random() < 0.2:
        eng["max_model_len"] = bs * rng.randint(5, 14) + rng.randint(0, bs - 1)
    # Leave some keys out, so the defaults are exercised too.
    defaults = {
        "block_size": 16,
        "hash_algo": "sha256",
        "hash_seed": "",
        "enable_prefix_caching": True,
        "events": True,
        "int_block_hashes": True,
    }
    for k, v in defaults.items():
        if eng.get(k) == v and rng.random() < 0.5:
            del eng[k]
    return eng


def draw_groups(rng: random.Random, eng: dict[str, Any]) -> dict[str, Any]:
    """Hybrid engine keys for a drawn engine: full attention and sliding windows in either
    order (sometimes two windows, sometimes two groups of one spec, sometimes one group),
    group block sizes that are multiples of the engine's, and every retention form."""
    bs = eng.get("block_size", ENGINE_DEFAULTS["block_size"])

    def window() -> dict[str, Any]:
        w = rng.choice([1, 2, bs, bs + 1, 2 * bs, 2 * bs + 3, 3 * bs, 5 * bs])
        return {"kind": "sliding_window", "sliding_window": max(1, w)}

    fa: dict[str, Any] = {"kind": "full_attention"}
    shape = rng.choices(["fa_swa", "swa_fa", "fa_swa_swa", "same_spec", "swa", "fa"], weights=[5, 2, 3, 1, 1, 1])[0]
    w = window()
    groups = {
        "fa_swa": [fa, w],
        "swa_fa": [w, fa],
        "fa_swa_swa": [fa, w, window()],
        "same_spec": [fa, w, dict(w)],
        "swa": [w],
        "fa": [fa],
    }[shape]
    groups = [dict(g) for g in groups]
    if len(groups) > 1 and rng.random() < 0.3:
        rng.choice(groups)["block_size"] = bs * rng.choice([2, 3, 4])
    sizes = [g.get("block_size", bs) for g in groups]
    lcm = math.lcm(*sizes)
    out: dict[str, Any] = {"kv_cache_groups": groups}
    has_window = any(g["kind"] == "sliding_window" for g in groups)
    ri = rng.random()
    if has_window and ri < 0.3:
        out["prefix_cache_retention_interval"] = "dense"
    elif has_window and ri < 0.5:
        out["prefix_cache_retention_interval"] = lcm * rng.randint(1, 3)
    elif ri < 0.75:
        out["prefix_cache_retention_interval"] = 0
    gcd = math.gcd(*sizes)
    if len(groups) > 1 and rng.random() < 0.25:
        out["hash_block_size"] = rng.choice([d for d in range(1, gcd + 1) if gcd % d == 0])
    # Every group holds its own table: give the pool room for about as many requests.
    eng["num_blocks"] = min(eng.get("num_blocks", 300) * len(groups), 524_288)
    return out
