"""KVCacheManager and the full-attention manager, single group: spec rules 19, 24, 28-35, 37,
and the worked examples (the demo's eviction order, the admission check of rule 31.7)."""

from __future__ import annotations

import pytest

from explorer.core.errors import SchedulingError
from explorer.core.events import AllBlocksCleared, BlockRemoved, BlockStored
from explorer.core.hashing import external_block_hash, make_block_hash_with_group_id
from explorer.core.kv_cache_manager import KVCacheManager
from explorer.core.request import Request, RequestStatus
from explorer.core.single_type_kv_cache_manager import FullAttentionManager
from tests.core.helpers import Sched, ids
from tests.core.invariants import EventMirror, check_invariants

BS = 16


def ext(h):
    return external_block_hash(h)


def snapshot(s: Sched):
    """Everything allocate_slots could change."""
    pool = s.pool
    m = s.mgr.coordinator.single_type_managers[0]
    return (
        s.free_ids(),
        [(b.ref_cnt, b.block_hash) for b in pool.blocks],
        {k: [b.block_id for b in v] for k, v in pool.cached_block_hash_to_block.items()},
        {k: [b.block_id for b in v] for k, v in m.req_to_blocks.items()},
        dict(m.num_cached_block),
        list(pool.kv_event_queue),
    )


# ---- the oracle demo, step by step -----------------------------------------------------------


def test_demo_scenario_and_eviction_order_a2_b2_a1():
    """Demo: A (50) -> free; B shares 32 -> hit 32; C = A[:48] hits 32; a 62-block request then
    evicts A#2, B#2, A#1 in that order; reset is refused while held, then one AllBlocksCleared."""
    s = Sched(64)
    mirror = EventMirror()
    tok_a = list(range(1000, 1050))
    a = s.request("A", tok_a)
    assert s.admit(a) == (0, [1, 2, 3, 4])
    ev = s.mgr.take_events()
    mirror.apply(ev)
    assert len(ev) == 1 and isinstance(ev[0], BlockStored)
    assert ev[0].block_hashes == [ext(h) for h in a.block_hashes]
    assert ev[0].extra_keys == [None, None, None] and ev[0].parent_block_hash is None
    assert ev[0].token_ids == tok_a[:48] and ev[0].kv_cache_spec_kind == "full_attention"
    check_invariants(s.mgr)

    s.finish(a)
    fq = s.free_ids()
    assert fq[0] == 4 and fq[1:4] == [5, 6, 7] and fq[-3:] == [3, 2, 1]
    assert s.mgr.take_events() == []
    check_invariants(s.mgr)

    b = s.request("B", tok_a[:32] + list(range(2000, 2020)))
    assert s.admit(b) == (32, [4, 5])  # hits 1, 2; the new blocks come from the head
    assert s.table(b) == [1, 2, 4, 5]
    ev = s.mgr.take_events()
    mirror.apply(ev)
    assert len(ev) == 1 and ev[0].block_hashes == [ext(b.block_hashes[2])]
    assert ev[0].parent_block_hash == ext(a.block_hashes[1])
    check_invariants(s.mgr)
    s.finish(b)
    check_invariants(s.mgr)

    c = s.request("C", tok_a[:48])
    _, hit_c, _ = s.mgr.get_computed_blocks(c)
    assert hit_c == 32
    s.mgr.record_prefix_cache_stats(c, hit_c)  # the demo counts C although it is never allocated
    st = s.mgr.make_prefix_cache_stats()
    assert (st.requests, st.queries, st.hits) == (3, 50 + 52 + 48, 0 + 32 + 32)

    p = s.request("P", list(range(5000, 5000 + 62 * BS)))
    assert s.free_ids() == [5, *range(6, 64), 3, 4, 2, 1]
    new = s.mgr.allocate_slots(p, p.num_tokens)
    assert new is not None and len(ids(new)) == 62
    ev = s.mgr.take_events()
    mirror.apply(ev)
    removed = [e for e in ev if isinstance(e, BlockRemoved)]
    assert [r.block_hashes[0] for r in removed] == [
        ext(a.block_hashes[2]),
        ext(b.block_hashes[2]),
        ext(a.block_hashes[1]),
    ]
    assert all(r.medium == "GPU" and r.group_idx == 0 for r in removed)
    assert isinstance(ev[-1], BlockStored)
    assert s.free_ids() == [1] and s.pool.blocks[1].block_hash is not None
    mirror.check(s.mgr)
    check_invariants(s.mgr)

    assert s.mgr.reset_prefix_cache() is False
    s.mgr.free(p)
    assert s.mgr.reset_prefix_cache() is True
    ev = s.mgr.take_events()
    assert len(ev) == 1 and isinstance(ev[0], AllBlocksCleared)
    mirror.apply(ev)
    mirror.check(s.mgr)
    check_invariants(s.mgr)


# ---- rule 19: the 48-token duplicate ---------------------------------------------------------


def test_rule_19_48_token_prompt_resent_while_live_is_cached_twice():
    """Rule 19 [verified]: a block-aligned 48-token prompt re-sent while the original is live hits
    32, gets a fresh block for 32..47 cached under the same key: the map value becomes
    {3: blk3, 4: blk4}, and two BlockRemoved with the same hash follow later."""
    s = Sched(64)
    a = s.request("A", list(range(48)))
    assert s.admit(a) == (0, [1, 2, 3])
    a2 = s.request("A2", list(range(48)))
    assert s.admit(a2) == (32, [4])
    check_invariants(s.mgr, [a, a2])
    k = make_block_hash_with_group_id(a.block_hashes[2], 0)
    assert s.pool.cached_block_hash_to_block._cache[k] == {3: s.pool.blocks[3], 4: s.pool.blocks[4]}
    stored = [e for e in s.mgr.take_events() if isinstance(e, BlockStored)]
    assert [e.block_hashes for e in stored][-1] == [ext(a.block_hashes[2])]
    assert stored[0].block_hashes[-1] == ext(a.block_hashes[2])  # stored twice, same hash

    s.finish(a2)
    s.finish(a)
    check_invariants(s.mgr)
    big = s.request("big", list(range(10_000, 10_000 + 63 * BS)))
    assert s.mgr.allocate_slots(big, big.num_tokens) is not None
    removed = [e.block_hashes[0] for e in s.mgr.take_events() if isinstance(e, BlockRemoved)]
    assert removed.count(ext(a.block_hashes[2])) == 2
    check_invariants(s.mgr)


# ---- rule 24 through the manager -------------------------------------------------------------


def test_rule_24_free_order_example_through_the_manager():
    """Rule 24 [verified]: A owns [1,2,3,4], 3 hashed + 1 partial; after free,
    FQ = [4, 5, 6, ..., 63, 3, 2, 1]."""
    s = Sched(64)
    a = s.request("A", list(range(50)))
    s.admit(a)
    assert s.table(a) == [1, 2, 3, 4]
    s.finish(a)
    assert s.free_ids() == [4, *range(5, 64), 3, 2, 1]
    check_invariants(s.mgr)


# ---- rule 28: construction, one group --------------------------------------------------------


def test_rule_28_one_group_one_pool():
    """Rule 28: one BlockPool of num_blocks for the group; a unitary full-attention manager whose
    block size is the hash block size; stats only with log_stats."""
    mgr = KVCacheManager(10, 16)
    assert mgr.block_pool.num_gpu_blocks == 10
    (m,) = mgr.coordinator.single_type_managers
    assert isinstance(m, FullAttentionManager) and m.block_pool is mgr.block_pool
    assert m.block_size == 16 and m.kv_cache_group_id == 0 and m.kind == "full_attention"
    assert mgr.prefix_cache_stats is not None
    assert KVCacheManager(10, log_stats=False).prefix_cache_stats is None


def test_rule_28_caching_off_builds_a_manager_that_never_caches():
    """Rule 28: caching off (vLLM's NoPrefixCache coordinator): no lookup, no hash, no event."""
    s = Sched(8, caching=False)
    r = s.request("r", list(range(40)))
    assert r.block_hashes == []  # no hasher
    assert s.admit(r) == (0, [1, 2, 3])
    assert all(b.block_hash is None for b in s.pool.blocks)
    assert s.mgr.take_events() == []


# ---- rule 29: get_computed_blocks ------------------------------------------------------------


def test_rule_29_cap_is_num_tokens_minus_1():
    """Rule 29 [verified]: max_cache_hit_length = num_tokens - 1: a 48-token prompt with all 3 blocks
    cached hits 32."""
    s = Sched(16)
    a = s.request("A", list(range(48)))
    s.admit(a)
    s.finish(a)
    blocks, hit, _ = s.mgr.get_computed_blocks(s.request("C", list(range(48))))
    assert hit == 32 and ids(blocks) == [1, 2]
    _, hit49, _ = s.mgr.get_computed_blocks(s.request("D", list(range(49))))
    assert hit49 == 48


def test_rule_29_lookup_touches_nothing_and_records_no_stats():
    """Rule 29: get_computed_blocks does not touch blocks, change ref_cnt, or record stats."""
    s = Sched(16)
    a = s.request("A", list(range(40)))
    s.admit(a)
    s.finish(a)
    s.mgr.make_prefix_cache_stats()
    before = snapshot(s)
    _, hit, _ = s.mgr.get_computed_blocks(s.request("B", list(range(40))))
    assert hit == 32 and snapshot(s) == before
    assert s.mgr.make_prefix_cache_stats().requests == 0


def test_rule_29_empty_when_caching_off():
    """Rule 29: (empty, 0) when caching is off."""
    s = Sched(16, caching=False)
    r = s.request("r", list(range(40)))
    s.admit(r)
    s.finish(r)
    blocks, hit, _ = s.mgr.get_computed_blocks(s.request("r2", list(range(40))))
    assert hit == 0 and ids(blocks) == []


def test_rule_29_empty_when_skip_reading_prefix_cache():
    """Rule 29: (empty, 0) when req.skip_reading_prefix_cache, which prompt_logprobs sets."""
    s = Sched(16)
    a = s.request("A", list(range(40)))
    s.admit(a)
    s.finish(a)
    b = s.request("B", list(range(40)), prompt_logprobs=True)
    assert b.skip_reading_prefix_cache
    blocks, hit, _ = s.mgr.get_computed_blocks(b)
    assert hit == 0 and ids(blocks) == []


# ---- rule 30: stats --------------------------------------------------------------------------


def test_rule_30_stats_recorded_at_admission_with_num_tokens_and_hits():
    """Rule 30: record_prefix_cache_stats(req, hits) adds num_tokens to queries and the local hit."""
    s = Sched(16)
    a = s.request("A", list(range(40)))
    s.admit(a)
    s.finish(a)
    b = s.request("B", list(range(40)))
    s.admit(b)
    st = s.mgr.make_prefix_cache_stats()
    assert (st.requests, st.queries, st.hits) == (2, 80, 32)


def test_rule_30_preempted_request_counts_apart():
    """Rule 30: preempted = num_preemptions > 0 sends the record to the preempted_* counters."""
    s = Sched(16)
    a = s.request("A", list(range(40)))
    s.admit(a)
    s.preempt(a)
    s.mgr.make_prefix_cache_stats()
    s.admit(a)
    st = s.mgr.make_prefix_cache_stats()
    assert (st.requests, st.preempted_requests, st.preempted_queries, st.preempted_hits) == (0, 1, 40, 32)


def test_rule_30_not_recorded_without_lookup_or_log_stats():
    """Rule 30: skipped when log_stats is off or lookup is disabled for the request."""
    s = Sched(16)
    r = s.request("r", list(range(20)), prompt_logprobs=True)
    s.mgr.record_prefix_cache_stats(r, 0)
    assert s.mgr.make_prefix_cache_stats().requests == 0
    off = Sched(16, log_stats=False)
    off.mgr.record_prefix_cache_stats(off.request("r", [1, 2]), 0)
    assert off.mgr.make_prefix_cache_stats() is None


def test_rule_30_make_prefix_cache_stats_returns_and_replaces():
    """Rule 30: make_prefix_cache_stats() returns the current object and replaces it with a fresh one."""
    s = Sched(16)
    s.admit(s.request("r", list(range(20))))
    first = s.mgr.make_prefix_cache_stats()
    second = s.mgr.make_prefix_cache_stats()
    assert first.requests == 1 and second.requests == 0 and first is not second


def test_rule_30_a_refused_admission_is_not_counted():
    """Rule 30: stats are recorded after allocate_slots succeeded; a request that could not be
    scheduled is not counted."""
    s = Sched(3)
    assert s.admit(s.request("big", list(range(100)))) is None
    assert s.mgr.make_prefix_cache_stats().requests == 0


def test_rule_30_reset_sets_the_stats_reset_flag():
    """Rule 30: a successful reset_prefix_cache() sets stats.reset = True; a refused one does not."""
    s = Sched(16)
    r = s.request("r", list(range(20)))
    s.admit(r)
    assert s.mgr.reset_prefix_cache() is False
    assert s.mgr.make_prefix_cache_stats().reset is False
    s.finish(r)
    assert s.mgr.reset_prefix_cache() is True
    assert s.mgr.make_prefix_cache_stats().reset is True


# ---- rule 31: allocate_slots -----------------------------------------------------------------


def test_rule_31_nothing_to_compute_raises_scheduling_error():
    """Rule 31.1: new tokens and hit tokens all 0 -> ValueError (a typed SchedulingError)."""
    s = Sched(8)
    r = s.request("r", list(range(20)))
    with pytest.raises(SchedulingError, match="num_new_tokens must be greater than 0"):
        s.mgr.allocate_slots(r, 0)
    assert issubclass(SchedulingError, ValueError)


def test_rule_31_hit_only_step_is_allowed():
    """Rule 31.1: a step that only adopts hit tokens (num_new_tokens 0) is legal."""
    s = Sched(8)
    a = s.request("A", list(range(40)))
    s.admit(a)
    s.finish(a)
    b = s.request("B", list(range(40)))
    blocks, hit, _ = s.mgr.get_computed_blocks(b)
    assert ids(s.mgr.allocate_slots(b, 0, hit, blocks)) == []
    assert s.table(b) == [1, 2]
    check_invariants(s.mgr, [b])


def test_rule_31_admission_check_counts_free_hit_blocks():
    """Rule 31.7 [verified]: 5 free blocks, 4 of them the request's own cached hit blocks, 2 new
    blocks needed -> None, and nothing changed."""
    s = Sched(6)  # null + 5
    a = s.request("A", list(range(65)))  # 4 hashed blocks + 1 partial
    assert s.admit(a) == (0, [1, 2, 3, 4, 5])
    s.finish(a)
    assert s.pool.get_num_free_blocks() == 5
    b = s.request("B", list(range(64)) + list(range(500, 532)))  # 96 tokens: 6 blocks
    blocks, hit, _ = s.mgr.get_computed_blocks(b)
    assert hit == 64 and all(blk.ref_cnt == 0 for blk in blocks.blocks[0])
    s.mgr.take_events()
    before = snapshot(s)
    assert s.mgr.allocate_slots(b, b.num_tokens - hit, hit, blocks) is None
    assert snapshot(s) == before
    assert s.mgr.get_block_ids("B") == ([],)
    check_invariants(s.mgr)


def test_rule_31_admission_check_passes_when_hits_are_held():
    """Rule 31.7: hit blocks already held (ref_cnt > 0) are not counted: they leave no free slot."""
    s = Sched(5)  # null + 4
    a = s.request("A", list(range(48)))
    s.admit(a)  # holds 1, 2, 3
    b = s.request("B", list(range(32)) + list(range(900, 916)))  # hits 1, 2; needs 1 new
    assert s.admit(b) == (32, [4])
    check_invariants(s.mgr, [a, b])


def test_rule_31_touches_hits_before_popping():
    """Rule 31.8-9: hits are touched before new blocks are popped from the head, so a request never
    evicts its own hits even when they sit at the head of the free queue."""
    s = Sched(6)  # null + 5
    a = s.request("A", list(range(32)))
    s.admit(a)  # [1, 2]
    f = s.request("F", list(range(700, 732)))
    s.admit(f)  # [3, 4]
    s.finish(a)  # FQ [5, 2, 1]
    g = s.request("G", list(range(800, 810)))
    s.admit(g)  # takes 5
    s.finish(f)  # FQ [2, 1, 4, 3]
    assert s.free_ids() == [2, 1, 4, 3]
    b = s.request("B", list(range(32)) + list(range(900, 916)))
    assert s.admit(b) == (32, [4])  # not 2: it was touched first
    assert s.table(b) == [1, 2, 4]
    check_invariants(s.mgr, [b, g])


def test_rule_31_blocks_are_cached_at_allocation_time():
    """Rule 31.10: blocks are hashed and BlockStored emitted in allocate_slots, before the model
    computes them (num_computed_tokens still 0)."""
    s = Sched(8)
    r = s.request("r", list(range(40)))
    s.mgr.allocate_slots(r, 40)
    assert r.num_computed_tokens == 0
    assert [s.pool.blocks[i].block_hash is not None for i in (1, 2, 3)] == [True, True, False]
    assert [type(e) for e in s.mgr.take_events()] == [BlockStored]


def test_rule_31_caching_is_capped_at_num_tokens():
    """Rule 31.10: num_tokens_to_cache = min(total + new, req.num_tokens): slots beyond the known
    tokens are never cached."""
    s = Sched(8)
    r = s.request("r", list(range(20)))
    new = s.mgr.allocate_slots(r, 40)  # more slots than tokens: 3 blocks
    assert ids(new) == [1, 2, 3]
    assert s.mgr.coordinator.single_type_managers[0].num_cached_block["r"] == 1
    assert s.pool.blocks[2].block_hash is None


def test_rule_31_max_model_len_caps_the_slots():
    """Rule 31.2/31.5: total and need_slot are capped at max_model_len."""
    s = Sched(16, max_model_len=40)
    r = s.request("r", list(range(20)))
    assert ids(s.mgr.allocate_slots(r, 100)) == [1, 2, 3]  # 40 slots, not 100


def test_rule_31_returns_only_the_new_blocks():
    """Rule 31.11: it returns only the newly allocated blocks, not the hits."""
    s = Sched(16)
    a = s.request("A", list(range(40)))
    s.admit(a)
    b = s.request("B", list(range(40)))
    hit, new = s.admit(b)
    assert hit == 32 and new == [4] and s.table(b) == [1, 2, 4]


def test_rule_31_chunked_prefill_caches_each_chunk_s_full_blocks():
    """Rule 31.10 with chunks: each allocate_slots caches the blocks full so far, one BlockStored
    each, chained by parent."""
    s = Sched(16)
    r = s.request("r", list(range(50)))
    events = []
    for chunk in (20, 20, 10):
        s.admit(r, chunk)
        events += s.mgr.take_events()
        check_invariants(s.mgr, [r])
    assert r.num_computed_tokens == 50 and s.table(r) == [1, 2, 3, 4]
    assert [e.block_hashes for e in events] == [[ext(h)] for h in r.block_hashes]
    assert [e.parent_block_hash for e in events] == [None, ext(r.block_hashes[0]), ext(r.block_hashes[1])]


def test_rule_31_running_request_takes_the_fast_path():
    """Rule 31.7: a running request needs max(required - len(req_blocks), 0) blocks."""
    s = Sched(4)  # null + 3
    r = s.request("r", list(range(32)))
    s.admit(r)  # [1, 2]
    assert s.decode(r, [5]) == [3]
    assert s.decode(r, list(range(15))) == []  # 48 tokens fit in 3 blocks
    assert s.decode(r, [1]) is None  # a 4th block: none left
    check_invariants(s.mgr, [r])


def test_rule_31_decode_caches_generated_blocks():
    """Rule 31.10 with rule 9: a block filled by sampled tokens is cached when its slots are
    allocated, and a later request can hit it."""
    s = Sched(16)
    r = s.request("r", list(range(10)))
    s.admit(r)
    s.decode(r, list(range(100, 106)))  # 16 tokens: block 0 is full
    assert s.pool.blocks[1].block_hash == make_block_hash_with_group_id(r.block_hashes[0], 0)
    s.finish(r)
    again = s.request("again", r.all_token_ids + [1])
    _, hit, _ = s.mgr.get_computed_blocks(again)
    assert hit == 16


# ---- rule 32: free ---------------------------------------------------------------------------


def test_rule_32_free_returns_blocks_in_reverse_and_drops_bookkeeping():
    """Rule 32: free pops req_to_blocks and num_cached_block, then free_blocks(reversed(blocks))."""
    s = Sched(8)
    r = s.request("r", list(range(48)))
    s.admit(r)
    s.finish(r)
    m = s.mgr.coordinator.single_type_managers[0]
    assert "r" not in m.req_to_blocks and "r" not in m.num_cached_block
    assert s.free_ids() == [4, 5, 6, 7, 3, 2, 1]


def test_rule_32_freeing_a_never_allocated_request_is_a_no_op():
    """Rule 32: freeing a request that was never allocated is a no-op."""
    s = Sched(8)
    before = snapshot(s)
    s.mgr.free(s.request("ghost", [1, 2, 3]))
    assert snapshot(s) == before


# ---- rules 33-34: cache_blocks ---------------------------------------------------------------


def test_rule_33_no_caching_when_caching_is_off():
    """Rule 33: cache_blocks runs only with caching on (no lookahead in scope): with caching off
    nothing is cached even for a request that carries hashes."""
    s = Sched(8, caching=False)
    from explorer.core.hashing import init_none_hash
    from explorer.core.kv_cache_utils import get_request_block_hasher

    r = Request("r", list(range(40)), get_request_block_hasher(BS, init_none_hash()))
    assert len(r.block_hashes) == 2
    s.mgr.allocate_slots(r, 40)
    assert len(s.pool.cached_block_hash_to_block) == 0
    assert s.mgr.coordinator.single_type_managers[0].num_cached_block == {}


def test_rule_34_cache_blocks_caches_up_to_n_over_bs():
    """Rule 34: num_full = n // bs; nothing if num_cached_block >= num_full; then
    num_cached_block = num_full."""
    s = Sched(8, events=True)
    m = s.mgr.coordinator.single_type_managers[0]
    r = s.request("r", list(range(50)))
    m.allocate_new_blocks("r", 50)
    m.cache_blocks(r, 15)
    assert "r" not in m.num_cached_block and s.pool.kv_event_queue == []
    m.cache_blocks(r, 40)
    assert m.num_cached_block["r"] == 2
    m.cache_blocks(r, 47)  # still 2 full blocks: no-op
    assert len(s.pool.kv_event_queue) == 1
    m.cache_blocks(r, 50)
    assert m.num_cached_block["r"] == 3 and len(s.pool.kv_event_queue) == 2


def test_rule_34_hit_blocks_are_never_recached():
    """Rule 34: on hits, add_local_computed_blocks sets num_cached_block to the hit length, so hit
    blocks are never cached again: an admission that only hits full blocks stores nothing, and one
    that hits 2 of 3 stores only the third."""
    s = Sched(16)
    a = s.request("A", list(range(50)))
    s.admit(a)
    s.mgr.take_events()
    same = s.request("same", list(range(50)))
    assert s.admit(same) == (48, [5])
    assert s.mgr.take_events() == []
    assert s.mgr.coordinator.single_type_managers[0].num_cached_block["same"] == 3
    b = s.request("B", list(range(32)) + list(range(300, 318)))
    assert s.admit(b)[0] == 32
    (ev,) = s.mgr.take_events()
    assert ev.block_hashes == [ext(b.block_hashes[2])]
    assert s.mgr.coordinator.single_type_managers[0].num_cached_block["B"] == 3
    check_invariants(s.mgr, [a, same, b])


# ---- rule 35: reset --------------------------------------------------------------------------


def test_rule_35_manager_reset_is_the_pool_reset():
    """Rule 35: reset_prefix_cache() goes to the (one) pool and returns its result."""
    s = Sched(8)
    r = s.request("r", list(range(40)))
    s.admit(r)
    assert s.mgr.reset_prefix_cache() is False
    assert len(s.pool.cached_block_hash_to_block) == 2
    s.preempt(r)
    assert s.mgr.reset_prefix_cache() is True
    assert len(s.pool.cached_block_hash_to_block) == 0
    assert [type(e) for e in s.mgr.take_events()][-1] is AllBlocksCleared
    check_invariants(s.mgr)


def test_rule_35_after_reset_nothing_hits():
    """Rule 35: after a reset the same prompt misses."""
    s = Sched(8)
    r = s.request("r", list(range(40)))
    s.admit(r)
    s.finish(r)
    s.mgr.reset_prefix_cache()
    _, hit, _ = s.mgr.get_computed_blocks(s.request("r2", list(range(40))))
    assert hit == 0


# ---- rule 36: the spec kind on BlockStored ---------------------------------------------------


def test_rule_36_block_stored_gets_full_attention_kind_from_the_manager():
    """Rule 36: the manager's take_events sets kv_cache_spec_kind "full_attention" and window None
    on BlockStored only; BlockRemoved has no such fields."""
    s = Sched(3)
    r = s.request("r", list(range(32)))
    s.admit(r)
    s.finish(r)
    s.admit(s.request("x", list(range(100, 132))))
    ev = s.mgr.take_events()
    stored = [e for e in ev if isinstance(e, BlockStored)]
    removed = [e for e in ev if isinstance(e, BlockRemoved)]
    assert stored and removed
    assert all(e.kv_cache_spec_kind == "full_attention" and e.kv_cache_spec_sliding_window is None for e in stored)
    assert all(not hasattr(e, "kv_cache_spec_kind") for e in removed)


def test_rule_36_pool_events_lack_the_kind():
    """Rule 36: events read straight from BlockPool.take_events() lack the kind."""
    s = Sched(8)
    s.admit(s.request("r", list(range(32))))
    (ev,) = s.pool.take_events()
    assert ev.kv_cache_spec_kind is None


def test_rule_36_out_of_range_group_is_skipped():
    """Rule 36: a BlockStored whose group_idx has no manager is left as is."""
    s = Sched(8)
    r = s.request("r", list(range(16)))
    s.pool.cache_full_blocks(r, s.pool.get_new_blocks(1), 0, 1, BS, 3)
    (ev,) = s.mgr.take_events()
    assert ev.group_idx == 3 and ev.kv_cache_spec_kind is None


# ---- rule 37: the full-attention hit -------------------------------------------------------


def test_rule_37_walk_stops_at_the_first_miss():
    """Rule 37: walk hashes[: max_length // bs] from block 0 and stop at the first miss."""
    s = Sched(16)
    m = s.mgr.coordinator.single_type_managers[0]
    a = s.request("A", list(range(64)))
    s.admit(a)
    s.finish(a)
    # Evict block 1 of A's chain (index 1) by hand: blocks 3 and 4 stay cached but unreachable.
    k1 = s.pool.blocks[2].block_hash
    s.pool.cached_block_hash_to_block.pop(k1, 2)
    s.pool.blocks[2].reset_hash()
    (hits,), hit = m.find_longest_cache_hit(a.block_hashes, 64)
    assert [b.block_id for b in hits] == [1] and hit == 16


def test_rule_37_max_length_limits_the_probe():
    """Rule 37: at most max_length // bs blocks are probed; hit = len * bs."""
    s = Sched(16)
    m = s.mgr.coordinator.single_type_managers[0]
    a = s.request("A", list(range(64)))
    s.admit(a)
    assert len(m.find_longest_cache_hit(a.block_hashes, 63)[0][0]) == 3
    assert len(m.find_longest_cache_hit(a.block_hashes, 64)[0][0]) == 4
    assert len(m.find_longest_cache_hit(a.block_hashes, 15)[0][0]) == 0


def test_rule_37_hit_uses_the_earliest_duplicate():
    """Rule 37 with rule 18: a hit returns get_one_block, the earliest-inserted copy."""
    s = Sched(16)
    a = s.request("A", list(range(48)))
    s.admit(a)
    a2 = s.request("A2", list(range(48)))
    s.admit(a2)  # block 4 duplicates block 3
    blocks, _, _ = s.mgr.get_computed_blocks(s.request("A3", list(range(49))))
    assert ids(blocks) == [1, 2, 3]


def test_rule_37_a_different_first_block_misses_everything():
    """Rule 37: chained hashes: a change in block 0 makes every later block miss."""
    s = Sched(16)
    a = s.request("A", list(range(64)))
    s.admit(a)
    b = s.request("B", [999] + list(range(1, 64)))
    _, hit, _ = s.mgr.get_computed_blocks(b)
    assert hit == 0


def test_rule_37_extra_keys_separate_otherwise_identical_prompts():
    """Rule 37 with rule 10: a different salt or LoRA misses from block 0."""
    from explorer.core.request import LoRARequest

    s = Sched(16)
    s.admit(s.request("A", list(range(48))))
    for kw in ({"cache_salt": "x"}, {"lora_request": LoRARequest("l", 1, "p")}):
        _, hit, _ = s.mgr.get_computed_blocks(s.request("B", list(range(48)), **kw))
        assert hit == 0


def test_caching_off_frees_everything_to_the_front():
    """Caching off: no hasher (block_hashes empty), no lookup, freed blocks all go to the front."""
    s = Sched(64, caching=False)
    a = s.request("A", list(range(50)))
    assert a.block_hashes == []
    assert s.admit(a) == (0, [1, 2, 3, 4])
    s.finish(a)
    assert s.free_ids() == [4, 3, 2, 1, *range(5, 64)]
    b = s.request("B", list(range(50)))
    assert s.admit(b) == (0, [4, 3, 2, 1])
    check_invariants(s.mgr)


def test_waiting_request_status_is_untouched_by_the_manager():
    """The manager does not move request status: that is the scheduler's job."""
    s = Sched(8)
    r = s.request("r", list(range(20)))
    s.mgr.allocate_slots(r, 20)
    assert r.status == RequestStatus.WAITING


def test_rule_74_eagle_drops_the_last_hit_block():
    """Part 2 rule 74: A (0:100) cached; B = A + 50 hits 96 without EAGLE and 80 with it."""
    for use_eagle, expected in ((False, 96), (True, 80)):
        s = Sched()
        s.mgr = KVCacheManager(64, 16, enable_kv_cache_events=True, use_eagle=use_eagle)
        a = s.request("A", range(100))
        assert s.admit(a) == (0, list(range(1, 8)))
        s.mgr.free(a)
        b = s.request("B", [*range(100), *([5] * 50)])
        hit_blocks, hit, _ = s.mgr.get_computed_blocks(b)
        assert hit == expected
        assert hit_blocks.get_block_ids() == (list(range(1, 1 + expected // 16)),)
