"""`python -m explorer sweep TRACE ...`: a grid of replays on Ray (design section 16).

Each cell is exactly `replay` with the same options; the cells run as Ray tasks
(`explorer.traffic.ray_sweep`), on a local Ray instance or, with ``--ray``, on a cluster.
Progress (``k/N cells`` and an estimate of the time left) goes to stderr; the table, or with
``--json`` one object, to stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, TextIO

from explorer.errors import BadInput
from explorer.traffic.ray_sweep import Cell, GridResult, plan_cells, run_grid
from explorer.traffic.scheduled import DEFAULT_STEP_MS
from explorer.traffic.sweep import (
    CLI_MAX_BLOCKS_HASHED,
    CLI_MAX_OUTPUT_TOKENS,
    POLICIES,
    parse_block_sizes,
    parse_sizes,
)
from explorer.traffic.trace import load_trace


def parse_names(text: str, allowed: tuple[str, ...], what: str) -> list[str]:
    """ "vllm, lru" -> ["vllm", "lru"]: each one of ``allowed``, no duplicates."""
    names: list[str] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        if part not in allowed:
            raise BadInput(f"{what}: {part[:40]!r} is not one of {', '.join(allowed)}")
        if part in names:
            raise BadInput(f"{what}: {part} is listed twice")
        names.append(part)
    if not names:
        raise BadInput(f"{what}: none given")
    return names


class CellBar:
    """``sweep: k/N cells, T s, about R s left`` on stderr: one rewritten line on a terminal,
    a line per finished cell otherwise."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def __call__(self, done: int, total: int, elapsed: float) -> None:
        left = f", about {elapsed / done * (total - done):.0f} s left" if 0 < done < total else ""
        bar = "#" * (20 * done // max(total, 1))
        text = f"sweep: [{bar:<20}] {done}/{total} cells, {elapsed:.0f} s{left}"
        self.stream.write(f"\r{text:<72}" if self.tty else text + "\n")
        if self.tty and done == total:
            self.stream.write("\n")
        self.stream.flush()


def _table(grid: GridResult, source: str) -> str:
    lines = [f"sweep of {source}: {len(grid.results)} cells on {grid.backend} in {grid.seconds:.1f} s"]
    lines.append(
        f"{'policy':<10} {'sched':<6} {'block':>6} {'blocks':>10} {'skipped':>8} {'hit tokens':>14} {'hit rate':>9}"
    )
    for r in grid.results:
        blocks = f"{r['num_blocks']:,}" if r["num_blocks"] is not None else "unbounded"
        lines.append(
            f"{r['policy']:<10} {r.get('scheduler', ''):<6} {r['block_size']:>6} {blocks:>10} {r['skipped']:>8,} "
            f"{r['hit_tokens']:>14,} {r['hit_rate']:>9.2%}"
        )
    if any(r["policy"] in ("lru", "unbounded") for r in grid.results):
        lines.append("(lru and unbounded are simulators over the block hashes, not vLLM)")
    return "\n".join(lines)


def cells_from_args(args: argparse.Namespace) -> list[Cell]:
    sizes = parse_sizes(args.num_blocks_list)
    block_sizes = parse_block_sizes(args.block_size_list) if args.block_size_list else [args.block_size]
    policies = parse_names(args.policy_list, POLICIES, "--policy-list")
    schedulers = parse_names(args.scheduler_list, ("async", "sync"), "--scheduler-list")
    if "scheduler" not in policies:
        named = [
            o for o, v in (("--step-ms", args.step_ms), ("--max-num-batched-tokens", args.max_num_batched_tokens)) if v
        ]
        if named:
            raise BadInput(f"{', '.join(named)}: only for the scheduler policy (--policy-list scheduler)")
    return plan_cells(block_sizes, sizes, policies, schedulers)


def cmd_sweep(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    cells = cells_from_args(args)
    trace = load_trace(args.trace, args.limit)
    grid = run_grid(
        trace,
        cells,
        args.outputs,
        args.max_num_batched_tokens or 2048,
        args.step_ms or DEFAULT_STEP_MS,
        args.ray,
        CellBar(),
        max_blocks_hashed=CLI_MAX_BLOCKS_HASHED,
        max_output_tokens=CLI_MAX_OUTPUT_TOKENS,
    )
    seconds = time.perf_counter() - t0
    if args.json:
        out: dict[str, Any] = {
            "results": grid.results,
            "cells": len(grid.results),
            "backend": grid.backend,
            "seconds": round(seconds, 3),
        }
        sys.stdout.write(json.dumps(out) + "\n")
    else:
        sys.stdout.write(_table(grid, trace.source) + "\n")
    return 0
