"""`python -m explorer bench --sweep`: a sweep of 8 cells on local Ray against 8 serial replays.

Both sides replay the same 8 cells of the shipped trace (the first ``--limit`` requests, the
default policy at 8 cache sizes, block size 16), in the same run, one after the other:

- **serial**: what an engineer runs without `sweep`: `replay` once per cell, in this process,
  each parsing and hashing the trace and replaying it (`run_sweep` with one size, as the
  command does; start-up and imports excluded).
- **sweep**: `explorer sweep` as the command runs it (`ray_sweep.run_grid`): a local Ray
  instance started and stopped, the trace parsed and hashed once, one task per cell.

The target: the sweep at most 0.65x the serial time on a 2-core machine, and one cell's tokens
per second (a task's rebuild of the shared trace plus its replay) at least `replay`'s (its
hashing plus its replay), the same cell both ways (also printed: the slowest task against the
fastest replay, which compares the largest pool with the smallest). The hits of every cell must be equal on both sides. Not part of CI.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from explorer.traffic.ray_sweep import plan_cells, run_grid
from explorer.traffic.sweep import run_sweep
from explorer.traffic.trace import load_trace, shipped_trace_path

SIZES = (2_000, 4_000, 8_000, 16_000, 32_000, 64_000, 128_000, 256_000)
TARGET_RATIO = 0.65


def run_sweep_bench(limit: int = 300) -> dict[str, Any]:
    t0 = time.perf_counter()
    trace = load_trace(shipped_trace_path(), limit)
    parse_s = time.perf_counter() - t0
    serial: list[dict[str, Any]] = []
    serial_s = 0.0
    for size in SIZES:
        start = time.perf_counter()
        one = run_sweep(load_trace(shipped_trace_path(), limit), 16, [size])
        serial_s += time.perf_counter() - start
        serial.append({"num_blocks": size, "hit_tokens": one.runs[0].hit_tokens, "tokens_per_s": one.tokens_per_s})
    start = time.perf_counter()
    grid = run_grid(load_trace(shipped_trace_path(), limit), plan_cells([16], SIZES, ["vllm"], ["async"]))
    sweep_s = time.perf_counter() - start
    equal = [r["hit_tokens"] for r in grid.results] == [s["hit_tokens"] for s in serial]
    cell_tps = min(r["tokens_per_s"] for r in grid.results)
    replay_tps = max(s["tokens_per_s"] for s in serial)
    # The same cell both ways: a pool of 256,000 blocks is slower to build and walk than one
    # of 2,000, so only the same size compares one cell with one replay.
    same_cell = [
        round(r["tokens_per_s"] / s["tokens_per_s"], 3) if s["tokens_per_s"] else 0.0
        for r, s in zip(grid.results, serial, strict=True)
    ]
    return {
        "cpus": os.cpu_count(),
        "requests": len(trace.requests),
        "prompt_tokens": trace.prompt_tokens,
        "cells": len(SIZES),
        "parse_s": round(parse_s, 3),
        "serial_s": round(serial_s, 3),
        "sweep_s": round(sweep_s, 3),
        "time_ratio": round(sweep_s / serial_s, 3),
        "slowest_cell_tokens_per_s": round(cell_tps, 1),
        "fastest_replay_tokens_per_s": round(replay_tps, 1),
        "cell_over_replay": same_cell,  # per cache size: the task's tokens/s over the replay's
        "cells_equal": equal,
        "results": grid.results,
    }


def print_sweep_bench(r: dict[str, Any]) -> str:
    met = "met" if r["time_ratio"] <= TARGET_RATIO else "NOT met"
    tps = "met" if r["slowest_cell_tokens_per_s"] >= r["fastest_replay_tokens_per_s"] else "NOT met"
    ratios = r["cell_over_replay"]
    return "\n".join(
        [
            f"sweep bench: {r['cells']} cells of {r['requests']:,} requests ({r['prompt_tokens']:,} prompt tokens), "
            f"{r['cpus']} CPUs",
            f"  serial replays: {r['serial_s']:.1f} s",
            f"  sweep on local Ray (start included): {r['sweep_s']:.1f} s: {r['time_ratio']:.2f}x the serial time "
            f"(target <= {TARGET_RATIO}: {met})",
            f"  one cell: {r['slowest_cell_tokens_per_s']:,.0f} prompt tokens/s (slowest task) against replay's "
            f"{r['fastest_replay_tokens_per_s']:,.0f} (fastest): {tps}",
            f"  the same cell, task over replay, per cache size: {', '.join(f'{x:.2f}' for x in ratios)} "
            f"(lowest {min(ratios):.2f}x; target >= 1: {'met' if min(ratios) >= 1 else 'NOT met'})",
            f"  same hits cell for cell: {'yes' if r['cells_equal'] else 'NO'}",
        ]
    )


def cmd_bench_sweep(args: argparse.Namespace) -> int:
    sweep = run_sweep_bench(args.limit or 300)
    sys.stdout.write((json.dumps(sweep) if args.json else print_sweep_bench(sweep)) + "\n")
    return 0 if sweep["cells_equal"] else 1
