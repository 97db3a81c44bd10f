"""A Mooncake trace as an engine-step scenario, for vLLM's own Scheduler / AsyncScheduler.

`trace_scenario` converts what ``replay --policy scheduler`` does (explorer/traffic/scheduled.py)
into the normalized engine-step scenario ``vllm_sched_driver.py`` reads: at each step time
``k x step_ms``, every request that has arrived by then (``arrive`` with its prompt expanded
and ``output_length`` zeros, at least one), then one ``step``, from the first arrival's step up
to ``num_steps``. All requests arrive in full (no lazy feeding), and idle steps are kept: what
our replay shortcuts is replayed plainly on vLLM's side. The driver is asked for each request's
``num_cached_tokens``.

    .venv/bin/python -m tests.conformance.trace_sched [N_REQUESTS] [NUM_BLOCKS]

times both sides on the first N shipped requests (each whole, the driver's scheduler
construction and JSON excluded; ours includes hashing the prompts) and prints the ratio.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

from explorer.traffic.hashing import prepare
from explorer.traffic.scheduled import SchedulerPolicy, arrival_step, replay_scheduler
from explorer.traffic.trace import (
    MAX_MODEL_LEN,
    RequestTrace,
    expand_prompt,
    is_skipped,
    load_trace,
    shipped_trace_path,
)
from vllm_drivers.engine_step_scenarios import ENGINE_DEFAULTS


def trace_scenario(
    trace: RequestTrace, block_size: int, num_blocks: int, policy: SchedulerPolicy, num_steps: int
) -> dict[str, Any]:
    """The engine-step scenario of a trace replay with steps 0 .. ``num_steps - 1``."""
    reqs = trace.requests
    order = sorted(range(len(reqs)), key=lambda k: reqs[k].timestamp)
    arrivals = [k for k in order if not is_skipped(reqs[k], block_size, num_blocks, True)]
    engine = {
        **ENGINE_DEFAULTS,
        "block_size": block_size,
        "num_blocks": num_blocks,
        "max_model_len": MAX_MODEL_LEN,
        "hash_seed": None,
        "events": False,
        "scheduler": policy.scheduler,
        "max_num_batched_tokens": policy.max_num_batched_tokens,
        "max_num_seqs": policy.max_num_seqs,
    }
    ops: list[dict[str, Any]] = []
    a = 0
    first = arrival_step(reqs[arrivals[0]].timestamp, policy.step_ms) if arrivals else 0
    for k in range(first, num_steps):
        while a < len(arrivals) and reqs[arrivals[a]].timestamp <= k * policy.step_ms:
            r = reqs[arrivals[a]]
            ops.append(
                {
                    "op": "arrive",
                    "id": str(arrivals[a]),
                    "prompt": expand_prompt(r),
                    "output": [0] * max(r.output_length, 1),
                }
            )
            a += 1
        ops.append({"op": "step"})
    assert a == len(arrivals), "every request arrives within the steps"
    return {"kind": "engine_steps", "engine": engine, "ops": ops, "num_cached_tokens": True}


def vllm_hits(answer: dict[str, Any], n: int) -> list[int]:
    """vLLM's per-request hit tokens, indexed like our RunResult.hits (0 for a skipped one)."""
    got = answer["num_cached_tokens"]
    return [got.get(str(k), 0) for k in range(n)]


def num_steps_of(result_figures: dict[str, Any], step_ms: float) -> int:
    """Steps up to and including the one our replay finished its last request in, plus one
    (the step that tells the worker about it)."""
    return arrival_step(result_figures["last_finish_ms"], step_ms) + 2


def measure(n: int = 200, num_blocks: int = 5000, repeat: int = 3) -> dict[str, Any]:
    from tests.conformance.sched_oracle import VllmSchedOracle

    trace = load_trace(shipped_trace_path(), n)
    out: dict[str, Any] = {"requests": n, "num_blocks": num_blocks}
    with VllmSchedOracle() as oracle:
        for sched in ("async", "sync"):
            policy = SchedulerPolicy(sched)
            ours = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                run = replay_scheduler(prepare(trace, 16), num_blocks, policy)
                ours.append(time.perf_counter() - t0)
            assert run.scheduler is not None
            scenario = trace_scenario(trace, 16, num_blocks, policy, num_steps_of(run.scheduler, policy.step_ms))
            answer = oracle.replay({**scenario, "timing": {"repeat": repeat}})
            theirs = answer["timing"]["replay_s"]
            assert vllm_hits(answer, n) == run.hits
            out[sched] = {
                "ours_s": statistics.median(ours),
                "vllm_s": statistics.median(theirs),
                "ratio": statistics.median(ours) / statistics.median(theirs),
                "steps": run.scheduler["steps"],
                "scenario_steps": sum(1 for op in scenario["ops"] if op["op"] == "step"),
            }
    return out


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:3]]
    print(json.dumps(measure(*args), indent=1))
