"""The CPU tier of the offloading connector: vLLM 0.31.0's `CPUOffloadingManager` with its
`LRUCachePolicy` (vllm/v1/kv_offload/cpu/manager.py, cpu/policies/lru.py, base.py).

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
used. Eviction takes the lowest ranks among the evictable chunks, never one of the store's own
keys. Chunk ids come from a fresh counter first, then from the freed list (last freed first).
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


@dataclass(frozen=True)
class OffloadingEvent:
    keys: tuple[OffloadKey, ...]
    removed: bool  # True: evicted; False: stored


@dataclass(frozen=True)
class CPUChunk:
    """One chunk of the tier as reported: its key, CPU chunk id, and whether it is ready and
    pinned by loads (``ref_cnt``)."""

    key: OffloadKey
    chunk_id: int
    ref_cnt: int


class CPUOffloadingManager:
    def __init__(self, num_chunks: int, enable_events: bool) -> None:
        self.num_chunks = num_chunks
        self._num_allocated_chunks = 0
        self._free_list: list[int] = []
        self.events: list[OffloadingEvent] | None = [] if enable_events else None
        # The LRU policy: every chunk, its rank, and which are evictable (ready, unpinned).
        self.chunks: dict[OffloadKey, ChunkStatus] = {}
        self._ranks: dict[OffloadKey, int] = {}
        self._evictable: set[OffloadKey] = set()
        # The evictable chunks by rank, lazily: an entry counts only while its key is evictable
        # with that rank (a key re-ranked or pinned leaves a stale entry behind).
        self._heap: list[tuple[int, OffloadKey]] = []
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

    def _update_recency(self, keys: Sequence[OffloadKey]) -> None:
        for key in keys:
            if key in self.chunks:
                self._next_rank += 1
                self._ranks[key] = self._next_rank
                if key in self._evictable:
                    self._mark_evictable(key)

    def _evict(self, n: int, protected: set[OffloadKey]) -> list[OffloadKey] | None:
        """The n least recently used evictable chunks outside ``protected``; None (and no
        change) if there are fewer."""
        chosen: list[tuple[int, OffloadKey]] = []
        chosen_keys: set[OffloadKey] = set()
        skipped: list[tuple[int, OffloadKey]] = []
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
        for key in keys:
            if key not in state.seen_set:
                assert not state.finished, "new cache keys observed after request finalization"
                state.seen.append(key)
                state.seen_set.add(key)

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
            self._next_rank += 1
            self._ranks[key] = self._next_rank
        self._num_write_pending_chunks += len(to_store)
        return to_store, evicted

    def complete_store(self, keys: Sequence[OffloadKey]) -> list[OffloadKey]:
        """The chunks written become ready (and evictable); returns them."""
        stored = []
        for key in keys:
            chunk = self.chunks.get(key)
            if chunk is not None and not chunk.is_ready:
                chunk.ref_cnt = 0
                self._num_write_pending_chunks -= 1
                self._mark_evictable(key)
                stored.append(key)
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
        if not self.events:
            return []
        events, self.events = self.events, []
        return events

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
