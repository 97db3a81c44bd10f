"""One publisher instance as a subscriber sees it: the blocks it holds and its sequence position.

An "instance" is one publisher's stream, told apart by (topic, data_parallel_rank) in case
several publishers connect to one bound subscriber; give each a topic of its own (or a
subscriber of its own) when they share a rank.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from explorer.core.events import BlockRemoved, BlockStored, KVEventBatch, event_to_json

InstanceKey = tuple[str, "int | None"]  # (topic, data_parallel_rank)

# Distinct block hashes one stream holds over all its instances: a real instance holds one per
# GPU block (an H200 serving an 8B model has about 60,000 of 16 tokens), so this is far above
# any real cache and keeps a hostile publisher from growing the listener without end.
DEFAULT_MAX_HASHES = 2_000_000


@dataclass(slots=True)
class HashBudget:
    """Distinct hashes a stream may still hold, shared by its instances."""

    left: int = DEFAULT_MAX_HASHES


@dataclass(slots=True)
class AppliedBatch:
    """One batch as applied to an instance, in that instance's sequence order."""

    instance: InstanceKey
    seq: int
    batch: KVEventBatch
    replayed: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "ts": self.batch.ts,
            "events": [event_to_json(e) for e in self.batch.events],
            "data_parallel_rank": self.batch.data_parallel_rank,
        }


@dataclass
class CacheInstance:
    """What one publisher instance holds, rebuilt from its events, and its stream counters."""

    key: InstanceKey
    # The multiset of block hashes: BlockStored adds a copy per hash, BlockRemoved removes
    # one copy, AllBlocksCleared empties it. Duplicates are real (two blocks, same hash).
    hashes: Counter[Any] = field(default_factory=Counter)
    by_medium: dict[str | None, Counter[Any]] = field(default_factory=dict)
    parents: dict[Any, Any] = field(default_factory=dict)  # hash -> parent hash (last stored)
    block_size: int | None = None
    budget: HashBudget = field(default_factory=HashBudget)
    # stream position
    next_seq: int | None = None  # everything below is applied or given up
    max_live: int = -1  # highest live seq seen
    initial_horizon: int = 0  # seqs below the first live one: a late joiner's replay
    pending: dict[int, tuple[KVEventBatch, bool]] = field(default_factory=dict)  # seq -> (batch, replayed)
    # counters (the stream's are the sums over instances, restarts included)
    batches: int = 0
    gaps: int = 0
    replayed: int = 0
    lost: int = 0
    unrecovered_initial: int = 0
    restarts: int = 0
    seq_jumps: int = 0  # restarts that were a jump past the replay buffer, not a fall back
    unknown_removals: int = 0
    dropped_hashes: int = 0  # stored hashes not kept: the stream's hash budget was spent
    last_seq: int | None = None

    # -- the cache -------------------------------------------------------------------------

    def clear_cache(self) -> None:
        self.budget.left += len(self.hashes)
        self.hashes.clear()
        self.by_medium.clear()
        self.parents.clear()

    def apply(self, batch: KVEventBatch) -> None:
        hashes, parents, budget = self.hashes, self.parents, self.budget
        get = hashes.get
        for ev in batch.events:
            kind = type(ev)
            if kind is BlockStored:
                parent = ev.parent_block_hash
                medium = self.by_medium.get(ev.medium)
                if medium is None:
                    medium = self.by_medium[ev.medium] = Counter()
                mget = medium.get
                self.block_size = ev.block_size
                for h in ev.block_hashes:
                    n = get(h, 0)
                    if n == 0:
                        if budget.left <= 0:
                            self.dropped_hashes += 1
                            parent = h
                            continue
                        budget.left -= 1
                    hashes[h] = n + 1
                    medium[h] = mget(h, 0) + 1
                    parents[h] = parent
                    parent = h
            elif kind is BlockRemoved:
                medium = self.by_medium.get(ev.medium)
                for h in ev.block_hashes:
                    n = get(h, 0)
                    if n <= 0:
                        self.unknown_removals += 1
                        continue
                    if n == 1:
                        del hashes[h]
                        parents.pop(h, None)
                        budget.left += 1
                    else:
                        hashes[h] = n - 1
                    if medium is not None:
                        m = medium.get(h, 0)
                        if m > 1:
                            medium[h] = m - 1
                        elif m == 1:
                            del medium[h]
            else:  # AllBlocksCleared
                self.clear_cache()

    def num_blocks(self) -> int:
        return sum(self.hashes.values())

    def prefixes(self, limit: int = 50) -> list[list[Any]]:
        """Cached prefixes as hash chains (root first), one per leaf, longest first.

        A chain follows parent links while the parent is still held, so a prefix whose first
        blocks were evicted starts at its first block still held.
        """
        held, parents = self.hashes, self.parents
        depth: dict[Any, int] = {}
        for start in held:
            path, h = [], start
            while h is not None and h in held and h not in depth:
                depth[h] = 0  # on the path (guards against a parent cycle)
                path.append(h)
                h = parents.get(h)
            d = depth.get(h, 0) if h is not None and h in held else 0
            for x in reversed(path):
                d += 1
                depth[x] = d
        children = {p for p in parents.values() if p is not None and p in held}
        leaves = heapq.nlargest(limit, (h for h in held if h not in children), key=depth.__getitem__)
        chains = []
        for leaf in leaves:
            chain: list[Any] = []
            h = leaf
            while h is not None and h in held and len(chain) < depth[leaf]:
                chain.append(h)
                h = parents.get(h)
            chain.reverse()
            chains.append(chain)
        return chains

    def counters(self) -> dict[str, int]:
        return {
            "batches": self.batches,
            "gaps": self.gaps,
            "replayed": self.replayed,
            "lost": self.lost,
            "restarts": self.restarts,
            "seq_jumps": self.seq_jumps,
            "unrecovered_initial": self.unrecovered_initial,
            "unknown_removals": self.unknown_removals,
            "dropped_hashes": self.dropped_hashes,
        }

    # -- the sequence position ---------------------------------------------------------------

    def apply_ready(self, out: list[AppliedBatch]) -> None:
        """Apply the pending batches that continue the sequence at next_seq, in order."""
        seq = self.next_seq
        if seq is None:  # no batch of this incarnation yet
            return
        pending = self.pending
        while seq in pending:
            batch, replayed = pending.pop(seq)
            self.apply(batch)
            self.batches += 1
            if replayed:
                self.replayed += 1
            self.last_seq = seq
            out.append(AppliedBatch(self.key, seq, batch, replayed))
            seq += 1
        self.next_seq = seq

    def skip_to(self, target: int) -> None:
        """Give up sequence numbers next_seq..target-1 (never received)."""
        start = self.next_seq
        if start is None or target <= start:
            return
        # Those below the first live seq predate joining: not lost, just not recovered.
        initial = max(0, min(target, self.initial_horizon) - start)
        self.unrecovered_initial += initial
        self.lost += (target - start) - initial
        self.next_seq = target

    def resolve(self, horizon: int | None, out: list[AppliedBatch]) -> None:
        """Give up the holes below ``horizon`` (all holes when None), applying what is there."""
        if self.next_seq is None:
            return
        while self.pending:
            first = min(self.pending)
            if horizon is not None and first >= horizon:
                self.skip_to(horizon)
                return
            self.skip_to(first)
            self.apply_ready(out)
        if horizon is not None:
            self.skip_to(horizon)

    def start_over(self) -> None:
        """The publisher restarted: forget the old incarnation's cache and position."""
        self.restarts += 1
        self.clear_cache()
        self.next_seq = None
        self.max_live = -1
