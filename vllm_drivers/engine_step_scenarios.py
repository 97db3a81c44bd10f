"""Engine-step scenarios on the test side: a TOML loader and a random generator.

Both produce the normalized engine-step scenario that ``vllm_sched_driver.py`` reads (one JSON
object: ``{"kind": "engine_steps", "engine": {...}, "ops": [...]}``), from the design's section 7
syntax (``[engine] scheduler = ..., max_num_batched_tokens = ...``; ops ``arrive`` with
``output``, ``step``, ``abort``, ``reset``). Until the project's parser reads engine-step
scenarios, this is how the goldens in tests/scenario/golden/engine_steps/ reach the driver.

Standard library only: the driver (in vLLM's virtualenv) imports this file too, for its
``{"toml_file": ...}`` message. Prompts and outputs are int arrays or token specs
(``part := INT | INT:INT | INT*INT``, comma-separated; ``a:b`` is a..b-1, ``x*n`` repeats x).
"""

from __future__ import annotations

import copy
import math
import random
import tomllib
from pathlib import Path
from typing import Any

ENGINE_DEFAULTS: dict[str, Any] = {
    "block_size": 16,
    "num_blocks": 300,
    "max_model_len": 1048576,
    "hash_algo": "sha256",
    "hash_seed": "",
    "enable_prefix_caching": True,
    "events": True,
    "int_block_hashes": True,
    "scheduler": "async",
    "max_num_batched_tokens": 2048,
    "max_num_seqs": 64,
    "long_prefill_token_threshold": 0,
    "speculative": None,  # design section 9: { method, num_speculative_tokens }
}
ENGINE_STEP_OPS = ("arrive", "step", "abort", "reset")
EXTERNAL_KEYS = ("external_tokens", "external_load", "load_steps", "invalid_external_blocks")
MANAGER_OPS = ("admit", "sample", "decode", "generate", "finish", "preempt")
MAX_SPEC_TOKENS = 1 << 22  # every size has a cap
_TOKEN_LIMIT = 1 << 31


class ScenarioInputError(ValueError):
    """The engine-step TOML is bad input (one line, naming the step and field)."""


def parse_tokens(value: object, what: str) -> list[int]:
    """An int array or a token spec string -> the token ids."""
    if isinstance(value, list):
        if not all(type(t) is int and 0 <= t < _TOKEN_LIMIT for t in value):
            raise ScenarioInputError(f"{what}: every token must be an integer in [0, 2^31)")
        return list(value)
    if not isinstance(value, str):
        raise ScenarioInputError(f"{what}: a token spec string or an int array")
    out: list[int] = []
    for raw in value.split(","):
        part = raw.strip()
        nums = part.replace(":", " ").replace("*", " ").split()
        if not nums or not all(n.isascii() and n.isdigit() for n in nums) or len(nums) > 2:
            raise ScenarioInputError(f"{what}: bad token spec part {part!r}")
        ints = [int(n) for n in nums]
        if any(i >= _TOKEN_LIMIT for i in ints):
            raise ScenarioInputError(f"{what}: {part!r} has an integer outside [0, 2^31)")
        if len(ints) == 1:
            piece = ints
        elif ":" in part:
            if ints[0] > ints[1]:
                raise ScenarioInputError(f"{what}: range {part!r} runs backwards")
            piece = list(range(ints[0], ints[1]))
        else:
            piece = [ints[0]] * ints[1]
        if len(out) + len(piece) > MAX_SPEC_TOKENS:
            raise ScenarioInputError(f"{what}: more than {MAX_SPEC_TOKENS} tokens")
        out.extend(piece)
    return out


GROUP_KEYS = ("kv_cache_groups", "prefix_cache_retention_interval", "hash_block_size")


def normalize_groups(engine: dict[str, Any]) -> None:
    """Hybrid KV cache groups (design section 8) in the normalized form: every group with its
    block size, retention "dense" as None, hash_block_size resolved (the GCD by default)."""
    if not any(k in engine for k in GROUP_KEYS):
        return
    bs = engine["block_size"]
    raw = engine.get("kv_cache_groups") or [{"kind": "full_attention"}]
    engine["kv_cache_groups"] = [
        {"kind": g["kind"], "block_size": g.get("block_size", bs), "sliding_window": g.get("sliding_window")}
        for g in raw
    ]
    ri = engine.get("prefix_cache_retention_interval", 0)
    engine["prefix_cache_retention_interval"] = None if ri == "dense" else ri
    sizes = [g["block_size"] for g in engine["kv_cache_groups"]]
    engine["hash_block_size"] = (engine.get("hash_block_size") or math.gcd(*sizes)) if len(sizes) > 1 else sizes[0]


def normalize(raw: dict[str, Any]) -> dict[str, Any]:
    """A TOML-shaped engine-step scenario dict -> the normalized scenario the driver reads."""
    unknown = set(raw.get("engine", {})) - set(ENGINE_DEFAULTS) - set(GROUP_KEYS) - {"kv_connector"}
    if unknown:
        raise ScenarioInputError(f"[engine]: unknown keys {sorted(unknown)}")
    engine = {**ENGINE_DEFAULTS, **raw.get("engine", {})}
    if "kv_connector" in engine:  # design section 10
        engine["kv_connector"] = {"kind": "static", "load": "async", "failure_policy": "fail", **engine["kv_connector"]}
    engine["hash_seed"] = engine["hash_seed"] or None
    normalize_groups(engine)
    lora_ids: dict[str, int] = {}
    lora_paths: dict[str, str] = {}
    ops: list[dict[str, Any]] = []
    for index, step in enumerate(raw.get("steps", [])):
        name = step.get("op")
        where = f"step {index} ({name})"
        if name in MANAGER_OPS:
            raise ScenarioInputError(f"{where}: a manager-level op is bad input in an engine-step scenario")
        if name not in ENGINE_STEP_OPS:
            raise ScenarioInputError(f"{where}: unknown op")
        if name == "step":
            ops.append({"op": "step"})
        elif name == "reset":
            ops.append(
                {
                    "op": "reset",
                    "running": bool(step.get("running", False)),
                    "external": bool(step.get("external", False)),
                }
            )
        elif name == "abort":
            ops.append({"op": "abort", "id": str(step["id"])})
        else:
            for key in ("mm", "text"):
                if key in step:
                    raise ScenarioInputError(f"{where}: {key!r} is bad input in an engine-step scenario")
            if "output" not in step:
                raise ScenarioInputError(f"{where}: an arrive needs 'output' in an engine-step scenario")
            lora = step.get("lora")
            lora_op = None
            if lora is not None:
                path = step.get("lora_path", f"loras/{lora}")
                if lora_paths.setdefault(lora, path) != path:
                    raise ScenarioInputError(f"{where}: LoRA {lora!r} has two paths")
                lora_ids.setdefault(lora, len(lora_ids) + 1)
                lora_op = {"name": lora, "id": lora_ids[lora], "path": path}
            arrive = {
                "op": "arrive",
                "id": str(step["id"]),
                "prompt": parse_tokens(step["prompt"], f"{where}: prompt"),
                "output": parse_tokens(step["output"], f"{where}: output"),
                "lora": lora_op,
                "cache_salt": step.get("cache_salt"),
                "prompt_logprobs": bool(step.get("prompt_logprobs", False)),
                **{k: step[k] for k in EXTERNAL_KEYS if k in step},
            }
            if "accepted" in step:
                arrive["accepted"] = [int(a) for a in step["accepted"]]
            ops.append(arrive)
    return {"kind": "engine_steps", "engine": engine, "ops": ops}


def load_raw(path: str | Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        return tomllib.load(f)


def load_toml(path: str | Path) -> dict[str, Any]:
    """An engine-step scenario TOML -> the normalized scenario."""
    return normalize(load_raw(path))


def expects(raw: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """(op index, expect table) for every step of a TOML-shaped scenario that has one."""
    return [(i, dict(step["expect"])) for i, step in enumerate(raw.get("steps", [])) if "expect" in step]


# ---- the random generator -------------------------------------------------------------------

HASH_ALGOS = ("sha256", "sha256_cbor", "xxhash", "xxhash_cbor")


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _draw_groups(rng: random.Random, block_size: int) -> dict[str, Any]:
    """Hybrid engine keys: full attention and windows in either order, sometimes two windows
    or a larger group block size, every retention form."""

    def window() -> dict[str, Any]:
        return {
            "kind": "sliding_window",
            "sliding_window": rng.choice((1, block_size, block_size + 1, 2 * block_size, 5 * block_size)),
        }

    fa = {"kind": "full_attention"}
    groups = rng.choice(([fa, window()], [fa, window()], [window(), fa], [fa, window(), window()], [window()]))
    groups = [dict(g) for g in groups]
    if len(groups) > 1 and rng.random() < 0.3:
        rng.choice(groups)["block_size"] = 2 * block_size
    out: dict[str, Any] = {"kv_cache_groups": groups}
    lcm = math.lcm(*(g.get("block_size", block_size) for g in groups))
    out["prefix_cache_retention_interval"] = rng.choice((0, 0, "dense", lcm * rng.randint(1, 3)))
    return out


def under_both_schedulers(raw: dict[str, Any]) -> list[dict[str, Any]]:
    """A raw engine-step scenario as drawn and a copy of it under the other scheduler."""
    other = copy.deepcopy(raw)
    other["engine"]["scheduler"] = "sync" if raw["engine"]["scheduler"] == "async" else "async"
    return [raw, other]


def random_raw_scenario(seed: int, hybrid: bool = False) -> dict[str, Any]:
    """A random engine-step scenario, TOML-shaped (int arrays), valid by construction.

    Several requests arriving between steps (some sharing prefixes), small pools (so requests
    are preempted), budgets from 16 to 512 tokens, a small max_num_seqs, aborts of arrived ids,
    resets with and without running, both schedulers, outputs of 1-40 tokens. Valid where vLLM
    would refuse: max_num_batched_tokens >= max_num_seqs, long_prefill_token_threshold <=
    max_model_len, prompt + output <= max_model_len,
    every request fits the pool alone, no abort of an id that never arrived, and an xxhash
    scenario always names its seed (vLLM would draw a random one).
    """
    rng = random.Random(f"engine-steps:{seed}" + (":hybrid" if hybrid else ""))
    block_size = rng.choice((4, 8, 16, 16, 16))
    max_num_seqs = rng.randint(1, 6)
    budget = rng.choice((16, 24, 32, 48, 64, 96, 128, 200, 256, 384, 512))
    max_model_len = rng.choice((1048576, 1048576, 1048576, 160, 256))
    algo = rng.choice(HASH_ALGOS)
    hash_seed = "" if algo.startswith("sha256") and rng.random() < 0.6 else str(rng.randint(0, 10**6))
    engine: dict[str, Any] = {
        "block_size": block_size,
        "max_model_len": max_model_len,
        "hash_algo": algo,
        "hash_seed": hash_seed,
        "enable_prefix_caching": rng.random() < 0.9,
        "events": rng.random() < 0.9,
        "int_block_hashes": rng.random() < 0.8,
        "scheduler": rng.choice(("sync", "async")),
        "max_num_batched_tokens": budget,
        "max_num_seqs": max_num_seqs,
        # vLLM refuses a threshold above max_model_len (config/scheduler.py:353-358).
        "long_prefill_token_threshold": rng.randint(1, min(budget, max_model_len)) if rng.random() < 0.25 else 0,
    }

    # Requests first: prompts share prefixes of a few documents, so lookups hit.
    docs = [[rng.randrange(1000) for _ in range(rng.randint(1, 160))] for _ in range(rng.randint(1, 3))]
    loras = ("adapter-a", "adapter-b")
    requests: list[dict[str, Any]] = []
    for n in range(rng.randint(2, 8)):
        out_len = rng.randint(1, 40)
        doc = rng.choice(docs)
        prefix = doc[: rng.randint(0, len(doc))]
        suffix = [rng.randrange(1000, 2000) for _ in range(rng.randint(0 if prefix else 1, 60))]
        prompt = (prefix + suffix)[: max_model_len - out_len]
        step: dict[str, Any] = {
            "op": "arrive",
            "id": f"R{n}",
            "prompt": prompt,
            "output": [rng.randrange(2000, 3000) for _ in range(out_len)],
        }
        if rng.random() < 0.1:
            step["lora"] = rng.choice(loras)
        if rng.random() < 0.1:
            step["cache_salt"] = rng.choice(("salt-1", "salt-2"))
        if rng.random() < 0.08:
            step["prompt_logprobs"] = True
        requests.append(step)
    # The pool holds the largest request alone, and little more: preemption under pressure.
    sizes = [block_size]
    if hybrid:
        engine.update(_draw_groups(rng, block_size))
        sizes = [g.get("block_size", block_size) for g in engine["kv_cache_groups"]]
    largest = max(sum(_cdiv(len(r["prompt"]) + len(r["output"]), bs) for bs in sizes) for r in requests)
    engine["num_blocks"] = largest + 1 + rng.randint(0, 2 * largest)

    steps: list[dict[str, Any]] = []
    arrived: list[str] = []

    def some_steps(most: int) -> None:
        for _ in range(rng.randint(0, most)):
            steps.append({"op": "step"})
            if arrived and rng.random() < 0.06:
                steps.append({"op": "abort", "id": rng.choice(arrived)})
            if rng.random() < 0.04:
                steps.append({"op": "reset", "running": rng.random() < 0.5, "external": rng.random() < 0.2})

    for req in requests:
        steps.append(req)
        arrived.append(req["id"])
        some_steps(4)
    some_steps(20)
    if rng.random() < 0.7:
        # Mostly enough steps to drain: every prefill chunk and decode, a few requests at a time.
        work = sum(_cdiv(len(r["prompt"]), budget) + len(r["output"]) for r in requests)
        steps.extend({"op": "step"} for _ in range(work // max(1, min(max_num_seqs, len(requests)) // 2) + 4))
    steps.append({"op": "step"})
    return {"title": f"random engine steps (seed {seed})", "engine": engine, "steps": steps}


def random_scenario(seed: int) -> dict[str, Any]:
    """The normalized form of ``random_raw_scenario(seed)``."""
    return normalize(random_raw_scenario(seed))


def random_connector_raw_scenario(seed: int) -> dict[str, Any]:
    """``random_raw_scenario`` with a static KV connector (design section 10), TOML-shaped.

    Each request may be held by the store (0 to all of its prompt; a sync load at most all but
    one token, as vLLM asserts), loaded sync or async, for 1-3 batch outputs; one request of the
    scenario may report invalid blocks; both failure policies. What vLLM takes from a set is
    left out, as design section 7 says: at most one abort (two aborted loads could finish
    together), one request with invalid blocks (two could fail together), and resets without
    ``running`` (a reset with running while a load holds blocks raises in vLLM).
    """
    raw = random_raw_scenario(seed)
    rng = random.Random(f"engine-steps-connector:{seed}")
    load = rng.choice(("async", "sync"))
    raw["engine"]["kv_connector"] = {
        "kind": "static",
        "load": load,
        "failure_policy": rng.choice(("fail", "recompute")),
    }
    bs = raw["engine"]["block_size"]
    invalid_left = 1
    steps: list[dict[str, Any]] = []
    aborted = False
    for step in raw["steps"]:
        if step["op"] == "abort":
            if aborted:
                continue
            aborted = True
        if step["op"] == "reset":
            step = {**step, "running": False, "external": rng.random() < 0.6}
        if step["op"] == "arrive" and rng.random() < 0.8:
            n = len(step["prompt"])
            req_load = rng.choice(("async", "sync")) if rng.random() < 0.3 else load
            most = n if req_load == "async" else n - 1
            step = {**step, "external_tokens": rng.randint(0, most) if rng.random() < 0.7 else most}
            if req_load != load:
                step["external_load"] = req_load
            if req_load == "async" and rng.random() < 0.3:
                step["load_steps"] = rng.randint(1, 3)
            if invalid_left and rng.random() < 0.25:
                invalid_left -= 1
                num_blocks = _cdiv(n + len(step["output"]), bs)
                step["invalid_external_blocks"] = sorted(rng.sample(range(num_blocks), min(2, num_blocks)))
        steps.append(step)
    raw["steps"] = steps
    raw["title"] = f"random engine steps with a KV connector (seed {seed})"
    return raw


def random_offloading_raw_scenario(seed: int) -> dict[str, Any]:
    """``random_raw_scenario`` with the offloading connector (design section 10), TOML-shaped.

    A CPU tier from one block to three times the largest request (so some requests do not fit
    it, and it evicts), over the base generator's small GPU pool and shared prefixes (so the
    GPU cache loses blocks that the CPU tier gives back). As for the static connector, what
    vLLM takes from a set is left out: at most one abort, and resets without ``running``.
    """
    raw = random_raw_scenario(seed)
    rng = random.Random(f"engine-steps-offloading:{seed}")
    bs = raw["engine"]["block_size"]
    arrivals = [s for s in raw["steps"] if s["op"] == "arrive"]
    largest = max(_cdiv(len(r["prompt"]), bs) for r in arrivals)
    raw["engine"]["kv_connector"] = {
        "kind": "offloading",
        "cpu_blocks": rng.randint(1, 3 * largest + 1),
        "failure_policy": rng.choice(("fail", "recompute")),
    }
    steps: list[dict[str, Any]] = []
    aborted = False
    for step in raw["steps"]:
        if step["op"] == "abort":
            if aborted:
                continue
            aborted = True
        if step["op"] == "reset":
            step = {**step, "running": False, "external": rng.random() < 0.5}
        steps.append(step)
    # Later requests repeat earlier prompts (new ids): soon after (a store may still be in
    # flight) or at the end, after the GPU pool has moved on.
    for n in range(rng.randint(1, 3)):
        again = rng.choice(arrivals)
        repeat = {**again, "id": f"{again['id']}-again{n}"}
        if rng.random() < 0.5:
            at = steps.index(again) + rng.randint(1, 3)
            steps[at:at] = [repeat]
        else:
            steps.append(repeat)
        steps.extend({"op": "step"} for _ in range(rng.randint(1, 12)))
    raw["steps"] = steps
    raw["title"] = f"random engine steps with the offloading connector (seed {seed})"
    return raw
