"""Selections of a step's typed records (explorer/scenario/records.py) that many tests make."""

from __future__ import annotations

from explorer.scenario.records import Touched
from explorer.scenario.trace import Step


def evictions(step: Step) -> list[tuple[int, bytes]]:
    """(block id, hash it lost) of every block the step popped while it still held a hash, in pop order."""
    return [(p.block_id, p.evicted_hash) for p in step.evictions() if p.evicted_hash is not None]


def touched_ids(step: Step) -> list[int]:
    """The hit blocks touched, in touch order."""
    return [t.block_id for t in step.of(Touched)]


def from_free_ids(step: Step) -> list[int]:
    """The touched blocks that left the free queue (their ref_cnt was 0)."""
    return [t.block_id for t in step.of(Touched) if t.from_free]
