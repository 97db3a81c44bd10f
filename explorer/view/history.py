"""Block-level facts derived from a trace's snapshots (pure, no Streamlit).

- `changed_blocks(trace, k)`: the blocks step k changed (ref_cnt, hash, or touched by the op).
- `block_history(trace, block_id)`: who held a block and when it got and lost its hash.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from explorer.scenario.records import CachedBlock, Freed, Popped, Touched
from explorer.scenario.trace import Snapshot, Step, Trace


def changed_blocks(trace: Trace, k: int) -> set[int]:
    """Blocks whose state step k changed, plus every block the op handled."""
    if k <= 0:
        return set()
    step = trace.steps[k - 1]
    before = trace.snapshot_at(k - 1).blocks
    after = trace.snapshot_at(k).blocks
    out = {i for i, (a, b) in enumerate(zip(before, after)) if a != b}
    out.update(step.new_block_ids or ())
    for r in step.records:  # touched, freed, cached, and popped while still cached (evicted)
        if isinstance(r, (Touched, Freed, CachedBlock)) or (isinstance(r, Popped) and r.evicted_hash is not None):
            out.add(r.block_id)
    out.discard(0)
    return out


@dataclass(frozen=True)
class HistoryEntry:
    step: int  # 1-based step number
    label: str  # "admit B1"
    text: str  # what happened to the block


def _holders(snap: Snapshot, block_id: int) -> dict[str, int]:
    """request id -> position of the block in its block table."""
    out = {}
    for r in snap.requests:
        with contextlib.suppress(ValueError):
            out[r.request_id] = r.block_ids.index(block_id)
    return out


def holders_of(snap: Snapshot) -> dict[int, dict[str, int]]:
    """Block id -> request id -> the block's position in that request's table."""
    by_block: dict[int, dict[str, int]] = {}
    for r in snap.requests:
        for pos, b in enumerate(r.block_ids):
            by_block.setdefault(b, {}).setdefault(r.request_id, pos)
    return by_block


class StepBlocks:
    """One step's block records by block id (the first of each kind per block), indexed once:
    the histories of a full pool's blocks would otherwise each scan every record of a step."""

    def __init__(self, step: Step) -> None:
        self.evicted: dict[int, bytes] = {}  # popped while still cached: the hash it lost
        self.touched: set[int] = set()
        self.cached: dict[int, CachedBlock] = {}
        self.freed: dict[int, Freed] = {}
        for r in step.records:
            if isinstance(r, Popped):
                if r.evicted_hash is not None:
                    self.evicted.setdefault(r.block_id, r.evicted_hash)
            elif isinstance(r, Touched):
                self.touched.add(r.block_id)
            elif isinstance(r, CachedBlock):
                self.cached.setdefault(r.block_id, r)
            elif isinstance(r, Freed):
                self.freed.setdefault(r.block_id, r)


def block_history(
    trace: Trace,
    block_id: int,
    holders_at: list[dict[int, dict[str, int]]] | None = None,
    changed_at: list[set[int]] | None = None,
    blocks_at: dict[int, StepBlocks] | None = None,
    pairs_at: list[dict[int, tuple[int, bytes | None]]] | None = None,
) -> list[HistoryEntry]:
    """Every step that changed the block, oldest first. For the histories of many blocks give
    ``holders_at`` (`holders_of` each state) and ``changed_at`` (``changed_blocks(trace, k)``
    for every k): a step that did not change the block nor its holders is then skipped unread;
    one ``blocks_at`` dict for all of them, which keeps each step's `StepBlocks` once made; and
    ``pairs_at``, each step's (ref_cnt, hash) of the blocks it changed: then no state is read
    again (a state is a checkpoint driven forward, and every block's history would be a replay)."""
    if not 0 <= block_id < len(trace.initial.blocks):
        return []
    if blocks_at is None:
        blocks_at = {}

    def held(k: int) -> dict[str, int]:
        if holders_at is not None:
            return dict(holders_at[k].get(block_id, {}))
        return _holders(trace.snapshot_at(k), block_id)

    out: list[HistoryEntry] = []
    prev_pair = trace.initial.blocks[block_id]
    prev_holders = held(0)
    for k, step in enumerate(trace.steps, start=1):
        unchanged = changed_at is not None and holders_at is not None and block_id not in changed_at[k]
        if unchanged and holders_at is not None and holders_at[k].get(block_id) == holders_at[k - 1].get(block_id):
            prev_holders = held(k)  # and its (ref_cnt, hash) stays: the step did not change it
            continue
        if pairs_at is not None:
            pair = pairs_at[k].get(block_id, prev_pair)
        else:
            pair = trace.snapshot_at(k).blocks[block_id]
        rc0, h0 = prev_pair
        rc1, h1 = pair
        holders = held(k)
        op = step.op
        label = f"{op.op} {op.id}" if op.id is not None else op.op
        what: list[str] = []
        facts = blocks_at.get(k)
        if facts is None:
            facts = blocks_at[k] = StepBlocks(step)
        evicted = facts.evicted.get(block_id)
        if evicted is not None:
            what.append(f"popped while still cached: lost hash {evicted.hex()[:12]}... (evicted, BlockRemoved)")
        elif h0 is not None and h1 != h0:
            why = "cache reset (AllBlocksCleared)" if op.op == "reset" else "evicted"
            what.append(f"lost hash {h0.hex()[:12]}... ({why})")
        for rid in holders.keys() - prev_holders.keys():
            pos = holders[rid]
            if block_id in facts.touched:
                how = "cache hit, taken out of the free queue" if rc0 == 0 else "cache hit, now shared"
            elif block_id in (step.new_block_ids or ()):
                how = "popped from the free queue head"
            else:
                how = "allocated"
            what.append(f"taken by {rid} as its block {pos} ({how})")
        cached = facts.cached.get(block_id)
        if h1 is not None and h1 != h0 and cached is not None:
            dup = f"; duplicate of #{', #'.join(map(str, cached.duplicate_of))}" if cached.duplicate_of else ""
            what.append(f"got hash {h1.hex()[:12]}... as block {cached.index} of {op.id} (BlockStored{dup})")
        for rid in prev_holders.keys() - holders.keys():
            fr = facts.freed.get(block_id)
            where = {
                "front": "to the front of the free queue",
                "back": "to the back of the free queue (still cached)",
                "held": "still held by another request",
            }.get(fr.to if fr else "", "")
            what.append(f"released by {rid}" + (f", {where}" if where else ""))
        if rc1 != rc0:
            what.append(f"ref_cnt {rc0} -> {rc1}")
        if what:
            out.append(HistoryEntry(k, label, "; ".join(what)))
        prev_pair, prev_holders = pair, holders
    return out
