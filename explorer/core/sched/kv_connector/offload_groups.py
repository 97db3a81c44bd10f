"""The offloading connector's view of the KV cache groups (design sections 8 and 10): vLLM
0.31.0's ``GroupOffloadConfig`` and its per-group lookup and store rules
(distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py; one GPU block per chunk).

- An offload key is a chunk's block hash followed by its group index in 4 bytes, big endian
  (``make_offload_key``, vllm/v1/kv_offload/base.py:28-35): one CPU pool holds every group.
- Each group keys its chunks at its own block size: the hash of the chunk's last hash unit.
- The lookup runs the full-attention groups first, a run of hits from the local hit on, then
  the sliding-window groups, widest window first, each looking for the last run of window-many
  hits from the end; a group that lowers the hit sends the others round again
  (``_lookup_complete_chunks``, offloading/scheduler.py:749-949). With any window group the
  hit stops one token short of the request's tokens.
- A window group stores only the chunks a later hit can reach: the same tails as its GPU
  retention keeps, at the full-attention chunk size (``_reachable_store_block_mask``,
  offloading/scheduler.py:1448-1485; ``SlidingWindowManager.reachable_block_mask``,
  single_type_kv_cache_manager.py:1072-1151).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from explorer.core.events import BlockRemoved, BlockStored, KVCacheEvent
from explorer.core.hashing import BlockHash, ExternalBlockHash, maybe_convert_block_hash
from explorer.core.kv_cache_interface import SLIDING_WINDOW, KVCacheSpec, full_attention
from explorer.core.sched.kv_connector.cpu_tier import LookupResult, OffloadingEvent, OffloadKey, ReqContext

if TYPE_CHECKING:
    from explorer.core.request import Request

MEDIUM_CPU = "CPU"


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def make_offload_key(block_hash: bytes, group_idx: int) -> OffloadKey:
    return bytes(block_hash) + group_idx.to_bytes(4, "big")


def offload_block_hash(key: OffloadKey) -> bytes:
    return key[:-4]


def offload_group_idx(key: OffloadKey) -> int:
    return int.from_bytes(key[-4:], "big")


def block_hashes_of(keys: Sequence[OffloadKey]) -> tuple[bytes, ...]:
    return tuple(offload_block_hash(k) for k in keys)


@dataclass(frozen=True)
class GroupOffloadConfig:
    """One group as the connector sees it; ``window_chunks`` None: full attention."""

    group_idx: int
    tokens_per_chunk: int  # the group's block size (one block per chunk)
    hashes_per_chunk: int
    sliding_window: int | None
    window_chunks: int | None

    def load_window_size_in_chunks(self, num_tokens: int) -> int | None:
        """The chunks a window load needs ending at ``num_tokens``: one more when the hit ends
        mid-chunk and the window reaches back into it (offloading/scheduler.py:107-124)."""
        if self.sliding_window is None or self.window_chunks is None:
            return self.window_chunks
        right_padding = -num_tokens % self.tokens_per_chunk
        return max(self.window_chunks, cdiv(self.sliding_window - 1 + right_padding, self.tokens_per_chunk))


def group_configs(specs: Sequence[KVCacheSpec], hash_block_size: int) -> tuple[GroupOffloadConfig, ...]:
    out = []
    for i, spec in enumerate(specs):
        window = spec.sliding_window if spec.kind == SLIDING_WINDOW else None
        out.append(
            GroupOffloadConfig(
                i,
                spec.block_size,
                spec.block_size // hash_block_size,
                window,
                None if window is None else max(cdiv(window, spec.block_size), cdiv(window - 1, spec.block_size)),
            )
        )
    return tuple(out)


def single_group(block_size: int) -> tuple[GroupOffloadConfig, ...]:
    return group_configs((full_attention(block_size),), block_size)


def alignment_tokens(configs: Sequence[GroupOffloadConfig]) -> int | None:
    """The full-attention chunk size when there is exactly one; with no full-attention group,
    the largest chunk size (SchedulerOffloadConfig.from_spec, offloading/scheduler.py:189-208)."""
    full = {c.tokens_per_chunk for c in configs if c.window_chunks is None}
    if len(full) == 1:
        return full.pop()
    if not full:
        return max(c.tokens_per_chunk for c in configs)
    return None


@dataclass(frozen=True)
class OffloadLayout:
    """Every group as the connector sees it, the retention interval, the alignment, and the
    lookup's order: full attention first, then the windows widest first (a stable sort,
    ``_sliding_window_sort_key``, offloading/scheduler.py:584-592)."""

    groups: tuple[GroupOffloadConfig, ...]
    retention_interval: int | None
    alignment_tokens: int | None
    window_groups: tuple[int, ...]
    lookup_groups: tuple[int, ...]


def offload_layout(configs: tuple[GroupOffloadConfig, ...], retention_interval: int | None) -> OffloadLayout:
    full = tuple(c.group_idx for c in configs if c.window_chunks is None)
    windows = [c for c in configs if c.window_chunks is not None]
    widest = tuple(c.group_idx for c in sorted(windows, key=lambda c: c.window_chunks or 0, reverse=True))
    return OffloadLayout(configs, retention_interval, alignment_tokens(configs), widest, full + widest)


@dataclass
class RequestGroupState:
    offload_keys: list[OffloadKey] = field(default_factory=list)
    block_ids: list[int] = field(default_factory=list)  # the group's GPU blocks, as scheduled
    next_stored_chunk_idx: int = 0


@dataclass
class RequestOffloadState:
    req: Request
    ctx: ReqContext
    groups: tuple[RequestGroupState, ...]
    num_locally_computed_tokens: int = 0
    transfer_jobs: set[int] = field(default_factory=set)
    finished_signaled: bool = False

    def update_offload_keys(self, configs: Sequence[GroupOffloadConfig]) -> None:
        """Each group's key per chunk: the hash of its last hash unit, with the group."""
        hashes = self.req.block_hashes
        for gc, gs in zip(configs, self.groups):
            h = gc.hashes_per_chunk
            for i in range(h * len(gs.offload_keys) + h - 1, len(hashes), h):
                key = make_offload_key(hashes[i], gc.group_idx)
                gs.offload_keys.append(key)
                self.ctx.positions[key] = len(gs.offload_keys) * gc.tokens_per_chunk

    def clear_block_ids(self) -> None:
        for gs in self.groups:
            gs.block_ids.clear()

    def advance_stored(self, ranges: Sequence[tuple[int, int]]) -> None:
        """Each group's next store starts past the chunks just considered."""
        for gs, (_, end) in zip(self.groups, ranges):
            gs.next_stored_chunk_idx = max(gs.next_stored_chunk_idx, end)


Lookup = Callable[[OffloadKey], LookupResult]


def prefix_lookup(keys: Sequence[OffloadKey], lookup: Lookup) -> int | None:
    """The run of hits from the first key; None if any of it is still being written."""
    hits, pending = 0, False
    for key in keys:
        result = lookup(key)
        if result == LookupResult.MISS:
            break
        pending = pending or result == LookupResult.HIT_PENDING
        hits += 1
    return None if pending else hits


def sliding_window_lookup(keys: Sequence[OffloadKey], window: int, initial_window: int, lookup: Lookup) -> int | None:
    """From the end, the end index of the first run of ``window`` hits (``initial_window`` for
    the rightmost run); else the run at the start, however short. None while a key of the
    run is being written (``_sliding_window_lookup``, offloading/scheduler.py:705-747)."""
    pending, run, required = False, 0, initial_window or window
    for idx in range(len(keys) - 1, -1, -1):
        result = lookup(keys[idx])
        if result == LookupResult.MISS:
            run, pending, required = 0, False, window
        else:
            pending = pending or result == LookupResult.HIT_PENDING
            run += 1
        if run == required:
            return None if pending else idx + required
    return None if pending else run


def reachable_store_mask(
    config: GroupOffloadConfig,
    start: int,
    end: int,
    align: int | None,
    retention_interval: int | None,
    boundaries: Sequence[int],
    final_segment_end: int | None,
) -> list[bool] | None:
    """Which of chunks ``start..end`` a later hit can reach (None: all of them): a full
    attention group, every one; a window group, the tails of ``need`` blocks ending at each
    aligned segment boundary (dense retention: every boundary), at the request's final
    segment end, and, with any retention but dense, at the replay boundaries
    (SlidingWindowManager.reachable_block_mask, single_type_kv_cache_manager.py:1072-1151)."""
    if config.sliding_window is None or align is None:
        return None
    bs = config.tokens_per_chunk
    if align % bs != 0:
        return None
    need = cdiv(config.sliding_window - 1, bs)
    mask = [False] * (end - start)
    segment_tokens = align if retention_interval is None else (retention_interval or None)
    if segment_tokens is not None:
        per_segment = segment_tokens // bs
        if need >= per_segment:
            return None
        for i in range(start, end):
            if i % per_segment >= per_segment - need:
                mask[i - start] = True
        if final_segment_end is not None:
            size = final_segment_end % per_segment
            if size:
                tail_start = max(final_segment_end - size, final_segment_end - need)
                for i in range(max(start, tail_start), min(end, final_segment_end)):
                    mask[i - start] = True
    if retention_interval is not None:
        for boundary in boundaries:
            stop = boundary // align * align // bs
            for j in range(max(start, stop - need), min(end, stop)):
                mask[j - start] = True
    return mask


def cpu_kv_events(events: Sequence[OffloadingEvent], use_int_block_hashes: bool) -> list[KVCacheEvent]:
    """The tier's events as vLLM publishes them without self-describing payloads: each stored
    chunk one BlockStored, each eviction one BlockRemoved per group (the groups in the order
    the evicted chunks first name them); medium CPU, the placeholder payload (one hash, no
    tokens, block_size 0, the chunk's group; ``_placeholder_stored``, ``_take_removed_event``,
    offloading/events.py:337-357, 407-440)."""

    def external(key: OffloadKey) -> ExternalBlockHash:
        return maybe_convert_block_hash(BlockHash(offload_block_hash(key)), use_int_block_hashes)

    out: list[KVCacheEvent] = []
    for ev in events:
        if ev.metadata_only:
            continue  # a failed store's chunks, no public removal (_take_removed_event, offloading/events.py:438-441 in 0.33.0)
        if ev.removed:
            by_group: dict[int, list[ExternalBlockHash]] = {}
            for k in ev.keys:
                by_group.setdefault(offload_group_idx(k), []).append(external(k))
            out.extend(BlockRemoved(hashes, MEDIUM_CPU, group_idx=g) for g, hashes in by_group.items())
        else:
            out.extend(
                BlockStored([external(k)], None, [], 0, None, MEDIUM_CPU, None, group_idx=offload_group_idx(k))
                for k in ev.keys
            )
    return out
