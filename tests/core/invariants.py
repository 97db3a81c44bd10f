"""Structural invariants of a KVCacheManager, checked after every operation.

`check_invariants(manager)` is meant for every test tier (unit, property, scenario replay):
it reads the manager's pool, free queue, hash map and block tables and raises AssertionError
naming the first broken invariant. It never mutates anything.

`EventMirror` plays a KV-event subscriber: it applies BlockStored / BlockRemoved /
AllBlocksCleared to a multiset of hashes, which must always equal the hashes the pool holds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from explorer.core.events import AllBlocksCleared, BlockRemoved, BlockStored, KVCacheEvent
from explorer.core.hashing import get_block_hash, make_block_hash_with_group_id, maybe_convert_block_hash
from explorer.core.kv_cache_manager import KVCacheManager
from explorer.core.kv_cache_utils import KVCacheBlock
from explorer.core.request import Request


def _free_queue_walk(manager: KVCacheManager) -> list[KVCacheBlock]:
    """The free queue head to tail, checking the links both ways as it goes."""
    fq = manager.block_pool.free_block_queue
    head, tail = fq.fake_free_list_head, fq.fake_free_list_tail
    assert head.prev_free_block is None, "the head sentinel has a predecessor"
    assert tail.next_free_block is None, "the tail sentinel has a successor"
    out: list[KVCacheBlock] = []
    prev, curr = head, head.next_free_block
    limit = len(manager.block_pool.blocks) + 1
    while curr is not tail:
        assert curr is not None, f"free queue broken after block {prev.block_id}: next is None"
        assert curr.prev_free_block is prev, f"free queue: block {curr.block_id}.prev is not block {prev.block_id}"
        out.append(curr)
        assert len(out) <= limit, "free queue has a cycle"
        prev, curr = curr, curr.next_free_block
    assert tail.prev_free_block is prev, "free queue: the tail sentinel's prev is not the last block"
    return out


def check_invariants(manager: KVCacheManager, requests: Iterable[Request] = ()) -> None:
    """Raise AssertionError if the manager's state is inconsistent.

    ``requests`` (optional): live Request objects; for each, every block its table marks as
    cached must carry the request's own hash for that position (what a later hit relies on).
    """
    pool = manager.block_pool
    blocks = pool.blocks
    assert len(blocks) == pool.num_gpu_blocks
    for i, b in enumerate(blocks):
        assert b.block_id == i, f"blocks[{i}] has id {b.block_id}"

    # The null block: block 0, never free, never cached.
    null = pool.null_block
    assert null is blocks[0] and null.is_null
    assert not any(b.is_null for b in blocks[1:]), "a block other than 0 is marked null"
    assert null.block_hash is None, "the null block has a hash"
    assert null.prev_free_block is None and null.next_free_block is None, "the null block is linked"

    # Free queue: consistent links, count, and the same list as get_all_free_blocks().
    walk = _free_queue_walk(manager)
    free_ids = [b.block_id for b in walk]
    assert len(set(free_ids)) == len(free_ids), f"a block is twice in the free queue: {free_ids}"
    assert [b.block_id for b in pool.free_block_queue.get_all_free_blocks()] == free_ids
    assert pool.free_block_queue.num_free_blocks == len(walk), (
        f"num_free_blocks {pool.free_block_queue.num_free_blocks} != {len(walk)} linked blocks"
    )
    assert pool.get_num_free_blocks() == len(walk)
    free_set = {b.block_id for b in walk}
    assert 0 not in free_set, "the null block is in the free queue"

    # Every non-null block: free with ref_cnt 0, or held with ref_cnt > 0; never both, never neither.
    for b in blocks[1:]:
        if b.block_id in free_set:
            assert b.ref_cnt == 0, f"block {b.block_id} is free with ref_cnt {b.ref_cnt}"
        else:
            assert b.ref_cnt > 0, f"block {b.block_id} is neither free nor held (ref_cnt {b.ref_cnt})"
            assert b.prev_free_block is None and b.next_free_block is None, (
                f"held block {b.block_id} still has free-queue links"
            )
    total = pool.num_gpu_blocks - 1
    assert abs(pool.get_usage() - (1 - len(walk) / total)) < 1e-12

    # Hash map <-> block hashes.
    in_map: dict[int, bytes] = {}
    extra = pool.cached_block_hashes_by_block  # partial tail entries: more keys of a hashed block
    for bid, keys in extra.items():
        assert keys and blocks[bid].block_hash is not None, f"block {bid} has extra keys but no hash"
    for key, entry in pool.cached_block_hash_to_block.items():
        assert entry, f"empty map entry for {key.hex()[:16]}"
        for b in entry:
            assert b is blocks[b.block_id], f"map holds a foreign block object {b!r}"
            assert not b.is_null, "the null block is in the hash map"
            if key in extra.get(b.block_id, ()):
                continue
            assert b.block_hash == key, (
                f"map key {key.hex()[:16]} holds block {b.block_id} whose hash is "
                f"{b.block_hash.hex()[:16] if b.block_hash else None}"
            )
            assert b.block_id not in in_map, f"block {b.block_id} is in the map twice"
            in_map[b.block_id] = key
    raw = pool.cached_block_hash_to_block._cache
    for entry in raw.values():
        if isinstance(entry, dict):
            for bid, b in entry.items():
                assert bid == b.block_id, f"map dict id {bid} holds block {b.block_id}"
    for b in blocks[1:]:
        if b.block_hash is not None:
            assert in_map.get(b.block_id) == b.block_hash, (
                f"block {b.block_id} has a hash but is not in the map under it"
            )
    assert len(pool.cached_block_hash_to_block) == len(raw)

    # ref_cnt == number of live block tables holding the block; no block twice in one table.
    holders: Counter[int] = Counter()
    for m in manager.coordinator.single_type_managers:
        for rid, table in m.req_to_blocks.items():
            ids = [b.block_id for b in table if not b.is_null]
            assert len(set(ids)) == len(ids), f"request {rid!r} holds a block twice: {ids}"
            for b in table:
                assert b is blocks[b.block_id], f"request {rid!r} holds a foreign block object"
            holders.update(ids)
            n_cached = m.num_cached_block.get(rid, 0)
            assert 0 <= n_cached <= len(table), f"request {rid!r}: num_cached_block {n_cached} > {len(table)}"
        for rid in m.num_cached_block:
            assert rid in m.req_to_blocks, f"num_cached_block has {rid!r} with no block table"
    for b in blocks[1:]:
        assert b.ref_cnt == holders[b.block_id], (
            f"block {b.block_id}: ref_cnt {b.ref_cnt} but {holders[b.block_id]} block tables hold it"
        )

    # Null blocks (a window group's skipped slots) only ever lead a table; full attention has none.
    for m in manager.coordinator.single_type_managers:
        for rid, table in m.req_to_blocks.items():
            nulls = [i for i, b in enumerate(table) if b.is_null]
            assert nulls == list(range(len(nulls))), f"request {rid!r} group {m.kv_cache_group_id}: nulls at {nulls}"
            assert not nulls or m.sliding_window is not None, f"request {rid!r}: a full-attention table holds nulls"

    # Blocks a request's table marks as cached carry the request's hash for that position (at
    # the group's block size); a window group's retention may leave some unhashed.
    for req in requests:
        for m in manager.coordinator.single_type_managers:
            table = m.req_to_blocks.get(req.request_id)
            if table is None:
                continue
            hashes = m.view_hashes(req.block_hashes)
            for i in range(m.num_cached_block.get(req.request_id, 0)):
                if table[i].is_null or (m.sliding_window is not None and table[i].block_hash is None):
                    continue
                assert i < len(hashes), f"request {req.request_id!r}: block {i} cached but unhashed"
                want = make_block_hash_with_group_id(hashes[i], m.kv_cache_group_id)
                assert table[i].block_hash == want, (
                    f"request {req.request_id!r}: block {i} (id {table[i].block_id}) is cached "
                    "under another hash than the request's"
                )


class EventMirror:
    """A KV-event subscriber's view: the multiset of (external hash, group) the pool caches."""

    def __init__(self) -> None:
        self.stored: Counter[tuple[object, int | None]] = Counter()

    def apply(self, events: Iterable[KVCacheEvent]) -> None:
        for ev in events:
            if isinstance(ev, BlockStored):
                for h in ev.block_hashes:
                    self.stored[(h, ev.group_idx)] += 1
            elif isinstance(ev, BlockRemoved):
                for h in ev.block_hashes:
                    key = (h, ev.group_idx)
                    assert self.stored[key] > 0, f"BlockRemoved for a hash never stored: {h!r}"
                    self.stored[key] -= 1
                    if not self.stored[key]:
                        del self.stored[key]
            elif isinstance(ev, AllBlocksCleared):
                self.stored.clear()
            else:  # pragma: no cover
                raise AssertionError(f"unknown event {ev!r}")

    def check(self, manager: KVCacheManager) -> None:
        """The mirror must hold exactly one entry per cached block (duplicates included)."""
        pool = manager.block_pool
        use_int = pool.use_int_block_hashes
        want: Counter[tuple[object, int | None]] = Counter()
        for key, entry in pool.cached_block_hash_to_block.items():
            h = maybe_convert_block_hash(get_block_hash(key), use_int)
            want[(h, int.from_bytes(key[-4:], "big"))] += len(entry)
        assert self.stored == want, f"events say {dict(self.stored)}, the pool caches {dict(want)}"
