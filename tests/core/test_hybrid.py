"""Hybrid KV cache groups (spec part 2, rules 63-69 and 74): the verified vectors, by hand.

Every test checks the manager's invariants after each operation (tests/core/invariants.py).
"""

from __future__ import annotations

import pytest

from explorer.core.errors import ConfigError
from explorer.core.events import BlockStored
from explorer.core.hashing import init_none_hash
from explorer.core.kv_cache_coordinator import HybridKVCacheCoordinator, UnitaryKVCacheCoordinator
from explorer.core.kv_cache_interface import KVCacheSpec, full_attention, sliding_window
from explorer.core.kv_cache_manager import KVCacheManager
from explorer.core.kv_cache_observer import KVCacheObserver
from explorer.core.kv_cache_utils import get_request_block_hasher
from explorer.core.request import Request
from explorer.core.sliding_window_manager import SlidingWindowManager
from explorer.miss.tee import observer_of
from explorer.request_steps import RequestSteps
from tests.core.invariants import EventMirror, check_invariants

FA_SWA32 = [full_attention(16), sliding_window(16, 32)]


class GroupLookups(KVCacheObserver):
    """The hybrid lookups the manager reports, until taken."""

    def __init__(self):
        self.lookups = []

    def on_group_lookup(self, lookup):
        self.lookups.append(lookup)

    def take(self):
        out, self.lookups = self.lookups, []
        return out


class Hybrid:
    """A hybrid manager, its hasher, RequestSteps, and an invariant check after every call."""

    def __init__(self, groups, ri=0, num_blocks=64, use_eagle=False, hash_block_size=None, observer=None):
        ctx = init_none_hash("sha256")
        self.lookups = GroupLookups()
        self.mgr = KVCacheManager(
            num_blocks,
            enable_kv_cache_events=True,
            kv_cache_groups=groups,
            prefix_cache_retention_interval=ri,
            use_eagle=use_eagle,
            hash_block_size=hash_block_size,
            observer=observer_of(self.lookups, observer),
        )
        self.hasher = get_request_block_hasher(self.mgr.hash_block_size, ctx)
        self.steps = RequestSteps(self.mgr)
        self.live: dict[str, Request] = {}
        self.mirror = EventMirror()

    def check(self) -> list:
        events = self.mgr.take_events()
        self.mirror.apply(events)
        self.mirror.check(self.mgr)
        check_invariants(self.mgr, self.live.values())
        return events

    def admit(self, rid, tokens):
        r = self.live[rid] = Request(rid, list(tokens), self.hasher)
        a = self.steps.admit(r)
        (lookup,) = self.lookups.take()
        return a, lookup, self.check()

    def ids(self, rid):
        return self.mgr.get_block_ids(rid)


def test_rule_63_hybrid_coordinator_and_full_attention_first():
    """Rule 63: more than one group builds the hybrid coordinator; full attention sorts first."""
    h = Hybrid([sliding_window(16, 32), full_attention(16), sliding_window(16, 64)])
    coord = h.mgr.coordinator
    assert isinstance(coord, HybridKVCacheCoordinator)
    assert [g.group_ids for g in coord.attention_groups] == [[1], [0], [2]]
    assert isinstance(Hybrid([full_attention(16)]).mgr.coordinator, UnitaryKVCacheCoordinator)
    # two groups with one spec are one spec group, looked up together
    two = Hybrid([full_attention(16), sliding_window(16, 32), sliding_window(16, 32)]).mgr.coordinator
    assert [g.group_ids for g in two.attention_groups] == [[0], [1, 2]]


def test_rule_64_fixed_point_call_sequence():
    """Rule 64: FA + SWA-32 + SWA-64, dense; with some window hashes evicted the calls are
    FA(159)->128, SWA32(128)->128, SWA64(128)->64, SWA32(64)->32, SWA64(32)->32,
    SWA32(32)->32, SWA64(32)->32; hit 32, blocks [[1,2],[10,11],[19,20]], boundary 128."""
    h = Hybrid([full_attention(16), sliding_window(16, 32), sliding_window(16, 64)], ri=None)
    h.admit("A", range(140))
    pool = h.mgr.block_pool
    swa32, swa64 = h.ids("A")[1], h.ids("A")[2]
    for bid in [*swa64[4:8], *swa32[2:4]]:  # evict by hand: out of the map, hash dropped
        blk = pool.blocks[bid]
        pool.cached_block_hash_to_block.pop(blk.block_hash, bid)
        blk.reset_hash()
    q = Request("Q", [*range(140), *range(1000, 1020)], h.hasher)
    blocks, hit, spb = h.mgr.get_computed_blocks(q)
    (lookup,) = h.lookups.take()
    calls = [(c.sliding_window, c.max_length, c.hit_tokens) for c in lookup.calls]
    assert calls == [
        (None, 159, 128),
        (32, 128, 128),
        (64, 128, 64),
        (32, 64, 32),
        (64, 32, 32),
        (32, 32, 32),
        (64, 32, 32),
    ]
    assert (hit, spb) == (32, 128)
    assert blocks.get_block_ids() == ([1, 2], [10, 11], [19, 20])
    assert lookup.num_passes == 3


def test_rule_64_simple_hybrid_stops_after_one_pass():
    """Rule 64: FA first plus one other spec group: one pass, even if a second would shrink."""
    h = Hybrid(FA_SWA32)
    h.admit("A", range(100))
    q = Request("Q", [*range(100), *range(1000, 1060)], h.hasher)
    h.mgr.get_computed_blocks(q)
    (lookup,) = h.lookups.take()
    assert lookup.num_passes == 1 and len(lookup.calls) == 2


@pytest.mark.parametrize(
    ("ri", "head", "tail"),
    [(0, [11, 10, 9, 8, 15], None), (None, None, [11, 10, 9, 8])],
)
def test_rule_66_skipped_blocks_are_freed_before_the_capacity_check(ri, head, tail):
    """Rule 66: FA + SWA-32, A = 100 tokens, one decode step: SWA table [0,0,0,0,12,13,14];
    blocks 8-11 go to the FQ head (ri = 0: no hash) or tail (dense), last skipped first."""
    h = Hybrid(FA_SWA32, ri=ri)
    h.admit("A", range(100))
    req = h.live["A"]
    req.append_output_token_ids(7)
    assert h.steps.compute_pending(req) is not None
    assert h.check() == []  # no events come out
    assert h.ids("A")[1] == [0, 0, 0, 0, 12, 13, 14]
    fq = [b.block_id for b in h.mgr.block_pool.free_block_queue.get_all_free_blocks()]
    if head is not None:
        assert fq[: len(head)] == head
    if tail is not None:
        assert fq[-len(tail) :] == tail


def test_rule_66_hit_blocks_below_the_window_are_not_touched():
    """Rule 66: add_local_computed_blocks pads skipped hits with null blocks without touching."""
    h = Hybrid(FA_SWA32, ri=None)
    h.admit("A", range(100))
    h.steps.finish(h.live.pop("A"))
    h.check()
    before = {b.block_id: b.ref_cnt for b in h.mgr.block_pool.blocks}
    h.admit("B", [*range(100), *range(1000, 1060)])
    swa = h.ids("B")[1]
    assert swa[:4] == [0, 0, 0, 0]
    assert all(h.mgr.block_pool.blocks[b].ref_cnt == before[b] for b in (8, 9, 10, 11))


def _rule_67(ri):
    h = Hybrid(FA_SWA32, ri=ri)
    rows = []
    for rid, tokens in [
        ("A", range(100)),
        ("B", [*range(100), *range(1000, 1060)]),
        ("C", [*range(100), *range(1000, 1030), *range(5000, 5040)]),
        ("D", [*range(64), *range(7000, 7040)]),
        ("E", [*range(64), *range(8000, 8040)]),
    ]:
        a, lookup, events = h.admit(rid, tokens)
        stored = [len(e.block_hashes) for e in events if isinstance(e, BlockStored)]
        rows.append((rid, lookup.group_hit_tokens, a.hit_tokens, lookup.shared_prefix_boundary, stored))
    return h, rows


def test_rule_67_retention_zero_table():
    """Rule 67's table (ri = 0): per-group hits, reconciled hit, boundary, events."""
    h, rows = _rule_67(0)
    assert rows == [
        ("A", (0, 0), 0, 0, [6, 2]),
        ("B", (96, 96), 96, 0, [4, 2]),
        ("C", (128, 96), 96, 128, [4, 4]),
        ("D", (64, 0), 0, 64, [6, 4]),
        ("E", (64, 64), 64, 0, [2, 2]),
    ]
    assert h.ids("B") == ([1, 2, 3, 4, 5, 6, 15, 16, 17, 18], [0, 0, 0, 0, 12, 13, 19, 20, 21, 22])
    assert h.ids("E") == ([1, 2, 3, 4, 47, 48, 49], [0, 0, 42, 43, 50, 51, 52])
    st = h.mgr.prefix_cache_stats
    assert (st.requests, st.queries, st.hits) == (5, 638, 256)
    keys = {}
    for key, _ in h.mgr.block_pool.cached_block_hash_to_block.items():
        keys.setdefault(int.from_bytes(key[-4:], "big"), []).append(key)
    assert (len(keys[0]), len(keys[1])) == (16, 13)


def test_rule_67_dense_retention():
    """Rule 67: dense retention hits A 0, B 96, C 128, D 64, E 64; 352 hits in all."""
    h, rows = _rule_67(None)
    assert [r[2] for r in rows] == [0, 96, 128, 64, 64]
    assert h.mgr.prefix_cache_stats.hits == 352


def test_rule_67_spb_must_be_stored_or_e_misses():
    """Rule 70: without the request keeping shared_prefix_boundary, D pins nothing and E misses."""
    h = Hybrid(FA_SWA32)
    for rid, tokens in [("A", range(100)), ("D", [*range(64), *range(7000, 7040)])]:
        r = h.live[rid] = Request(rid, list(tokens), h.hasher)
        blocks, hit, _ = h.mgr.get_computed_blocks(r)  # the boundary is dropped
        h.mgr.allocate_slots(r, r.num_tokens - hit, hit, blocks)
        r.num_computed_tokens = r.num_tokens
    e = Request("E", [*range(64), *range(8000, 8040)], h.hasher)
    assert h.mgr.get_computed_blocks(e)[1] == 0


def test_rule_68_block_stored_per_group():
    """Rule 68: one BlockStored per group; A's SWA event has 2 hashes over 96 tokens; equal
    tokens give equal hashes in both groups."""
    h = Hybrid(FA_SWA32)
    _, _, events = h.admit("A", range(100))
    fa, swa = events
    assert (fa.group_idx, fa.block_size, fa.kv_cache_spec_kind, fa.kv_cache_spec_sliding_window) == (
        0,
        16,
        "full_attention",
        None,
    )
    assert (swa.group_idx, swa.kv_cache_spec_kind, swa.kv_cache_spec_sliding_window) == (1, "sliding_window", 32)
    assert len(swa.block_hashes) == 2 and len(swa.token_ids) == 96
    assert swa.block_hashes == fa.block_hashes[4:6]


def test_rule_69_group_block_sizes():
    """Rule 69: FA bs 32 + SWA bs 16 (dense): hash block 16, scheduler block 32; the FA event
    carries fine hashes 1, 3, 5; B hits 96; C, sharing 80 tokens, hits 64."""
    h = Hybrid([full_attention(32), sliding_window(16, 32)], ri=None)
    assert (h.mgr.hash_block_size, h.mgr.block_size) == (16, 32)
    _, _, events = h.admit("A", range(100))
    req = h.live["A"]
    fine = [x.hex() for x in req.block_hashes]
    assert len(fine) == 6 and fine[1].startswith("8be7aaa3") and fine[3].startswith("1cbbd587")
    assert fine[0].startswith("fe8fa5dd") and fine[5].startswith("15fd77f8")
    fa, swa = events
    ints = [int.from_bytes(bytes.fromhex(x)[-8:], "big") for x in fine]
    assert (fa.block_size, fa.block_hashes) == (32, [ints[1], ints[3], ints[5]])
    assert (swa.block_size, swa.block_hashes) == (16, ints)
    b, _, _ = h.admit("B", [*range(100), *range(500, 520)])
    assert b.hit_tokens == 96 and h.ids("B")[0][:3] == [1, 2, 3] and h.ids("B")[1][:6] == [0, 0, 0, 0, 9, 10]
    c, _, _ = h.admit("C", [*range(80), *range(900, 960)])
    assert c.hit_tokens == 64


def test_rule_69_group_block_size_must_be_a_multiple_of_hash_block_size():
    with pytest.raises(ConfigError, match="multiple of hash_block_size"):
        Hybrid([full_attention(32), sliding_window(24, 32)], hash_block_size=16)


def test_retention_interval_errors():
    with pytest.raises(ConfigError, match="no sliding-window"):
        Hybrid([full_attention(16)], ri=32)
    with pytest.raises(ConfigError, match="multiple of the scheduler block size"):
        Hybrid(FA_SWA32, ri=24)
    with pytest.raises(ConfigError, match="sliding_window must be a positive integer"):
        KVCacheSpec(16, "sliding_window", 0)


def test_rule_74_hybrid_eagle():
    """Rule 74: FA + SWA-32, dense, EAGLE: B hits 80 with [[1..5],[0,0,0,11,12]]; A's replay
    boundaries are (80,); without EAGLE 96 and (99,)."""
    for use_eagle, hit, blocks, bounds in (
        (True, 80, ([1, 2, 3, 4, 5], [0, 0, 0, 11, 12]), (80,)),
        (False, 96, ([1, 2, 3, 4, 5, 6], [0, 0, 0, 0, 12, 13]), (99,)),
    ):
        h = Hybrid(FA_SWA32, ri=None, use_eagle=use_eagle)
        h.admit("A", range(100))
        assert h.mgr.coordinator.get_replay_boundaries(h.live["A"]) == bounds
        assert h.mgr.coordinator.eagle_group_ids == ({0, 1} if use_eagle else set())
        b = Request("B", [*range(100), *([5] * 50)], h.hasher)
        got, n, _ = h.mgr.get_computed_blocks(b)
        assert (n, got.get_block_ids()) == (hit, blocks)


def test_sliding_window_needs_cdiv_window_minus_one_blocks():
    """Rule 65: cdiv(window - 1, bs) blocks, +1 with EAGLE; a window of 17 needs one block."""
    h = Hybrid([full_attention(16), sliding_window(16, 17)])
    m = h.mgr.coordinator.single_type_managers[1]
    assert isinstance(m, SlidingWindowManager)
    assert (m.contiguous_blocks_for_hit(False), m.contiguous_blocks_for_hit(True)) == (1, 2)
    assert m.get_num_skipped_tokens(7) == 0 and m.get_num_skipped_tokens(40) == 24


class Retained(KVCacheObserver):
    def __init__(self):
        self.masks = []

    def on_retention(self, request_id, group_id, start_block, mask, retention_interval, boundaries):
        self.masks.append((request_id, group_id, start_block, mask, boundaries))


def test_retention_is_reported_where_it_is_decided():
    obs = Retained()
    h = Hybrid(FA_SWA32, observer=obs)
    h.admit("A", range(100))
    assert obs.masks == [("A", 1, 0, (False, False, False, False, True, True), (99,))]
