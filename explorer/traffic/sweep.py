"""A sweep: every replay policy at every cache size (unbounded once), hashing the trace once."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from explorer.errors import BadInput
from explorer.numbers import is_int
from explorer.traffic.concurrent import ConcurrencyConfig, replay_concurrent
from explorer.traffic.hashing import prepare
from explorer.traffic.results import MAX_NUM_BLOCKS, RunResult, check_num_blocks
from explorer.traffic.sequential import replay_vllm
from explorer.traffic.simulators import simulate_lru, simulate_unbounded
from explorer.traffic.trace import RequestTrace

POLICIES = ("vllm", "lru", "unbounded")
UI_MAX_BLOCKS_HASHED = 8_000_000  # prompt blocks a page job may hash (the shipped trace at 16: 3.8M)
CLI_MAX_BLOCKS_HASHED = 1 << 24  # prompt blocks `replay` hashes (16.8M: 4.4 times the shipped trace)
CLI_MAX_OUTPUT_TOKENS = 1 << 22  # output tokens `replay --outputs` decodes, one by one (7 times the shipped trace)

# progress(fraction done in [0, 1], what is running)
ProgressFn = Callable[[float, str], None]


@dataclass
class SweepResult:
    block_size: int
    outputs: bool
    requests: int
    prompt_tokens: int
    hash_seconds: float
    blocks_hashed: int
    runs: list[RunResult]
    timestamps: list[float] = field(repr=False)
    prompt_lengths: list[int] = field(repr=False)

    @property
    def seconds(self) -> float:
        return self.hash_seconds + sum(r.seconds for r in self.runs)

    @property
    def tokens_per_s(self) -> float:
        """Prompt tokens replayed per second over the whole sweep (hashing included)."""
        s = self.seconds
        return self.prompt_tokens * len(self.runs) / s if s > 0 else 0.0


def parse_sizes(text: str) -> list[int]:
    """ "1000,5000, 20000" -> [1000, 5000, 20000]; each an integer >= 2, no duplicates."""
    sizes = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        digits = part.replace("_", "")  # 5_000 reads as 5000
        if not is_int(digits) or digits.startswith("-"):
            raise BadInput(f"cache sizes: {part[:40]!r} is not an integer in ASCII digits")
        v = int(digits)
        if v < 2:
            raise BadInput(f"cache sizes: {v} is too small (at least 2 blocks: block 0 is the null block)")
        if v in sizes:
            raise BadInput(f"cache sizes: {v} is listed twice")
        sizes.append(v)
    if not sizes:
        raise BadInput("cache sizes: no size given")
    if len(sizes) > 64:
        raise BadInput(f"cache sizes: {len(sizes)} sizes is more than 64")
    return sizes


def run_sweep(
    trace: RequestTrace,
    block_size: int,
    sizes: Sequence[int],
    policies: Sequence[str] = ("vllm",),
    outputs: bool = False,
    concurrency: ConcurrencyConfig | None = None,
    progress: ProgressFn | None = None,
    max_num_blocks: int = MAX_NUM_BLOCKS,
    max_blocks_hashed: int | None = None,
    max_output_tokens: int | None = None,
) -> SweepResult:
    """Every policy at every size (unbounded once), with the block hashes computed once.
    ``max_blocks_hashed`` bounds the work: the prompts' full blocks at this block size;
    ``max_output_tokens`` the output tokens decoded with ``outputs``."""
    for p in policies:
        if p not in POLICIES:
            raise BadInput(f"unknown policy {p!r}: expected one of {', '.join(POLICIES)}")
    if concurrency is not None and any(p != "vllm" for p in policies):
        raise BadInput("concurrency is modelled for the vllm policy only (lru and unbounded are sequential)")
    if not sizes:
        raise BadInput("no cache size given")
    for s in sizes:
        check_num_blocks(s, max_num_blocks)
    if sum(sizes) > 4 * max_num_blocks:  # each size builds its own pool, one after the other
        raise BadInput(
            f"cache sizes: {sum(sizes):,} blocks in all is more than the {4 * max_num_blocks:,} a sweep builds"
        )
    if not isinstance(block_size, int) or block_size < 1:
        raise BadInput(f"block size must be a positive integer, got {block_size!r}")
    if max_blocks_hashed is not None:
        total = sum(r.input_length // block_size for r in trace.requests)
        if total > max_blocks_hashed:
            raise BadInput(
                f"{total:,} prompt blocks at block size {block_size} is more than the {max_blocks_hashed:,} "
                "allowed here: use a larger block size or fewer requests"
            )
    if outputs and max_output_tokens is not None:
        out_total = sum(r.output_length for r in trace.requests)
        if out_total > max_output_tokens:
            raise BadInput(
                f"{out_total:,} output tokens to decode is more than the {max_output_tokens:,} allowed here: "
                "leave out --outputs or use fewer requests (--limit)"
            )
    n = len(trace.requests)
    plan: list[tuple[str, int | None]] = []
    for p in policies:
        if p == "unbounded":
            plan.append((p, None))
        else:
            plan.extend((p, s) for s in sizes)
    units = n * (1 + len(plan))  # hashing counts as one pass

    def report(done_units: int, what: str) -> None:
        if progress is not None:
            progress(min(done_units / units, 1.0), what)

    report(0, "hashing")
    need_out = outputs and any(p != "vllm" for p in policies)
    prep = prepare(trace, block_size, outputs, need_out, lambda d, t: report(d, f"hashing: {d:,}/{t:,} requests"))
    runs: list[RunResult] = []
    for idx, (policy, size) in enumerate(plan):
        base = n * (1 + idx)
        label = f"{policy} @ {size:,} blocks" if size is not None else policy
        tick = lambda d, base=base, label=label: report(base + d, f"{label}: {d:,}/{n:,} requests")  # noqa: E731
        tick(0)
        if policy == "unbounded":
            runs.append(simulate_unbounded(prep, tick))
            continue
        assert size is not None, f"{policy} runs at a cache size"
        if policy == "vllm":
            if concurrency is not None:
                runs.append(replay_concurrent(prep, size, concurrency, tick))
            else:
                runs.append(replay_vllm(prep, size, tick))
        elif policy == "lru":
            runs.append(simulate_lru(prep, size, tick))
        else:
            runs.append(simulate_unbounded(prep, tick))
    report(units, "done")
    return SweepResult(
        block_size,
        outputs,
        n,
        trace.prompt_tokens,
        prep.seconds,
        prep.blocks_hashed,
        runs,
        [r.timestamp for r in trace.requests],
        [r.input_length for r in trace.requests],
    )


def sweep_to_dict(sweep: SweepResult, per_request: bool = False) -> dict[str, Any]:
    d: dict[str, Any] = {
        "block_size": sweep.block_size,
        "requests": sweep.requests,
        "prompt_tokens": sweep.prompt_tokens,
        "outputs": sweep.outputs,
        "tokens_per_s": round(sweep.tokens_per_s, 1),
        "hash_seconds": round(sweep.hash_seconds, 4),
        "results": [r.as_dict() for r in sweep.runs],
    }
    if per_request:
        d["timestamps"] = sweep.timestamps
        d["prompt_lengths"] = sweep.prompt_lengths
        for r, out in zip(sweep.runs, d["results"]):
            out["hits"] = r.hits
    return d
