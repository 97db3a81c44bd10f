"""The worker process the web page runs sweeps in: ``python -m explorer.traffic.worker``.

The page starts it as a fresh interpreter, writes one JSON job on its stdin and reads JSON
lines from its stdout. (multiprocessing's spawn would re-run the Streamlit app script, the
parent's __main__, inside the worker before the job.)
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

from explorer.errors import BadInput
from explorer.traffic.results import UI_MAX_NUM_BLOCKS
from explorer.traffic.scheduled import DEFAULT_STEP_MS, SchedulerPolicy
from explorer.traffic.sweep import UI_MAX_BLOCKS_HASHED, run_sweep, sweep_to_dict
from explorer.traffic.trace import UI_MAX_TRACE_BYTES, load_trace, parse_trace_bytes


def sweep_job(job: dict[str, Any], emit: Callable[[dict[str, Any]], None]) -> None:
    """Run one sweep, emitting {"progress": fraction, "text": ...} messages, then {"result":
    sweep dict} or {"error": message}. ``job``: trace_b64 (base64 of an upload) or trace_path,
    source, limit, max_bytes, block_size, sizes, policies, outputs, and for the scheduler policy
    scheduler ("async" or "sync") and max_num_batched_tokens (step_ms: 20 unless given)."""
    last = [0.0]

    def progress(frac: float, what: str) -> None:
        now = time.monotonic()
        if now - last[0] >= 0.2 or frac >= 1.0:
            last[0] = now
            emit({"progress": frac, "text": what})

    try:
        max_bytes = int(job.get("max_bytes", UI_MAX_TRACE_BYTES))
        if job.get("trace_b64") is not None:
            import base64

            data = base64.b64decode(job["trace_b64"])
            trace = parse_trace_bytes(data, job.get("source", "upload"), job.get("limit"), max_bytes)
        else:
            trace = load_trace(job["trace_path"], job.get("limit"), max_bytes)
        sched = SchedulerPolicy(
            str(job.get("scheduler", "async")),
            int(job.get("max_num_batched_tokens", 2048)),
            float(job.get("step_ms", DEFAULT_STEP_MS)),
        )
        sweep = run_sweep(
            trace,
            int(job["block_size"]),
            [int(s) for s in job["sizes"]],
            list(job["policies"]),
            bool(job.get("outputs")),
            sched,
            progress,
            max_num_blocks=int(job.get("max_num_blocks", UI_MAX_NUM_BLOCKS)),
            max_blocks_hashed=job.get("max_blocks_hashed", UI_MAX_BLOCKS_HASHED),
        )
        emit({"result": sweep_to_dict(sweep, per_request=True)})
    except BadInput as e:
        emit({"error": str(e)})
    except MemoryError:
        emit({"error": "out of memory: try fewer requests or a larger block size"})


def worker_main() -> int:
    """stdin: one JSON job; stdout: JSON lines (see `sweep_job`)."""
    out = sys.stdout

    def emit(msg: dict[str, Any]) -> None:
        out.write(json.dumps(msg) + "\n")
        out.flush()

    try:
        job = json.loads(sys.stdin.read())
        if not isinstance(job, dict):
            raise ValueError("the job must be a JSON object")
    except ValueError as e:
        emit({"error": f"bad job: {e}"})
        return 2
    try:
        sweep_job(job, emit)
    except BrokenPipeError:  # the page is gone (server stopped, or the job was dropped)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(worker_main())
