"""The worker process the web page runs sweeps in: ``python -m explorer.traffic.worker``.

The page starts it as a fresh interpreter, writes one JSON job on its stdin and reads JSON
lines from its stdout. (multiprocessing's spawn would re-run the Streamlit app script, the
parent's __main__, inside the worker before the job.)

Where the cells run: a local Ray instance started for the job, unless the server was started
with ``EXPLORER_RAY_ADDRESS`` (``auto`` or ``HOST:PORT``, what `explorer sweep --ray` takes): then
every job joins that running cluster (``ray start --head``), which spares each sweep Ray's start
and stop and lets a class's sweeps use a cluster's machines.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from explorer.errors import BadInput
from explorer.traffic.ray_sweep import Cell, plan_cells, run_grid
from explorer.traffic.results import UI_MAX_NUM_BLOCKS, check_num_blocks
from explorer.traffic.scheduled import DEFAULT_STEP_MS, SCHEDULERS
from explorer.traffic.sweep import POLICIES, UI_MAX_BLOCKS_HASHED, UI_MAX_OUTPUT_TOKENS
from explorer.traffic.trace import UI_MAX_TRACE_BYTES, RequestTrace, load_trace, parse_trace_bytes

RAY_ADDRESS_ENV = "EXPLORER_RAY_ADDRESS"


def ray_address(environ: Mapping[str, str] = os.environ) -> str | None:
    """The Ray cluster the server's sweeps join; None: a local instance per sweep."""
    return environ.get(RAY_ADDRESS_ENV, "").strip() or None


def sweep_job(job: dict[str, Any], emit: Callable[[dict[str, Any]], None]) -> None:
    """Run one sweep, emitting {"progress": fraction, "text": ...} messages, then {"result":
    sweep dict} or {"error": message}. ``job``: trace_b64 (base64 of an upload) or trace_path,
    source, limit, max_bytes, block_sizes (or one block_size), sizes, policies, outputs, and for
    the scheduler policy schedulers ("async", "sync"; or one scheduler) and
    max_num_batched_tokens (step_ms: 20 unless given); max_cells caps the grid."""
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
        emit({"result": grid_job(job, trace, progress)})
    except BadInput as e:
        emit({"error": str(e)})
    except MemoryError:
        emit({"error": "out of memory: try fewer requests or a larger block size"})


def _listed(job: dict[str, Any], many: str, one: str, default: Any) -> list[Any]:
    """``job[many]`` (a list), else ``[job[one]]`` (a job of one value, as older pages sent it)."""
    got = job.get(many)
    if got is None:
        return [job.get(one, default)]
    if not isinstance(got, list) or not got:
        raise BadInput(f"{many}: a non-empty list, got {got!r}")
    return list(got)


def plan_job(job: dict[str, Any]) -> tuple[list[int], list[str], list[Cell]]:
    """The job's block sizes, schedulers and grid (`plan_cells`, as `explorer sweep` plans it).
    A job names ``block_sizes`` and ``schedulers`` (lists) or ``block_size`` and ``scheduler``."""
    policies = [str(p) for p in job["policies"]]
    for p in policies:
        if p not in POLICIES:
            raise BadInput(f"unknown policy {p!r}: expected one of {', '.join(POLICIES)}")
    max_blocks = int(job.get("max_num_blocks", UI_MAX_NUM_BLOCKS))
    sizes = [int(s) for s in job["sizes"]]
    for s in sizes:
        check_num_blocks(s, max_blocks)
    listed = _listed(job, "block_sizes", "block_size", 16)
    if not all(isinstance(b, int) and not isinstance(b, bool) for b in listed):
        raise BadInput(f"block sizes: integers, got {listed!r}"[:200])
    block_sizes = [int(b) for b in listed]
    for bs in block_sizes:
        if bs < 1:
            raise BadInput(f"block size must be a positive integer, got {bs}")
    schedulers = [str(name) for name in _listed(job, "schedulers", "scheduler", "async")]
    for name in schedulers:
        if name not in SCHEDULERS:
            raise BadInput(f"scheduler must be one of {', '.join(SCHEDULERS)}, got {name!r}")
    if len(set(block_sizes)) < len(block_sizes) or len(set(schedulers)) < len(schedulers):
        raise BadInput("a block size or scheduler is listed twice")
    cells = plan_cells(block_sizes, sizes, policies, schedulers)
    max_cells = job.get("max_cells")
    if max_cells is not None and len(cells) > int(max_cells):
        raise BadInput(f"the grid has {len(cells):,} cells; this page runs at most {int(max_cells):,}")
    return block_sizes, schedulers, cells


def grid_job(job: dict[str, Any], trace: RequestTrace, progress: Callable[[float, str], None]) -> dict[str, Any]:
    """The job's grid on a local Ray instance (`explorer.traffic.ray_sweep`, the code of
    `explorer sweep`), the trace hashed once per block size: the page's sweep dict (as
    `sweep_to_dict` with per-request data, each result with its ``block_size``; ``block_size``
    is the first of ``block_sizes``)."""
    block_sizes, schedulers, cells = plan_job(job)
    outputs = bool(job.get("outputs"))
    max_hashed = job.get("max_blocks_hashed", UI_MAX_BLOCKS_HASHED)
    if max_hashed is not None and len(block_sizes) > 1:
        # every block size's hashes sit in the object store at once: the cap is on their sum
        total = sum(r.input_length // bs for bs in block_sizes for r in trace.requests)
        if total > max_hashed:
            raise BadInput(
                f"{total:,} prompt blocks over block sizes {', '.join(map(str, block_sizes))} is more than the "
                f"{max_hashed:,} allowed here: use fewer or larger block sizes, or fewer requests"
            )

    def cells_done(done: int, total: int, elapsed: float) -> None:
        left = f", about {elapsed / done * (total - done):.0f} s left" if 0 < done < total else ""
        progress(done / total, f"{done}/{total} cells{left}")

    what = "the trace" if len(block_sizes) == 1 else f"the trace at {len(block_sizes)} block sizes"
    address = ray_address()
    progress(0.0, f"{'starting Ray' if address is None else 'joining the Ray cluster'} and hashing {what}")
    grid = run_grid(
        trace,
        cells,
        outputs,
        int(job.get("max_num_batched_tokens", 2048)),
        float(job.get("step_ms", DEFAULT_STEP_MS)),
        address,
        cells_done,
        max_blocks_hashed=max_hashed,
        max_output_tokens=job.get("max_output_tokens", UI_MAX_OUTPUT_TOKENS),
        with_hits=True,
        address_named_by=RAY_ADDRESS_ENV,
    )
    seconds = grid.hash_seconds + sum(r["seconds"] for r in grid.results)
    return {
        "block_size": block_sizes[0],
        "block_sizes": block_sizes,
        "schedulers": schedulers,
        "requests": len(trace.requests),
        "prompt_tokens": trace.prompt_tokens,
        "outputs": outputs,
        "tokens_per_s": round(trace.prompt_tokens * len(cells) / seconds, 1) if seconds > 0 else 0.0,
        "hash_seconds": round(grid.hash_seconds, 4),
        "backend": grid.backend,
        # the page reads a scheduler cell's figures under "scheduler" (as `replay --json` gives them;
        # they name the scheduler too)
        "results": [{**r, "scheduler": r.get("figures")} if "figures" in r else r for r in grid.results],
        "timestamps": [r.timestamp for r in trace.requests],
        "prompt_lengths": [r.input_length for r in trace.requests],
    }


def _interrupt_on_term() -> None:
    """Cancel (SIGTERM from the page) ends the grid as Ctrl-C does: tasks cancelled, Ray stopped."""
    import signal

    def raise_interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, raise_interrupt)


PARENT_CHECK_S = 1.0


def _exit_with_parent() -> None:
    """Start a thread that ends this process once the page's server is gone: a server killed
    outright (no exit handler ran) leaves this process to init, which changes its parent."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK_S)
        # As a Cancel would: SIGTERM ends a grid's Ray tasks and Ray itself; then exit for sure.
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def worker_main() -> int:
    """stdin: one JSON job; stdout: JSON lines (see `sweep_job`)."""
    _exit_with_parent()
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
    _interrupt_on_term()
    try:
        sweep_job(job, emit)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the page is gone (server stopped, or the job was dropped)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(worker_main())
