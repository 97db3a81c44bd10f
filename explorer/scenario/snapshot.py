"""Snapshots of one engine's pool and requests, sharing with the previous snapshot what did not change.

A recorded replay keeps a `Snapshot` after every step. Built afresh, each would copy every
block's (ref_cnt, hash) pair, every cached hash and every live request's block hashes, so
memory would grow with steps x live requests x their blocks. `Snapshots` keeps the pieces it
handed out last and gives the same objects again while they are equal: a block whose ref_cnt
and hash did not change keeps its pair, a request that did not change keeps its `RequestView`
(and a request's hash tuple is shared while no block was added), and a pool in which nothing
changed keeps its whole tuple. What a snapshot says is exactly what a fresh copy would say;
only equal values are shared (all of them immutable).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from explorer.core.kv_cache_manager import KVCacheManager
from explorer.core.metrics import CachingMetrics
from explorer.core.request import Request
from explorer.scenario.trace import RequestView, Snapshot

_UNSEEN = object()


class Snapshots:
    """Takes the snapshots of one engine (one manager), in order."""

    def __init__(self, manager: KVCacheManager, group: int, hybrid: bool = False) -> None:
        self.manager = manager
        self.group = group
        # with hybrid groups: every group's block table per request and cached hashes per group
        self.hybrid = hybrid
        self._cached_by_group: tuple[tuple[int, bytes, tuple[int, ...]], ...] = ()
        self._group_entries: dict[Any, tuple[int, bytes, tuple[int, ...]]] = {}
        # per block, filled on the first take (an engine that never snapshots pays nothing):
        self._seen_hash: list[Any] = []  # the hash object last seen
        self._seen_rc: list[int] = []
        self._pairs: list[tuple[int, bytes | None]] = []  # the pair last handed out
        self._blocks: tuple[tuple[int, bytes | None], ...] | None = None
        self._free: tuple[int, ...] | None = None
        self._cached_entries: dict[Any, tuple[bytes, tuple[int, ...]]] = {}
        self._cached: tuple[tuple[bytes, tuple[int, ...]], ...] | None = None
        self._views: dict[str, tuple[Request, RequestView]] = {}
        self._requests: tuple[RequestView, ...] | None = None

    def take(
        self,
        requests: Iterable[Request],
        stats: Mapping[str, int],
        window: CachingMetrics,
        cpu_tier: tuple[tuple[bytes, int, int], ...] | None = None,
    ) -> Snapshot:
        pool = self.manager.block_pool
        return Snapshot(
            blocks=self._take_blocks(pool.blocks),
            free_queue=self._take_free(tuple(b.block_id for b in pool.free_block_queue.get_all_free_blocks())),
            cached=self._take_cached(pool.cached_block_hash_to_block.items()),
            requests=self._take_requests(requests),
            stats=stats,
            window_hit_rate=window.hit_rate,
            window_requests=window.aggregated_requests,
            cpu_tier=cpu_tier,
            cached_by_group=self._cached_by_group,
        )

    def _take_blocks(self, blocks: Any) -> tuple[tuple[int, bytes | None], ...]:
        if len(self._pairs) != len(blocks):
            n = len(blocks)
            self._seen_hash, self._seen_rc, self._pairs = [_UNSEEN] * n, [-1] * n, [(0, None)] * n
            self._blocks = None
        seen_hash, seen_rc, pairs = self._seen_hash, self._seen_rc, self._pairs
        changed = self._blocks is None
        for i, b in enumerate(blocks):
            h, rc = b.block_hash, b.ref_cnt
            if seen_hash[i] is h and seen_rc[i] == rc:
                continue
            seen_hash[i], seen_rc[i] = h, rc
            pairs[i] = (rc, None if h is None else bytes(h[:-4]))
            changed = True
        if changed:
            self._blocks = tuple(pairs)
        assert self._blocks is not None
        return self._blocks

    def _take_free(self, ids: tuple[int, ...]) -> tuple[int, ...]:
        if ids != self._free:
            self._free = ids
        return self._free

    def _take_cached(self, items: Iterable[tuple[Any, Any]]) -> tuple[tuple[bytes, tuple[int, ...]], ...]:
        old, new = self._cached_entries, {}
        out = []
        by_group = []
        new_groups: dict[Any, tuple[int, bytes, tuple[int, ...]]] = {}
        for key, blocks in items:
            ids = tuple(b.block_id for b in blocks)
            entry = old.get(key)
            if entry is None or entry[1] != ids:
                entry = (bytes(key[:-4]), ids)
            new[key] = entry
            if self.hybrid:
                gid = int.from_bytes(key[-4:], "big")
                g_entry = self._group_entries.get(key)
                if g_entry is None or g_entry[1] is not entry[0] or g_entry[2] is not entry[1]:
                    g_entry = (gid, entry[0], entry[1])
                new_groups[key] = g_entry
                by_group.append(g_entry)
                if gid != self.group:
                    continue  # `cached` is group 0's (design section 8)
            out.append(entry)
        self._cached_entries = new
        self._group_entries = new_groups
        if self.hybrid:
            self._cached_by_group = _same_or_new(self._cached_by_group, by_group)
        self._cached = _same_or_new(self._cached, out)
        return self._cached

    def _take_requests(self, requests: Iterable[Request]) -> tuple[RequestView, ...]:
        old, new = self._views, {}
        out = []
        for r in requests:
            view = self._view(r, old.get(r.request_id))
            new[r.request_id] = (r, view)
            out.append(view)
        self._views = new
        self._requests = _same_or_new(self._requests, out)
        return self._requests

    def _view(self, r: Request, seen: tuple[Request, RequestView] | None) -> RequestView:
        by_group: tuple[tuple[int, ...], ...] = ()
        if self.hybrid:
            by_group = tuple(tuple(g) for g in self.manager.get_block_ids(r.request_id))
            if seen is not None and seen[1].block_ids_by_group == by_group:
                by_group = seen[1].block_ids_by_group
        block_ids = tuple(self.manager.get_blocks(r.request_id).get_block_ids_of_group(self.group))
        lora = r.lora_request.name if r.lora_request else None
        hashes = r.block_hashes  # only ever extended: an equal length is the same list of hashes
        if seen is not None and seen[0] is r:
            v = seen[1]
            if (
                v.status == r.status.value
                and v.num_tokens == r.num_tokens
                and v.num_computed_tokens == r.num_computed_tokens
                and v.num_preemptions == r.num_preemptions
                and len(v.block_hashes) == len(hashes)
                and v.block_ids == block_ids
                and v.block_ids_by_group == by_group
            ):
                return v
            hash_tuple = v.block_hashes if len(v.block_hashes) == len(hashes) else tuple(hashes)
            if v.block_ids == block_ids:
                block_ids = v.block_ids
        else:
            hash_tuple = tuple(hashes)
        return RequestView(
            r.request_id,
            r.status.value,
            r.num_tokens,
            r.num_prompt_tokens,
            r.num_computed_tokens,
            block_ids,
            hash_tuple,
            lora,
            r.cache_salt,
            r.prompt_logprobs,
            r.num_preemptions,
            r.num_output_tokens,
            by_group,
        )


def _same_or_new(prev: tuple[Any, ...] | None, items: list[Any]) -> tuple[Any, ...]:
    """``prev`` when it holds exactly these objects in this order, else a new tuple of them."""
    if prev is not None and len(prev) == len(items) and all(a is b for a, b in zip(prev, items)):
        return prev
    return tuple(items)
