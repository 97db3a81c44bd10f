"""A sweep: every replay policy at every cache size (unbounded once), hashing the trace once."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from explorer.errors import BadInput
from explorer.numbers import is_int
from explorer.traffic.bounds import bound_belady
from explorer.traffic.hashing import PreparedTrace, prepare
from explorer.traffic.results import MAX_NUM_BLOCKS, RunResult, check_num_blocks
from explorer.traffic.scheduled import SchedulerPolicy, replay_scheduler
from explorer.traffic.sequential import replay_vllm
from explorer.traffic.simulators import simulate_lru, simulate_unbounded
from explorer.traffic.trace import RequestTrace

POLICIES = ("vllm", "lru", "unbounded", "scheduler")
SEQUENTIAL = ("vllm", "lru", "unbounded")  # one request at a time, in file order
UI_MAX_BLOCKS_HASHED = 8_000_000  # prompt blocks a page job may hash (the shipped trace at 16: 3.8M)
CLI_MAX_BLOCKS_HASHED = 1 << 24  # prompt blocks `replay` hashes (16.8M: 4.4 times the shipped trace)
CLI_MAX_OUTPUT_TOKENS = 1 << 22  # output tokens `replay --outputs` decodes, one by one (7 times the shipped trace)
UI_MAX_OUTPUT_TOKENS = 1 << 21  # output tokens a page job decodes (3.5 times the shipped trace)

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
    bounds_seconds: float = 0.0  # Belady and infinite at every size, beside the runs

    @property
    def seconds(self) -> float:
        return self.hash_seconds + sum(r.seconds for r in self.runs)

    @property
    def tokens_per_s(self) -> float:
        """Prompt tokens replayed per second over the whole sweep (hashing included)."""
        s = self.seconds
        return self.prompt_tokens * len(self.runs) / s if s > 0 else 0.0


MAX_BLOCK_SIZE = 1 << 16  # a block size list's cap: a scenario's and `--block-size`'s


def _parse_ints(text: str, what: str, check: Callable[[int], None], most: int) -> list[int]:
    """ "1000,5000, 20000" -> [1000, 5000, 20000]: ASCII digits ("5_000" reads as 5000), each
    passing ``check``, no duplicates, at most ``most``; ``what`` names the list in messages."""
    values: list[int] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        digits = part.replace("_", "")
        if not is_int(digits) or digits.startswith("-"):
            raise BadInput(f"{what}: {part[:40]!r} is not an integer in ASCII digits")
        v = int(digits)
        check(v)
        if v in values:
            raise BadInput(f"{what}: {v} is listed twice")
        values.append(v)
    if not values:
        raise BadInput(f"{what}: none given")
    if len(values) > most:
        raise BadInput(f"{what}: {len(values)} values is more than {most}")
    return values


def parse_sizes(text: str) -> list[int]:
    """Cache sizes in blocks: each an integer >= 2 (block 0 is the null block), at most 64."""

    def check(v: int) -> None:
        if v < 2:
            raise BadInput(f"cache sizes: {v} is too small (at least 2 blocks: block 0 is the null block)")

    return _parse_ints(text, "cache sizes", check, 64)


def parse_block_sizes(text: str, most: int = 64, largest: int = MAX_BLOCK_SIZE) -> list[int]:
    """Block sizes in tokens: each in 1..``largest``, at most ``most`` of them."""

    def check(v: int) -> None:
        if not 1 <= v <= largest:
            raise BadInput(f"block sizes: {v:,} is not between 1 and {largest:,} tokens")

    return _parse_ints(text, "block sizes", check, most)


def check_output_tokens(trace: RequestTrace, outputs: bool, scheduler: bool, cap: int) -> None:
    """BadInput when the sweep would decode more than ``cap`` output tokens, one by one:
    ``outputs`` decodes every request's ``output_length``; the scheduler policy decodes them
    always, and at least one token each (vLLM's smallest ``max_tokens``)."""
    if outputs:
        total = sum(r.output_length for r in trace.requests)
        if total > cap:
            raise BadInput(
                f"{total:,} output tokens to decode is more than the {cap:,} allowed here: "
                "leave out --outputs or use fewer requests (--limit)"
            )
    if scheduler:
        total = sum(max(r.output_length, 1) for r in trace.requests)
        if total > cap:
            raise BadInput(
                f"the scheduler policy decodes every output: {total:,} output tokens is more than the {cap:,} "
                "allowed here: use fewer requests (--limit)"
            )


def check_work(
    trace: RequestTrace,
    block_size: int,
    outputs: bool,
    max_blocks_hashed: int | None,
    max_output_tokens: int | None,
    scheduler: bool = False,
) -> None:
    """BadInput when hashing the prompts at ``block_size`` or decoding the outputs (``outputs``,
    or the scheduler policy, which always decodes) is more work than allowed."""
    if max_blocks_hashed is not None:
        total = sum(r.input_length // block_size for r in trace.requests)
        if total > max_blocks_hashed:
            raise BadInput(
                f"{total:,} prompt blocks at block size {block_size} is more than the {max_blocks_hashed:,} "
                "allowed here: use a larger block size or fewer requests"
            )
    if max_output_tokens is not None:
        check_output_tokens(trace, outputs, scheduler, max_output_tokens)


def run_cell(
    prep: PreparedTrace,
    policy: str,
    size: int | None,
    scheduler: SchedulerPolicy | None = None,
    tick: Callable[[int], None] | None = None,
) -> RunResult:
    """One cell of a sweep: ``policy`` at ``size`` blocks (None for unbounded) over a prepared
    trace; what `replay` runs for that cell, and what `explorer sweep` runs in each task."""
    if policy == "unbounded":
        return simulate_unbounded(prep, tick)
    assert size is not None, f"{policy} runs at a cache size"
    if policy == "vllm":
        return replay_vllm(prep, size, tick)
    if policy == "scheduler":
        return replay_scheduler(prep, size, scheduler or SchedulerPolicy(), tick)
    if policy == "lru":
        return simulate_lru(prep, size, tick)
    raise BadInput(f"unknown policy {policy!r}: expected one of {', '.join(POLICIES)}")


def run_sweep(
    trace: RequestTrace,
    block_size: int,
    sizes: Sequence[int],
    policies: Sequence[str] = ("vllm",),
    outputs: bool = False,
    scheduler: SchedulerPolicy | None = None,
    progress: ProgressFn | None = None,
    max_num_blocks: int = MAX_NUM_BLOCKS,
    max_blocks_hashed: int | None = None,
    max_output_tokens: int | None = None,
) -> SweepResult:
    """Every policy at every size (unbounded once), with the block hashes computed once.
    ``scheduler`` sets the scheduler policy's engine (default: design section 7's);
    ``max_blocks_hashed`` bounds the work: the prompts' full blocks at this block size;
    ``max_output_tokens`` the output tokens decoded with ``outputs``."""
    for p in policies:
        if p not in POLICIES:
            raise BadInput(f"unknown policy {p!r}: expected one of {', '.join(POLICIES)}")
    if "scheduler" in policies:
        scheduler = scheduler or SchedulerPolicy()
        scheduler.config()  # bad settings fail before any hashing
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
    check_work(trace, block_size, outputs, max_blocks_hashed, max_output_tokens, "scheduler" in policies)
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
    # the simulators and the bounds (which replay the unbounded pool) reference output blocks too
    need_out = outputs
    prep = prepare(trace, block_size, outputs, need_out, lambda d, t: report(d, f"hashing: {d:,}/{t:,} requests"))
    runs: list[RunResult] = []
    for idx, (policy, size) in enumerate(plan):
        base = n * (1 + idx)
        label = f"{policy} @ {size:,} blocks" if size is not None else policy
        tick = lambda d, base=base, label=label: report(base + d, f"{label}: {d:,}/{n:,} requests")  # noqa: E731
        tick(0)
        runs.append(run_cell(prep, policy, size, scheduler, tick))
    bounds_seconds = add_bounds(prep, runs)
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
        bounds_seconds,
    )


def add_bounds(prep: PreparedTrace, runs: list[RunResult]) -> float:
    """``bound_infinite`` and ``bound_belady`` on every run at a size that replays vLLM
    (design section 14); the seconds they took."""
    t0 = time.perf_counter()
    sized = [r for r in runs if r.policy in ("vllm", "scheduler") and r.num_blocks is not None]
    if not sized:
        return 0.0
    unbounded = next((r for r in runs if r.policy == "unbounded"), None)
    infinite = (unbounded or simulate_unbounded(prep)).hit_tokens
    belady: dict[int, int] = {}
    for r in sized:
        assert r.num_blocks is not None
        if r.num_blocks not in belady:
            belady[r.num_blocks] = bound_belady(prep, r.num_blocks)
        r.bound_infinite = infinite
        r.bound_belady = belady[r.num_blocks]
    return time.perf_counter() - t0


def sweep_to_dict(sweep: SweepResult, per_request: bool = False) -> dict[str, Any]:
    d: dict[str, Any] = {
        "block_size": sweep.block_size,
        "requests": sweep.requests,
        "prompt_tokens": sweep.prompt_tokens,
        "outputs": sweep.outputs,
        "tokens_per_s": round(sweep.tokens_per_s, 1),
        "hash_seconds": round(sweep.hash_seconds, 4),
        "bounds_seconds": round(sweep.bounds_seconds, 4),
        "results": [r.as_dict() for r in sweep.runs],
    }
    if per_request:
        d["timestamps"] = sweep.timestamps
        d["prompt_lengths"] = sweep.prompt_lengths
        for r, out in zip(sweep.runs, d["results"]):
            out["hits"] = r.hits
    return d
