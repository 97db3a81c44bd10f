"""One run's result, and the checks and progress ticks every replay policy shares."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from explorer.errors import BadInput
from explorer.miss.reasons import REASONS

MAX_NUM_BLOCKS = 1 << 22  # a pool of 4.2M blocks is about 500 MB of block objects
UI_MAX_NUM_BLOCKS = 1 << 21  # the web page's share of a small shared server


@dataclass
class RunResult:
    policy: str
    num_blocks: int | None  # None: unbounded
    requests: int
    skipped: int
    prompt_tokens: int
    hit_tokens: int
    seconds: float
    hits: list[int] = field(repr=False)  # hit tokens per request (0 when skipped)
    scheduler: dict[str, Any] | None = None  # the scheduler policy's settings and figures
    # Why the rest missed (design section 14): missed tokens by reason, summed over requests
    # (a request the replay skips: every token "skipped"), and the two bounds at this size.
    miss_tokens: dict[str, int] | None = None
    bound_infinite: int | None = None
    bound_belady: int | None = None
    misses: list[Any] | None = field(default=None, repr=False)  # each request's Miss, when kept

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "policy": self.policy,
            "num_blocks": self.num_blocks,
            "skipped": self.skipped,
            "hit_tokens": self.hit_tokens,
            "hit_rate": self.hit_rate,
            "seconds": round(self.seconds, 4),
        }
        if self.scheduler is not None:
            d["scheduler"] = self.scheduler
        if self.miss_tokens is not None:
            d["miss_tokens"] = dict(self.miss_tokens)
        if self.bound_infinite is not None:
            d["bound_infinite"] = self.bound_infinite
        if self.bound_belady is not None:
            d["bound_belady"] = self.bound_belady
        return d


def add_miss(total: dict[str, int], tokens: dict[str, int]) -> None:
    """Add one lookup's missed tokens by reason to a run's totals."""
    for reason, n in tokens.items():
        total[reason] = total.get(reason, 0) + n


def ordered_reasons(total: dict[str, int]) -> dict[str, int]:
    """The totals in the reasons' order (design section 14)."""
    return {r: total[r] for r in REASONS if total.get(r)}


def check_num_blocks(num_blocks: int, max_blocks: int = MAX_NUM_BLOCKS) -> None:
    """BadInput unless ``num_blocks`` is a pool size a run accepts."""
    if not isinstance(num_blocks, int) or num_blocks < 2:
        raise BadInput(f"num_blocks must be an integer >= 2 (block 0 is the null block), got {num_blocks!r}")
    if num_blocks > max_blocks:
        raise BadInput(f"num_blocks {num_blocks:,} is more than the limit of {max_blocks:,} blocks")


def tick(progress: Callable[[int], None] | None, k: int) -> None:
    """Report ``k + 1`` requests done, every 32 requests."""
    if progress is not None and k % 32 == 31:
        progress(k + 1)
