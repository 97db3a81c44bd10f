"""Random engine-step scenarios for the corners where the mirror once crashed or refused what
vLLM runs (design sections 7, 9, 10), TOML-shaped, valid by construction.

- ``random_tight_spec_raw_scenario(seed)``: speculative decoding under budgets near 1 + k
  with 1-3-token prompts (many of them repeated, so admissions are padded and some padded
  admissions do not fit), block sizes 1-16, every modelled method.
- ``random_offloading_reuse_raw_scenario(seed)``: the offloading connector under a small GPU
  pool and CPU tier, with request ids reused once their earlier request is gone (its stores
  completed) and the same prompts again, so the CPU tier gives blocks back to a reused id.
- ``random_length_capped_raw_scenario(seed)``: requests whose prompt + output exceed
  max_model_len: vLLM runs them and finishes them FINISHED_LENGTH_CAPPED at max_model_len.
- ``random_spec_threshold_raw_scenario(seed)``: drafts with ``long_prefill_token_threshold``
  in 1..k: vLLM runs it, asserting only when the threshold cuts a padded admission (then
  both replays stop at that step).
- ``random_offloading_groups_raw_scenario(seed)``: the offloading connector with hybrid KV
  cache groups (full attention and windows, every retention form), a CPU tier from one block
  to three times the largest request's blocks over all groups, and prompts repeated late, when
  the GPU pool has moved on and the CPU tier gives the window groups' chunks back.
  ``random_offloading_groups_spec_raw_scenario(seed)``: the same with EAGLE drafts (1-3
  speculative tokens, each decode step accepting 0 to k).

Standard library and the project's scenario generators only (never vLLM).
"""

from __future__ import annotations

import copy
import random
from typing import Any

from tests.conformance.spec_scenarios import METHODS, random_spec_engine_steps
from vllm_drivers.engine_step_scenarios import random_offloading_raw_scenario, random_raw_scenario


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def random_tight_spec_raw_scenario(seed: int) -> dict[str, Any]:
    rng = random.Random(f"tight-spec:{seed}")
    k = rng.randint(1, 4)
    method = rng.choice(METHODS)
    draft_slots = 1 if method == "draft_model" else 0
    bs = rng.choice((1, 2, 4, 16))
    budget = rng.randint(1 + draft_slots + 1, 1 + k + 2 * (1 + draft_slots) + 2)
    max_num_seqs = rng.randint(1, min(4, budget))
    prompts = [[rng.randrange(50) for _ in range(rng.randint(1, 3))] for _ in range(rng.randint(1, 3))]
    steps: list[dict[str, Any]] = []
    n_req = rng.randint(2, 7)
    for n in range(n_req):
        out_len = rng.randint(1, 8)
        steps.append(
            {
                "op": "arrive",
                "id": f"T{n}",
                "prompt": list(rng.choice(prompts)),
                "output": [rng.randrange(100, 200) for _ in range(out_len)],
                "accepted": [rng.choice((0, k, rng.randint(0, k))) for _ in range(out_len)],
            }
        )
        steps.extend({"op": "step"} for _ in range(rng.randint(0, 3)))
    steps.extend({"op": "step"} for _ in range(n_req * 9 + 4))
    largest = max(_cdiv(len(s["prompt"]) + len(s["output"]) + k + 1, bs) + 1 for s in steps if s["op"] == "arrive")
    engine = {
        "block_size": bs,
        "num_blocks": largest + rng.randint(1, 3 * largest),
        "hash_algo": "sha256",
        "scheduler": "sync",
        "max_num_batched_tokens": budget,
        "max_num_seqs": max_num_seqs,
        "speculative": {"method": method, "num_speculative_tokens": k},
    }
    return {"title": f"random tight speculative budgets (seed {seed})", "engine": engine, "steps": steps}


def random_offloading_reuse_raw_scenario(seed: int) -> dict[str, Any]:
    raw = copy.deepcopy(random_offloading_raw_scenario(seed))
    rng = random.Random(f"offloading-reuse:{seed}")
    eng = raw["engine"]
    eng["kv_connector"]["cpu_blocks"] = max(1, eng["kv_connector"]["cpu_blocks"] // 2)
    arrivals = [s for s in raw["steps"] if s["op"] == "arrive"]
    # Reused ids come at the end, each after enough steps for its earlier request (and the
    # stores of its last blocks) to be gone: vLLM keys the connector's state by request id.
    for _ in range(rng.randint(1, 4)):
        again = rng.choice(arrivals)
        raw["steps"].extend({"op": "step"} for _ in range(sum(len(a["output"]) for a in arrivals) + 8))
        raw["steps"].append({"op": "abort", "id": again["id"]})
        raw["steps"].extend({"op": "step"} for _ in range(3))
        raw["steps"].append({**copy.deepcopy(rng.choice(arrivals)), "id": again["id"]})
    raw["steps"].extend({"op": "step"} for _ in range(40))
    raw["title"] = f"random offloading under pressure with reused ids (seed {seed})"
    return raw


def random_length_capped_raw_scenario(seed: int) -> dict[str, Any]:
    raw = copy.deepcopy(random_raw_scenario(seed))
    rng = random.Random(f"length-capped:{seed}")
    eng = raw["engine"]
    arrivals = [s for s in raw["steps"] if s["op"] == "arrive"]
    longest = max(len(s["prompt"]) for s in arrivals)
    # max_model_len above every prompt (vLLM refuses a prompt of at least max_model_len) and
    # below some prompt + output.
    eng["max_model_len"] = longest + 1 + rng.randint(0, 12)
    if 0 < eng["long_prefill_token_threshold"] > eng["max_model_len"]:
        eng["long_prefill_token_threshold"] = 0
    for s in arrivals:
        # One token spec at most max_model_len tokens long (the scenario's size cap).
        s["output"] = (s["output"] + [rng.randrange(3000, 4000) for _ in range(rng.randint(0, 30))])[
            : eng["max_model_len"]
        ]
    raw["steps"].extend({"op": "step"} for _ in range(30))
    raw["title"] = f"random requests capped at max_model_len (seed {seed})"
    return raw


def random_spec_threshold_raw_scenario(seed: int) -> dict[str, Any]:
    raw = copy.deepcopy(random_spec_engine_steps(seed))
    rng = random.Random(f"spec-threshold:{seed}")
    k = raw["engine"]["speculative"]["num_speculative_tokens"]
    raw["engine"]["long_prefill_token_threshold"] = rng.randint(1, k)
    raw["title"] = f"random speculative steps with long_prefill_token_threshold <= k (seed {seed})"
    return raw


def random_offloading_groups_raw_scenario(seed: int) -> dict[str, Any]:
    raw = copy.deepcopy(random_raw_scenario(seed, hybrid=True))
    rng = random.Random(f"offloading-groups:{seed}")
    eng = raw["engine"]
    bs = eng["block_size"]
    sizes = [g.get("block_size", bs) for g in eng["kv_cache_groups"]]
    arrivals = [s for s in raw["steps"] if s["op"] == "arrive"]
    largest = max(sum(_cdiv(len(r["prompt"]), b) for b in sizes) for r in arrivals)
    eng["kv_connector"] = {
        "kind": "offloading",
        "cpu_blocks": rng.randint(1, 3 * largest + 1) if rng.random() < 0.3 else rng.randint(largest, 3 * largest + 1),
        "failure_policy": rng.choice(("fail", "recompute")),
    }
    # As for one group, what vLLM takes from a set is left out: one abort at most, and resets
    # without running.
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
    for n in range(rng.randint(1, 3)):
        again = rng.choice(arrivals)
        repeat = {**again, "id": f"{again['id']}-again{n}"}
        if rng.random() < 0.4:
            at = steps.index(again) + rng.randint(1, 3)
            steps[at:at] = [repeat]
        else:
            if rng.random() < 0.6:
                steps.extend({"op": "step"} for _ in range(40))  # mostly drained by then
                # The GPU prefix cache forgets (if nothing holds blocks), the CPU tier keeps.
                steps.append({"op": "reset", "running": False, "external": False})
            else:
                steps.extend({"op": "step"} for _ in range(rng.randint(4, 16)))
            steps.append(repeat)
        steps.extend({"op": "step"} for _ in range(rng.randint(1, 12)))
    raw["steps"] = steps
    raw["title"] = f"random engine steps with the offloading connector and hybrid KV cache groups (seed {seed})"
    return raw


def random_offloading_groups_spec_raw_scenario(seed: int) -> dict[str, Any]:
    raw = copy.deepcopy(random_offloading_groups_raw_scenario(seed))
    rng = random.Random(f"offloading-groups-spec:{seed}")
    k = rng.randint(1, 3)
    raw["engine"]["speculative"] = {"method": "eagle", "num_speculative_tokens": k}
    for step in raw["steps"]:
        if step["op"] == "arrive":
            step["accepted"] = [rng.randint(0, k) for _ in step["output"]]
    raw["title"] = f"random offloading with hybrid KV cache groups and EAGLE drafts (seed {seed})"
    return raw
