"""One run's result, and the checks and progress ticks every replay policy shares."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from explorer.errors import BadInput

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
    concurrency: dict[str, Any] | None = None

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
        if self.concurrency is not None:
            d["concurrency"] = self.concurrency
        return d


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
