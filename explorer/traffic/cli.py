"""`python -m explorer replay TRACE.jsonl`: real request traffic through the faithful engine.

Policies (what ``--policy`` selects): ``vllm`` (the default, `explorer.traffic.sequential`: one
request at a time), ``scheduler`` (`explorer.traffic.scheduled`: arrivals by timestamp through
vLLM's scheduler, mirrored; ``--step-ms``, ``--max-num-batched-tokens``, ``--scheduler``), and
the simulators ``lru`` and ``unbounded`` (`explorer.traffic.simulators`, NOT vLLM); ``all`` runs
the four. Progress goes to stderr, the summary or the JSON (design section 4) to stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, TextIO

from explorer.errors import BadInput
from explorer.miss.sentence import largest_reason_sentence
from explorer.traffic.scheduled import DEFAULT_STEP_MS, SchedulerPolicy
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


def _summary(sweep: SweepResult, source: str) -> str:
    lines = [
        f"trace {source}: {sweep.requests:,} requests, {sweep.prompt_tokens:,} prompt tokens; "
        f"block size {sweep.block_size}" + (", with outputs" if sweep.outputs else ""),
    ]
    lines.append(f"{'policy':<10} {'blocks':>10} {'skipped':>8} {'hit tokens':>14} {'hit rate':>9}")
    for r in sweep.runs:
        blocks = f"{r.num_blocks:,}" if r.num_blocks is not None else "unbounded"
        lines.append(f"{r.policy:<10} {blocks:>10} {r.skipped:>8,} {r.hit_tokens:>14,} {r.hit_rate:>9.2%}")
        if r.bound_belady is not None and r.bound_infinite is not None and sweep.prompt_tokens:
            p = sweep.prompt_tokens
            lines.append(
                f"{'':<10} bounds: Belady {r.bound_belady / p:.2%}, infinite {r.bound_infinite / p:.2%} (not vLLM)"
            )
        if r.miss_tokens:
            lines.append(f"{'':<10} {largest_reason_sentence(r.miss_tokens)}")
        if r.scheduler:
            c = r.scheduler
            lines.append(
                f"{'':<10} {c['scheduler']} scheduler, {c['max_num_batched_tokens']:,}-token budget, a step per "
                f"{c['step_ms']:g} ms: {c['steps']:,} steps, {c['preemptions']:,} preemptions, peak running "
                f"{c['peak_running']}, queueing mean {c['mean_queueing_ms']:,.1f} ms, max {c['max_queueing_ms']:,.1f} ms"
            )
    if any(r.policy in ("lru", "unbounded") for r in sweep.runs):
        lines.append("(lru and unbounded are simulators over the block hashes, not vLLM)")
    lines.append(
        f"replay: {sweep.seconds:.2f} s ({sweep.hash_seconds:.2f} s hashing {sweep.blocks_hashed:,} distinct blocks), "
        f"{sweep.tokens_per_s:,.0f} prompt tokens/s"
    )
    return "\n".join(lines)


def _scheduler_policy(args: argparse.Namespace, policies: list[str]) -> SchedulerPolicy | None:
    """The scheduler policy's settings from the options (None when it does not run); its
    options are bad input for the other policies."""
    given = {
        "step_ms": getattr(args, "step_ms", None),
        "max_num_batched_tokens": getattr(args, "max_num_batched_tokens", None),
        "scheduler": getattr(args, "scheduler", None),
    }
    if "scheduler" not in policies:
        named = [f"--{k.replace('_', '-')}" for k, v in given.items() if v is not None]
        if named:
            raise BadInput(f"{', '.join(named)}: only for --policy scheduler (or all)")
        return None
    return SchedulerPolicy(
        given["scheduler"] or "async",
        given["max_num_batched_tokens"] or 2048,
        given["step_ms"] or DEFAULT_STEP_MS,
    )


def cmd_generate(args: argparse.Namespace) -> int:
    from explorer.traffic.generate import generate_trace

    size = generate_trace(args.out, args.requests, args.seed)
    sys.stderr.write(f"generate: {args.requests:,} requests, {size:,} bytes in {args.out}\n")
    return 0


# Belady's MIN evicts by each hash's next reference: a single pass over a stream has no future.
STREAM_NO_BELADY = "bound_belady is not computed with --stream: Belady's MIN needs the trace's future references"


def _replay_stream(args: argparse.Namespace) -> int:
    """`replay --stream`: the default policy over the file read line by line, in memory bounded
    by the pool. With ``--reasons`` also the missed tokens by reason and ``bound_infinite``
    (``bound_belady``: null, see STREAM_NO_BELADY); both keep an entry per distinct block hash
    (the reasons must tell a hash evicted from one never cached), so they are asked for."""
    from explorer.traffic.generate import stream_trace
    from explorer.traffic.sequential import replay_vllm_stream

    if getattr(args, "policy", "vllm") != "vllm" or getattr(args, "num_blocks_list", None):
        raise BadInput("--stream: only the default policy at one cache size")
    reasons = bool(getattr(args, "reasons", False))
    r = replay_vllm_stream(
        stream_trace(args.trace, args.limit), args.block_size, args.num_blocks, args.outputs, False, reasons=reasons
    )
    out: dict[str, Any] = {
        "block_size": args.block_size,
        "num_blocks": args.num_blocks,
        "requests": r.requests,
        "skipped": r.skipped,
        "prompt_tokens": r.prompt_tokens,
        "hit_tokens": r.hit_tokens,
        "hit_rate": r.hit_rate,
        "tokens_per_s": round(r.prompt_tokens / r.seconds, 1) if r.seconds > 0 else 0.0,
    }
    if reasons:
        out.update(miss_tokens=r.miss_tokens, bound_infinite=r.bound_infinite, bound_belady=None)  # as `replay --json`
    if args.json:
        sys.stdout.write(json.dumps(out) + "\n")
        return 0
    lines = [" ".join(f"{k} {out[k]}" for k in list(out)[:8])]
    if not reasons:
        sys.stdout.write(lines[0] + "\n")
        return 0
    miss = r.miss_tokens or {}
    lines.append("missed tokens by reason: " + (", ".join(f"{k} {v:,}" for k, v in miss.items()) or "none"))
    lines.append(largest_reason_sentence(miss))
    if r.prompt_tokens and r.bound_infinite is not None:
        lines.append(f"bounds: infinite {r.bound_infinite / r.prompt_tokens:.2%} (not vLLM)")
    lines.append(STREAM_NO_BELADY)
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    if getattr(args, "stream", False):
        return _replay_stream(args)
    trace = load_trace(args.trace, args.limit)
    sizes_text = getattr(args, "num_blocks_list", None)
    sizes = parse_sizes(sizes_text) if sizes_text else [args.num_blocks]
    policy = getattr(args, "policy", None) or "vllm"
    policies = list(POLICIES) if policy == "all" else [policy]
    scheduler = _scheduler_policy(args, policies)
    progress = _Progress()
    try:
        sweep = run_sweep(
            trace,
            args.block_size,
            sizes,
            policies,
            args.outputs,
            scheduler,
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
            if getattr(args, "vllm", None):
                # A trace replays plain full-attention traffic: no drift item applies to it.
                out["vllm"] = args.vllm
            if r.policy != "vllm":
                out["policy"] = r.policy
            if r.scheduler is not None:
                out["scheduler"] = r.scheduler
                out["hits"] = r.hits
            for key in ("miss_tokens", "bound_infinite", "bound_belady"):  # design section 14
                if getattr(r, key) is not None:
                    out[key] = getattr(r, key)
        else:
            out = sweep_to_dict(sweep)
        sys.stdout.write(json.dumps(out) + "\n")
    else:
        sys.stdout.write(_summary(sweep, trace.source) + "\n")
    return 0
