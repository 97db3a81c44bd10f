"""Number words and request lookups shared by the sentence builders (``counted`` is the one
pluralisation rule, explorer.numbers')."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from explorer.numbers import counted
from explorer.scenario.cli import id_ranges
from explorer.scenario.records import CachedBlock, Popped
from explorer.scenario.trace import RequestView, Step, Trace

__all__ = ["blocks_text", "counted", "ids_text", "indexes_text", "new_blocks", "request_at", "tail_words"]


def blocks_text(count: int) -> str:
    return counted(count, "block")


def ids_text(ids: Iterable[int]) -> str:
    """Block ids with runs of consecutive ids shortened ("1-3, 7-5"), or "none"."""
    items = list(ids)
    if not items:
        return "none"
    return id_ranges(items)[1:-1]


def indexes_text(cached: Sequence[CachedBlock], hybrid: bool, limit: int | None = None) -> str:
    """The block indexes of cached blocks ("0-3"); with hybrid groups each group's own, named
    ("0-3 in group 0, 0-3 in group 1"), since every group has its own block table."""
    shown = list(cached[:limit] if limit is not None else cached)
    more = " ..." if limit is not None and len(cached) > limit else ""
    if not hybrid:
        return ids_text(c.index for c in shown) + more
    gids = list(dict.fromkeys(c.group_id for c in shown))
    return ", ".join(f"{ids_text(c.index for c in shown if c.group_id == g)} in group {g}" for g in gids) + more


def request_at(trace: Trace, k: int, rid: str | None) -> RequestView | None:
    """The request's view after step k, or (if it finished) before it."""
    if rid is None:
        return None
    snap = trace.snapshot_at(k)
    r = snap.request(rid)
    if r is None and k > 0:
        r = trace.snapshot_at(k - 1).request(rid)
    return r


def tail_words(n: int, bs: int) -> str:
    tail = n % bs
    if tail == 0:
        return f"no partial tail ({n:,} is a multiple of {bs})"
    return f"a partial tail of {counted(tail, 'token')} that gets no hash"


def new_blocks(step: Step, request_id: str | None = None) -> list[int]:
    """The blocks the step's allocations popped, in pop order, as the pool reported them: every
    group's (``new_block_ids`` is the first group's alone); only ``request_id``'s if given."""
    return [p.block_id for p in step.of(Popped) if request_id is None or p.request_id == request_id]
