"""The CPU tier of the offloading connector: vLLM's `CPUOffloadingManager` with its
`LRUCachePolicy` (vllm/v1/kv_offload/cpu/manager.py, cpu/policies/lru.py, base.py), as in
0.31.0 or, with ``request_scoped`` (the release switch ``request_scoped_cpu_lru``), as in 0.33.0.

The tier holds ``num_chunks`` chunks, each the KV of one offloaded chunk of blocks (one GPU
block here), named by an offload key (the block hash; one KV cache group). A chunk is written
in two steps: ``prepare_store`` inserts it not ready (``ref_cnt = -1``), evicting least
recently used ready chunks when the tier is full, or refuses the whole store (None) when
too few chunks can be evicted; ``complete_store`` makes it ready (``ref_cnt = 0``). A load
pins its chunks (``prepare_load``, ``ref_cnt + 1``) until ``complete_load``; only ready,
unpinned chunks are evictable. ``lookup`` answers MISS, HIT, or HIT_PENDING for a chunk still
being written.

Recency is a rank per chunk (higher: more recently used): a chunk gets one when it is inserted,
and when a request finishes, every chunk it stored or loaded (still in the tier) gets a new
rank, from its last block back to its first, so a prefix's first block is the most recently
used. Under 0.33.0 a rank is a pair: the chunks a request stores or first accesses share that
request's rank (taken from the counter when the request first records an access, once per
cache generation), ordered by token position, its tail below its head; an access raises a
chunk to the accessing request's rank, never lowers it; a finish re-ranks as above. Eviction
takes the lowest ranks among the evictable chunks, never one of the store's own keys. Chunk ids come from a fresh counter first, then from the freed list (last freed first).
With events on, each eviction is one removal event and each completed store one store event.
``get_stats`` reports, once per update, the chunks each store asked for since the last call
(a refused store's too) and the share of the tier pinned by in-flight stores and loads.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum, auto

from explorer.core.sched.output import OffloadingConnectorStats

OffloadKey = bytes  # the block hash of a chunk's last block (group 0)
# A chunk's recency: (counter, 0) for a plain use; under 0.33.0 also (request rank, -position).
Rank = tuple[int, int]


class LookupResult(Enum):
    MISS = auto()
    HIT = auto()
    HIT_PENDING = auto()


@dataclass
class ChunkStatus:
    """``ref_cnt``: -1 while being written, else the loads reading it."""

    chunk_id: int
    ref_cnt: int = -1

    @property
    def is_ready(self) -> bool:
        return self.ref_cnt >= 0


@dataclass
class RequestCacheAccess:
    """The keys one request stored or loaded, in first-seen order (vLLM's _RequestCacheAccess)."""

    cache_generation: int
    seen: list[OffloadKey] = field(default_factory=list)
    seen_set: set[OffloadKey] = field(default_factory=set)
    finished: bool = False


@dataclass
class ReqContext:
    """Per request: each offload key's end position in tokens, and its cache access."""

    req_id: str
    positions: dict[OffloadKey, int] = field(default_factory=dict)
    access: RequestCacheAccess | None = None
    # 0.33.0: the request's rank and the cache generation it was taken in (vLLM's _RequestRank).
    request_rank: tuple[int, int] | None = None


@dataclass(frozen=True)
class OffloadingEvent:
    keys: tuple[OffloadKey, ...]
    removed: bool  # True: evicted; False: stored
    # A failed store's chunks dropped (0.33.0): bookkeeping only, no public removal.
    metadata_only: bool = False


@dataclass(frozen=True)
class CPUChunk:
    """One chunk of the tier as reported: its key, CPU chunk id, and whether it is ready and
    pinned by loads (``ref_cnt``)."""

    key: OffloadKey
    chunk_id: int
    ref_cnt: int


class CPUOffloadingManager:
    def __init__(self, num_chunks: int, enable_events: bool, request_scoped: bool = False) -> None:
        self.num_chunks = num_chunks
        self.request_scoped = request_scoped
        self._num_allocated_chunks = 0
        self._free_list: list[int] = []
        self.events: list[OffloadingEvent] | None = [] if enable_events else None
        # The LRU policy: every chunk, its rank, and which are evictable (ready, unpinned).
        self.chunks: dict[OffloadKey, ChunkStatus] = {}
        self._ranks: dict[OffloadKey, Rank] = {}
        self._evictable: set[OffloadKey] = set()
        # The evictable chunks by rank, lazily: an entry counts only while its key is evictable
        # with that rank (a key re-ranked or pinned leaves a stale entry behind).
        self._heap: list[tuple[Rank, OffloadKey]] = []
        self._next_rank = 0
        self._cache_generation = 0
        self._num_write_pending_chunks = 0  # chunks being written (ref_cnt -1)
        self._allocation_sizes: list[int] = []  # the chunks each store asked for since get_stats

    # ---- the chunk pool and the policy ---------------------------------------------------

    def _num_free_chunks(self) -> int:
        return len(self._free_list) + self.num_chunks - self._num_allocated_chunks

    def _allocate_chunk(self) -> ChunkStatus:
        if self._num_allocated_chunks < self.num_chunks:
            self._num_allocated_chunks += 1
            return ChunkStatus(self._num_allocated_chunks - 1)
        return ChunkStatus(self._free_list.pop())

    def _mark_evictable(self, key: OffloadKey) -> None:
        self._evictable.add(key)
        heapq.heappush(self._heap, (self._ranks[key], key))
        if len(self._heap) > max(64, 2 * len(self._evictable)):  # drop the stale entries
            self._heap = [(self._ranks[k], k) for k in self._evictable]
            heapq.heapify(self._heap)

    def _set_rank(self, key: OffloadKey, rank: Rank) -> None:
        self._ranks[key] = rank
        if key in self._evictable:
            self._mark_evictable(key)

    def _update_recency(self, keys: Sequence[OffloadKey]) -> None:
        for key in keys:
            if key in self.chunks:
                self._next_rank += 1
                self._set_rank(key, (self._next_rank, 0))

    def _request_rank(self, ctx: ReqContext) -> int:
        """The request's rank in this cache generation, taken from the counter on first use
        (LRUCachePolicy._get_request_rank, cpu/policies/lru.py:51-61 in 0.33.0)."""
        if ctx.request_rank is None or ctx.request_rank[0] != self._cache_generation:
            self._next_rank += 1
            ctx.request_rank = (self._cache_generation, self._next_rank)
        return ctx.request_rank[1]

    def _insert_rank(self, key: OffloadKey, ctx: ReqContext) -> Rank:
        """A stored chunk's first rank: the counter's next, or under 0.33.0, for a key with a
        position, the request's rank at that position (LRUCachePolicy.insert,
        cpu/policies/lru.py:108-120 in 0.33.0)."""
        position = ctx.positions.get(key) if self.request_scoped else None
        if position is None:
            self._next_rank += 1
            return (self._next_rank, 0)
        return (self._request_rank(ctx), -position)

    def _on_request_access(self, keys: Sequence[OffloadKey], ctx: ReqContext) -> None:
        """0.33.0: the keys a request records for the first time rise to its rank at their
        positions, never lower (LRUCachePolicy.on_request_access, cpu/policies/lru.py:132-152
        in 0.33.0); the request takes its rank even when none of them is in the tier."""
        request_rank = self._request_rank(ctx)
        for key in keys:
            position = ctx.positions.get(key)
            if position is None or key not in self.chunks:
                continue
            rank = (request_rank, -position)
            if self._ranks[key] < rank:
                self._set_rank(key, rank)

    def _evict(self, n: int, protected: set[OffloadKey]) -> list[OffloadKey] | None:
        """The n least recently used evictable chunks outside ``protected``; None (and no
        change) if there are fewer."""
        chosen: list[tuple[Rank, OffloadKey]] = []
        chosen_keys: set[OffloadKey] = set()
        skipped: list[tuple[Rank, OffloadKey]] = []
        while self._heap and len(chosen) < n:
            rank, key = heapq.heappop(self._heap)
            if key not in self._evictable or self._ranks.get(key) != rank or key in chosen_keys:
                continue  # stale (or a second entry of the same key and rank)
            if key in protected:
                skipped.append((rank, key))
            else:
                chosen.append((rank, key))
                chosen_keys.add(key)
        for entry in skipped if len(chosen) == n else skipped + chosen:
            heapq.heappush(self._heap, entry)
        if len(chosen) < n:
            return None
        for _, key in chosen:
            self._evictable.remove(key)
            self._free_list.append(self.chunks.pop(key).chunk_id)
            del self._ranks[key]
        return [key for _, key in chosen]

    def _access(self, ctx: ReqContext) -> RequestCacheAccess:
        """The request's access record of this cache generation (a new one after a reset)."""
        state = ctx.access
        if state is None or state.cache_generation != self._cache_generation:
            state = ctx.access = RequestCacheAccess(self._cache_generation)
        return state

    def _record_access(self, keys: Sequence[OffloadKey], ctx: ReqContext) -> None:
        state = self._access(ctx)
        new_keys = []
        for key in keys:
            if key not in state.seen_set:
                assert not state.finished, "new cache keys observed after request finalization"
                state.seen.append(key)
                state.seen_set.add(key)
                new_keys.append(key)
        # 0.33.0 tells the policy of the keys new to the request (cpu/manager.py:171-183 in 0.33.0).
        if new_keys and self.request_scoped:
            self._on_request_access(new_keys, ctx)

    # ---- the OffloadingManager interface ----------------------------------------------------

    def on_new_request(self, ctx: ReqContext) -> None:
        self._access(ctx)

    def lookup(self, key: OffloadKey) -> LookupResult:
        chunk = self.chunks.get(key)
        if chunk is None:
            return LookupResult.MISS
        return LookupResult.HIT if chunk.is_ready else LookupResult.HIT_PENDING

    def prepare_load(self, keys: Sequence[OffloadKey], ctx: ReqContext) -> None:
        """Pin the chunks a load reads."""
        for key in keys:
            chunk = self.chunks[key]
            assert chunk.is_ready, "a load reads only ready chunks"
            if chunk.ref_cnt == 0:
                self._evictable.remove(key)
            chunk.ref_cnt += 1
        self._record_access(keys, ctx)

    def complete_load(self, keys: Sequence[OffloadKey]) -> None:
        for key in keys:
            chunk = self.chunks[key]
            assert chunk.ref_cnt > 0
            chunk.ref_cnt -= 1
            if chunk.ref_cnt == 0:
                self._mark_evictable(key)

    def prepare_store(
        self, keys: Sequence[OffloadKey], ctx: ReqContext
    ) -> tuple[list[OffloadKey], list[OffloadKey]] | None:
        """(the keys to write, the keys evicted for them), or None: not enough room, nothing
        changes but the request's access record."""
        to_store = [k for k in keys if k not in self.chunks]
        recorded = set(to_store) | {k for k in keys if k in self.chunks and self.chunks[k].is_ready}
        self._record_access([k for k in keys if k in recorded], ctx)
        if not to_store:
            return [], []
        self._allocation_sizes.append(len(to_store))
        evicted: list[OffloadKey] = []
        num_to_evict = len(to_store) - self._num_free_chunks()
        if num_to_evict > 0:
            if num_to_evict > len(self._evictable):
                return None
            found = self._evict(num_to_evict, set(keys))
            if found is None:
                return None
            evicted = found
            if self.events is not None:
                self.events.append(OffloadingEvent(tuple(evicted), removed=True))
        for key in to_store:
            self.chunks[key] = self._allocate_chunk()
            self._ranks[key] = self._insert_rank(key, ctx)
        self._num_write_pending_chunks += len(to_store)
        return to_store, evicted

    def complete_store(self, keys: Sequence[OffloadKey], success: bool = True) -> list[OffloadKey]:
        """The chunks written become ready (and evictable); returns them. A failed store
        (``success`` False; the offloading connector's own jobs never fail) frees its chunks
        instead, with a removal event marked metadata only (CPUOffloadingManager.complete_store,
        cpu/manager.py:382-410 in 0.33.0)."""
        stored, dropped = [], []
        for key in keys:
            chunk = self.chunks.get(key)
            if chunk is None or chunk.is_ready:
                continue
            self._num_write_pending_chunks -= 1
            if success:
                chunk.ref_cnt = 0
                self._mark_evictable(key)
                stored.append(key)
            else:
                del self.chunks[key], self._ranks[key]
                self._free_list.append(chunk.chunk_id)
                dropped.append(key)
        if dropped and self.events is not None:
            self.events.append(OffloadingEvent(tuple(dropped), removed=True, metadata_only=True))
        if stored and self.events is not None:
            self.events.append(OffloadingEvent(tuple(stored), removed=False))
        return stored

    def on_request_finished(self, ctx: ReqContext) -> None:
        """The request's chunks become the most recently used, its first block last of all."""
        state = ctx.access
        if state is None or state.cache_generation != self._cache_generation or state.finished:
            return
        state.finished = True
        keys = list(state.seen)
        if all(k in ctx.positions for k in keys):
            keys.sort(key=ctx.positions.__getitem__)
        self._update_recency(keys[::-1])

    def reset_cache(self) -> None:
        """Forget every chunk, whatever its state."""
        self.chunks.clear()
        self._ranks.clear()
        self._evictable.clear()
        self._heap.clear()
        self._next_rank = 0
        self._cache_generation += 1
        self._num_write_pending_chunks = 0
        self._free_list.clear()
        self._num_allocated_chunks = 0

    def take_events(self) -> list[OffloadingEvent]:
        """The events since the last call; a metadata-only removal keeps only the keys not
        stored again since (CPUOffloadingManager.take_events, cpu/manager.py:466-479 in 0.33.0)."""
        if not self.events:
            return []
        events, self.events = self.events, []
        out = []
        for ev in events:
            if ev.metadata_only:
                ev = OffloadingEvent(tuple(k for k in ev.keys if k not in self.chunks), True, True)
                if not ev.keys:
                    continue
            out.append(ev)
        return out

    def get_stats(self) -> OffloadingConnectorStats:
        """The store sizes since the last call (then forgotten) and the tier's usage: the chunks
        neither free nor evictable (being written, or pinned by loads), over the tier's size;
        the write share is the chunks being written, the read share the rest."""
        sizes, self._allocation_sizes = self._allocation_sizes, []
        num_used = len(self.chunks) - len(self._evictable)
        usage = num_used / self.num_chunks if self.num_chunks > 0 else 0.0
        write_usage = self._num_write_pending_chunks / self.num_chunks if self.num_chunks > 0 else 0.0
        return OffloadingConnectorStats(
            cpu_allocation_sizes=sizes,
            cpu_cache_usage=usage,
            cpu_cache_write_usage=write_usage,
            cpu_cache_read_usage=max(usage - write_usage, 0.0),
        )

    def lru_order(self) -> list[CPUChunk]:
        """Every chunk, least recently used first."""
        keys = sorted(self.chunks, key=self._ranks.__getitem__)
        return [CPUChunk(k, self.chunks[k].chunk_id, self.chunks[k].ref_cnt) for k in keys]
