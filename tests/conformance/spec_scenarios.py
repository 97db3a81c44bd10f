"""Random speculative-decoding scenarios (design section 9), TOML-shaped, valid by construction.

- ``random_spec_engine_steps(seed)``: the engine-step generator's scenario for ``seed``
  (engine_step_scenarios.random_raw_scenario) under the sync scheduler (``scheduler="async"``:
  the async one, the same draws otherwise) with drafts: a drawn
  method and ``num_speculative_tokens``, an ``accepted`` list per request, a pool one lookahead
  larger, a ``long_prefill_token_threshold`` vLLM does not assert on, and repeats of earlier
  prompts that leave one token to compute (padded admissions). ``hybrid=True``: the engine-step
  generator's hybrid KV cache groups, and a pool one decode step's slots larger per group.
- ``random_spec_manager(seed)``: a manager-level scenario of arrivals, admissions (some
  chunked), decodes verifying drafts each followed by the `sample` of 1 to d + 1 tokens, plain
  samples, decodes and generates, finishes, preemptions and resets, replayed as it is drawn
  by our own engine so every step is valid in the state before it. ``hybrid=True``: groups as
  the manager-level generator draws them (randgen_profiles.draw_groups).
- ``random_connector_spec_raw_scenario(seed)``: the connector generator's scenario with drafts.

Standard library and the project only (never vLLM): the scenarios go to both replays.
"""

from __future__ import annotations

import copy
import random
from dataclasses import replace
from typing import Any

from explorer.core.request import RequestStatus
from explorer.scenario.engine import ScenarioEngine
from explorer.scenario.parse import StepParser, parse_scenario_dict
from explorer.scenario.randgen_profiles import draw_groups
from vllm_drivers.engine_step_scenarios import (
    random_connector_raw_scenario,
    random_offloading_raw_scenario,
    random_raw_scenario,
)

# The methods vLLM 0.31.0 builds for a Llama target on the CPU (the rest are bad input).
METHODS = ("eagle", "eagle3", "draft_model", "ngram")
# ... and those it builds under the async scheduler (ngram's drafter is refused there).
ASYNC_METHODS = ("eagle", "eagle3", "draft_model")


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def random_spec_engine_steps(seed: int, hybrid: bool = False, scheduler: str = "sync") -> dict[str, Any]:
    raw = copy.deepcopy(random_raw_scenario(seed, hybrid))
    rng = random.Random(f"spec-engine-steps:{seed}" + (":hybrid" if hybrid else ""))
    eng = raw["engine"]
    k = rng.randint(1, 4)
    eng["scheduler"] = scheduler
    method = rng.choice(METHODS)
    if scheduler == "async" and method not in ASYNC_METHODS:
        method = rng.choice(ASYNC_METHODS)  # vLLM refuses ngram under async scheduling
    eng["speculative"] = {"method": method, "num_speculative_tokens": k}
    groups = eng.get("kv_cache_groups", [{}])
    eng["num_blocks"] += sum(_cdiv(k + 1, g.get("block_size", eng["block_size"])) + 1 for g in groups)
    if 0 < eng["long_prefill_token_threshold"] <= k:
        eng["long_prefill_token_threshold"] = 0
    # Repeats of earlier prompts cut to a multiple of the block size plus one: once the original
    # is cached, one token is left to compute, and the admission is padded (scheduler.py:1086-1108).
    bs = eng["block_size"]
    steps = raw["steps"]
    for n, original in enumerate([st for st in steps if st["op"] == "arrive" and len(st["prompt"]) > bs]):
        if rng.random() < 0.6:
            cut = (len(original["prompt"]) - 1) // bs * bs + 1
            at = steps.index(original) + rng.randint(2, 12)
            copy_of = {"op": "arrive", "id": f"P{n}", "prompt": original["prompt"][:cut], "output": [7, 8, 9]}
            steps[at:at] = [copy_of, {"op": "step"}, {"op": "step"}]
    for step in steps:
        if step["op"] == "arrive":
            n = rng.randint(0, len(step["output"]))
            step["accepted"] = [rng.choice((0, k, rng.randint(0, k))) for _ in range(n)]
    raw["title"] = f"random speculative engine steps (seed {seed})" + ("" if scheduler == "sync" else f", {scheduler}")
    return raw


def random_spec_manager(seed: int, num_ops: int = 60, hybrid: bool = False) -> dict[str, Any]:
    rng = random.Random(f"spec-manager:{seed}" + (":hybrid" if hybrid else ""))
    bs = rng.choice((4, 8, 16, 16))
    k = rng.randint(1, 4)
    engine: dict[str, Any] = {
        "block_size": bs,
        "num_blocks": rng.randint(12, 48),
        "max_model_len": rng.choice((1048576, 1048576, 160)),
        "enable_prefix_caching": rng.random() < 0.9,
        "speculative": {"method": rng.choice(METHODS), "num_speculative_tokens": k},
    }
    if hybrid:  # design section 8's groups, drawn as the manager-level generator draws them
        engine.update(draw_groups(rng, engine))
    base = parse_scenario_dict({"title": "spec", "engine": engine, "steps": []}, "<random spec>")
    sim = ScenarioEngine(base, record=False)
    parser = StepParser("<random spec>", base.engine)
    mml = base.engine.max_model_len
    docs = [[rng.randrange(1000) for _ in range(rng.randint(bs, 6 * bs))] for _ in range(2)]
    steps: list[dict[str, Any]] = []
    counter = 0

    def apply(step: dict[str, Any]) -> None:
        op = parser.parse(len(steps), step)
        if "draft_tokens" in step:
            op = replace(op, draft_tokens=step["draft_tokens"])
        sim.apply(op)
        steps.append(step)

    while len(steps) < num_ops:
        reqs = sim.requests
        waiting = [r for r in reqs.values() if r.num_computed_tokens == 0]
        running = [r for r in reqs.values() if r.status == RequestStatus.RUNNING]
        decodable = [r for r in running if r.num_computed_tokens >= r.num_prompt_tokens and r.num_tokens + 1 < mml]
        kind = rng.choices(
            ("arrive", "admit", "draft", "plain", "finish", "preempt", "reset"),
            weights=(3 if len(reqs) < 5 else 0, 3 if waiting else 0, 6 if decodable else 0, 2 if decodable else 0)
            + (1 if reqs else 0, 0.5 if running else 0, 0.3),
        )[0]
        if kind == "arrive":
            counter += 1
            doc = rng.choice(docs)
            prompt = doc[: rng.randint(1, len(doc))] + [
                rng.randrange(1000, 2000) for _ in range(rng.randint(0, 2 * bs))
            ]
            apply({"op": "arrive", "id": f"R{counter}", "prompt": prompt[: min(len(prompt), mml - 8)]})
        elif kind == "admit":
            req = rng.choice(waiting)
            step: dict[str, Any] = {"op": "admit", "id": req.request_id}
            if rng.random() < 0.2:
                step["tokens"] = rng.randint(1, 2 * bs)
            apply(step)
            while req.status == RequestStatus.RUNNING and req.num_computed_tokens < req.num_tokens:
                before = req.num_computed_tokens
                apply({"op": "admit", "id": req.request_id})  # the rest of a chunked prompt
                if req.num_computed_tokens == before:
                    break  # no room: ok = false
        elif kind == "draft":
            req = rng.choice(decodable)
            if req.num_tokens == req.num_computed_tokens:
                apply({"op": "sample", "id": req.request_id, "tokens": [rng.randrange(3000, 4000)]})
            d = min(rng.randint(1, k), mml - req.num_tokens - 1)
            if d >= 1 and req.num_tokens > req.num_computed_tokens:
                apply({"op": "decode", "id": req.request_id, "draft_tokens": d})
                n = rng.randint(1, min(d + 1, mml - req.num_tokens))
                apply({"op": "sample", "id": req.request_id, "tokens": [rng.randrange(3000, 4000) for _ in range(n)]})
        elif kind == "plain":
            req = rng.choice(decodable)
            if req.num_tokens > req.num_computed_tokens and rng.random() < 0.5:
                apply({"op": "decode", "id": req.request_id})
            else:
                n = rng.randint(1, max(1, min(3, mml - req.num_tokens - 1)))
                apply({"op": "generate", "id": req.request_id, "tokens": [rng.randrange(3000, 4000)] * n})
        elif kind == "finish":
            apply({"op": "finish", "id": rng.choice(list(reqs))})
        elif kind == "preempt":
            apply({"op": "preempt", "id": rng.choice(running).request_id})
        else:
            apply({"op": "reset", "running": rng.random() < 0.5})
    return {"title": f"random speculative manager-level scenario (seed {seed})", "engine": engine, "steps": steps}


def _with_drafts(raw: dict[str, Any], rng: random.Random, title: str, scheduler: str = "sync") -> dict[str, Any]:
    """A copy of engine-step scenario ``raw`` with speculative decoding: the sync scheduler (or
    ``scheduler``), a drawn method and 1-4 drafts, an ``accepted`` list per request and a pool
    one decode step's slots larger (a threshold within k would cut a padded admission)."""
    raw = copy.deepcopy(raw)
    eng = raw["engine"]
    k = rng.randint(1, 4)
    eng["scheduler"] = scheduler
    eng["speculative"] = {
        "method": rng.choice(METHODS if scheduler == "sync" else ASYNC_METHODS),
        "num_speculative_tokens": k,
    }
    eng["num_blocks"] += _cdiv(k + 1, eng["block_size"])
    if 0 < eng["long_prefill_token_threshold"] <= k:
        eng["long_prefill_token_threshold"] = 0
    for step in raw["steps"]:
        if step["op"] == "arrive":
            step["accepted"] = [rng.randint(0, k) for _ in step["output"]]
    raw["title"] = title
    return raw


def random_connector_spec_raw_scenario(seed: int) -> dict[str, Any]:
    """``random_connector_raw_scenario`` (a static KV connector) with drafts (``_with_drafts``)."""
    rng = random.Random(f"connector-spec:{seed}")
    title = f"random engine steps with a KV connector and drafts (seed {seed})"
    return _with_drafts(random_connector_raw_scenario(seed), rng, title)


def random_async_connector_spec_raw_scenario(seed: int) -> dict[str, Any]:
    """``random_connector_raw_scenario`` with drafts under the async scheduler (its methods)."""
    rng = random.Random(f"async-connector-spec:{seed}")
    title = f"random engine steps with a KV connector and drafts, async (seed {seed})"
    return _with_drafts(random_connector_raw_scenario(seed), rng, title, "async")


def random_async_offloading_spec_raw_scenario(seed: int) -> dict[str, Any]:
    """``random_offloading_raw_scenario`` with drafts under the async scheduler (its methods)."""
    rng = random.Random(f"async-offloading-spec:{seed}")
    title = f"random engine steps with the offloading connector and drafts, async (seed {seed})"
    return _with_drafts(random_offloading_raw_scenario(seed), rng, title, "async")


def random_offloading_spec_raw_scenario(seed: int) -> dict[str, Any]:
    """``random_offloading_raw_scenario`` (vLLM's OffloadingConnector, a CPU tier under
    pressure, prompts repeated) with drafts (``_with_drafts``)."""
    rng = random.Random(f"offloading-spec:{seed}")
    title = f"random engine steps with the offloading connector and drafts (seed {seed})"
    return _with_drafts(random_offloading_raw_scenario(seed), rng, title)
