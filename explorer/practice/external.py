"""Questions on the KV connector (design section 10; lesson 18): ``external_hit`` (after a
given local hit, how many tokens does the connector supply?) and ``async_load_events`` (what
does the step after an async load's admission publish?).

Each builds a small engine-step scenario with the static connector, replays it, and reads the
answer and its explanation from the recorded step: the connector's lookup report, its
allocations (``external``) and the KV event batch; nothing is worked out beside the engine.
"""

from __future__ import annotations

import random
from typing import Any

from explorer.practice.question import Question
from explorer.scenario.connector_reports import ConnectorLoaded, ConnectorLookup
from explorer.scenario.engine import replay
from explorer.scenario.parse import parse_scenario_dict
from explorer.scenario.trace import Step, Trace

LESSON = "18_external_tier"


def _scenario(kind: str, seed: int, engine: dict[str, Any], steps: list[dict[str, Any]]) -> Any:
    return parse_scenario_dict(
        {"title": f"practice {kind}", "engine": engine, "steps": steps}, f"practice:{kind}:{seed}"
    )


def _lookup(step: Step, rid: str) -> ConnectorLookup:
    es = step.engine_step
    assert es is not None
    return next(r for r in es.connector if isinstance(r, ConnectorLookup) and r.request_id == rid)


def _question(kind: str, seed: int, scenario: Any, trace: Trace, asked: int, **kw: Any) -> Question:
    setup = tuple(
        f"{i + 1}. {s['op']}" + (f" {s['id']}" if "id" in s else "") + (f": {s['_say']}" if "_say" in s else "")
        for i, s in enumerate(kw.pop("said"))
    )
    return Question(
        kind=kind,
        seed=seed,
        setup=setup[:asked],
        asked=setup[asked],
        scenario=scenario,
        step_index=asked,
        lesson=LESSON,
        **kw,
    )


def q_external_hit(seed: int) -> Question:
    rng = random.Random(f"external_hit:{seed}")
    bs = rng.choice((4, 8, 16))
    shared = rng.randint(0, 6) * bs + rng.randint(0, bs - 1)
    n = shared + rng.randint(2, 5) * bs + rng.randint(1, bs - 1)
    held = rng.randint(0, n - 1)
    load = rng.choice(("async", "sync"))
    said: list[dict[str, Any]] = [
        {"op": "arrive", "id": "X", "prompt": f"0:{shared}, 5000" if shared else "5000", "output": "9"},
        {"op": "step"},
        {"op": "step"},
        {"op": "arrive", "id": "A", "prompt": f"0:{n}", "output": "7", "external_tokens": held, "external_load": load},
        {"op": "step"},
    ]
    said[0]["_say"] = (
        f"{shared + 1} tokens, the first request; extra keys: none; it runs and finishes, its full blocks stay cached"
    )
    said[3]["_say"] = (
        f"{n} tokens, A = X's first {shared} tokens + {n - shared} new; extra keys: none; "
        f"the connector's store holds A's first {held} tokens ({load} load)"
    )
    steps = [{k: v for k, v in s.items() if k != "_say"} for s in said]
    scenario = _scenario(
        "external_hit",
        seed,
        {"block_size": bs, "num_blocks": 64, "scheduler": "sync", "kv_connector": {"kind": "static"}},
        steps,
    )
    trace = replay(scenario)
    asked = 4
    step = trace.steps[asked]
    lk = _lookup(step, "A")
    assert lk.num_external_tokens is not None
    aligned = lk.num_local_tokens - lk.num_local_tokens % bs
    explanation = (
        f"A's local hit is {lk.num_local_tokens} tokens: the blocks X cached that A's hashes find (whole blocks of {bs}).",
        f"The scheduler asks the connector with the block-aligned local hit, {aligned} tokens "
        "(get_num_new_matched_tokens, scheduler.py:939-952).",
        f"The store holds {held} tokens, so it offers max(0, min({held}, {n}) − {aligned}) = {lk.num_external_tokens} "
        "tokens after the local hit.",
        f"External stats: queries {n} − {lk.num_local_tokens} = {n - lk.num_local_tokens} (every token after the local "
        f"hit), hits {lk.num_external_tokens}.",
    )
    return _question(
        "external_hit",
        seed,
        scenario,
        trace,
        asked,
        said=said,
        title="External hit after the local hit",
        question="How many tokens does the KV connector supply for A in this step (its external hit)?",
        state=(
            f"Pool: 64 blocks (block 0 is the null block); block_size {bs}; X's full blocks are cached.",
            f"A has {n} tokens; the store holds A's first {held} tokens.",
        ),
        answer_format="int",
        answer=lk.num_external_tokens,
        explanation=explanation,
    )


def q_async_load_events(seed: int) -> Question:
    rng = random.Random(f"async_load_events:{seed}")
    bs = rng.choice((4, 8, 16))
    n = rng.randint(2, 8) * bs + rng.randint(0, bs - 1)
    held = rng.randint(1, n // bs) * bs
    sched = rng.choice(("sync", "async"))
    said: list[dict[str, Any]] = [
        {"op": "arrive", "id": "A", "prompt": f"0:{n}", "output": "7, 8", "external_tokens": held},
        {"op": "step"},
        {"op": "step"},
    ]
    said[0]["_say"] = (
        f"{n} tokens, the first request; extra keys: none; the store holds its first {held} tokens (async load)"
    )
    said[1]["_say"] = "the connector offers the held tokens; the load is admitted (A waits for remote KV)"
    steps = [{k: v for k, v in s.items() if k != "_say"} for s in said]
    engine = {
        "block_size": bs,
        "num_blocks": 64,
        "scheduler": sched,
        "kv_connector": {"kind": "static", "load": "async"},
    }
    scenario = _scenario("async_load_events", seed, engine, steps)
    trace = replay(scenario)
    asked = 2
    step = trace.steps[asked]
    stored = [e for e in step.events if type(e).__name__ == "BlockStored"]
    answer = sum(len(getattr(e, "block_hashes", ())) for e in stored)
    loaded = [r for r in (step.engine_step.connector if step.engine_step else ()) if isinstance(r, ConnectorLoaded)]
    lines = [
        f"The admission in step 2 allocated {-(-held // bs)} blocks for the load with delay_cache_blocks: "
        "nothing was hashed and no BlockStored was queued (kv_cache_manager.py:598-601).",
    ]
    if loaded:
        lines.append(
            f"This schedule() sees the finished load and caches A's loaded blocks up to {loaded[0].num_tokens} tokens "
            "(_update_waiting_for_remote_kv), then admits the rest of the prompt, whose allocation caches its full blocks."
        )
    if sched == "async":
        lines.append(
            "Under the async scheduler events are published by update_from_output, which in this call runs for "
            "the previous batch: this step publishes what was queued up to then."
        )
    lines.append(f"This step's KV event batch: {len(stored)} BlockStored with {answer} block hashes in all.")
    return _question(
        "async_load_events",
        seed,
        scenario,
        trace,
        asked,
        said=said,
        title="What an async load emits, and when",
        question=(
            f"Under the {sched} scheduler, how many block hashes do the BlockStored events published in this "
            "step carry, in all?"
        ),
        state=(
            f"Pool: 64 blocks (block 0 is the null block); block_size {bs}.",
            "A waits for remote KV holding its load's blocks, none hashed.",
        ),
        answer_format="int",
        unit="block hashes",
        answer=answer,
        explanation=tuple(lines),
    )
