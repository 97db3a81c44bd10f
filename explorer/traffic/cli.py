"""`python -m explorer replay TRACE.jsonl`: real request traffic through the faithful engine.

Policies (what ``--policy`` selects): ``vllm`` (the default, `explorer.traffic.sequential`;
with ``--concurrent``, `explorer.traffic.concurrent`), and the simulators ``lru`` and
``unbounded`` (`explorer.traffic.simulators`, NOT vLLM); ``all`` runs the three. Progress goes
to stderr, the summary or the JSON (design section 4) to stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, TextIO

from explorer.traffic.concurrent import ConcurrencyConfig
from explorer.traffic.sweep import (
    CLI_MAX_BLOCKS_HASHED,
    CLI_MAX_OUTPUT_TOKENS,
    POLICIES,
    SweepResult,
    parse_sizes,
    run_sweep,
    sweep_to_dict,
)
from explorer.traffic.trace import load_trace


class _Progress:
    """Progress on stderr, only when useful: nothing for a run under a second; then a
    carriage-return bar on a terminal, or a line every 10 s otherwise."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.t0 = time.monotonic()
        self.last = 0.0
        self.shown = False

    def __call__(self, frac: float, what: str) -> None:
        now = time.monotonic()
        if now - self.t0 < 1.0:
            return
        if self.tty:
            if now - self.last < 0.2 and frac < 1.0:
                return
            bar = "#" * int(frac * 30)
            self.stream.write(f"\r[{bar:<30}] {frac:6.1%} {what[:60]:<60}")
        else:
            if now - self.t0 < 5.0 or now - self.last < 10.0:
                return
            self.stream.write(f"replay: {frac:.0%} {what}\n")
        self.stream.flush()
        self.last = now
        self.shown = True

    def close(self) -> None:
        if self.shown and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _summary(sweep: SweepResult, source: str, concurrent: bool) -> str:
    lines = [
        f"trace {source}: {sweep.requests:,} requests, {sweep.prompt_tokens:,} prompt tokens; "
        f"block size {sweep.block_size}" + (", with outputs" if sweep.outputs else ""),
    ]
    if concurrent:
        lines.append("concurrency: arrivals at their timestamps, FIFO admission, decode time from output_length")
    lines.append(f"{'policy':<10} {'blocks':>10} {'skipped':>8} {'hit tokens':>14} {'hit rate':>9}")
    for r in sweep.runs:
        blocks = f"{r.num_blocks:,}" if r.num_blocks is not None else "unbounded"
        lines.append(f"{r.policy:<10} {blocks:>10} {r.skipped:>8,} {r.hit_tokens:>14,} {r.hit_rate:>9.2%}")
        if r.concurrency:
            c = r.concurrency
            lines.append(
                f"{'':<10} peak running {c['peak_running']}, mean wait {c['mean_wait_ms']:.1f} ms, "
                f"max wait {c['max_wait_ms']:.1f} ms, last finish {c['last_finish_ms'] / 1000:.1f} s"
            )
    if any(r.policy != "vllm" for r in sweep.runs):
        lines.append("(lru and unbounded are simulators over the block hashes, not vLLM)")
    lines.append(
        f"replay: {sweep.seconds:.2f} s ({sweep.hash_seconds:.2f} s hashing {sweep.blocks_hashed:,} distinct blocks), "
        f"{sweep.tokens_per_s:,.0f} prompt tokens/s"
    )
    return "\n".join(lines)


def cmd_replay(args: argparse.Namespace) -> int:
    trace = load_trace(args.trace, args.limit)
    sizes_text = getattr(args, "num_blocks_list", None)
    sizes = parse_sizes(sizes_text) if sizes_text else [args.num_blocks]
    policy = getattr(args, "policy", None) or "vllm"
    policies = list(POLICIES) if policy == "all" else [policy]
    concurrency = ConcurrencyConfig(args.decode_ms) if getattr(args, "concurrent", False) else None
    progress = _Progress()
    try:
        sweep = run_sweep(
            trace,
            args.block_size,
            sizes,
            policies,
            args.outputs,
            concurrency,
            progress,
            max_blocks_hashed=CLI_MAX_BLOCKS_HASHED,
            max_output_tokens=CLI_MAX_OUTPUT_TOKENS,
        )
    finally:
        progress.close()
    if args.json:
        if len(sweep.runs) == 1:
            r = sweep.runs[0]
            out: dict[str, Any] = {
                "block_size": sweep.block_size,
                "num_blocks": r.num_blocks if r.num_blocks is not None else sizes[0],
                "requests": sweep.requests,
                "skipped": r.skipped,
                "prompt_tokens": sweep.prompt_tokens,
                "hit_tokens": r.hit_tokens,
                "hit_rate": r.hit_rate,
                "tokens_per_s": round(sweep.tokens_per_s, 1),
            }
            if r.policy != "vllm":
                out["policy"] = r.policy
            if r.concurrency is not None:
                out["concurrency"] = r.concurrency
        else:
            out = sweep_to_dict(sweep)
        sys.stdout.write(json.dumps(out) + "\n")
    else:
        sys.stdout.write(_summary(sweep, trace.source, concurrency is not None) + "\n")
    return 0
