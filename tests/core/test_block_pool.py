"""BlockPool: spec rules 11, 17-26 (rule 21 without promotion or block mask)."""

from __future__ import annotations

import pytest

from explorer.core.block_pool import BlockHashToBlockMap, BlockPool
from explorer.core.events import AllBlocksCleared, BlockRemoved, BlockStored
from explorer.core.hashing import external_block_hash, init_none_hash, make_block_hash_with_group_id
from explorer.core.kv_cache_utils import KVCacheBlock, get_request_block_hasher
from explorer.core.request import LoRARequest, MultiModalFeature, Request

BS = 16


@pytest.fixture
def hasher():
    return get_request_block_hasher(BS, init_none_hash("sha256"))


def free_ids(pool):
    return [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]


def key(h, gid=0):
    return make_block_hash_with_group_id(h, gid)


# ---- rule 17: construction, the null block, usage --------------------------------------------


def test_rule_17_null_block_is_block_0_and_free_is_n_minus_1():
    """Rule 17: null_block = FQ.popleft(), i.e. block 0 with is_null=True; free = N-1; ids from 1."""
    pool = BlockPool(64)
    assert pool.null_block is pool.blocks[0] and pool.null_block.is_null
    assert pool.get_num_free_blocks() == 63
    assert free_ids(pool) == list(range(1, 64))
    assert [b.block_id for b in pool.get_new_blocks(2)] == [1, 2]


def test_rule_17_usage_is_1_minus_free_over_n_minus_1():
    """Rule 17: get_usage() = 1 - free/(N-1)."""
    pool = BlockPool(5)
    assert pool.get_usage() == 0.0
    pool.get_new_blocks(1)
    assert pool.get_usage() == pytest.approx(0.25)
    pool.get_new_blocks(3)
    assert pool.get_usage() == 1.0


def test_rule_17_null_block_ref_cnt_is_not_maintained():
    """Rule 17: the null block's ref_cnt is not maintained, but touch and free still change it;
    it never enters the free queue."""
    pool = BlockPool(4)
    null = pool.null_block
    pool.touch([null, null])
    assert null.ref_cnt == 2 and pool.get_num_free_blocks() == 3
    pool.free_blocks([null, null])
    assert null.ref_cnt == 0 and free_ids(pool) == [1, 2, 3]


def test_rule_17_num_blocks_must_leave_a_real_block():
    """Rule 17: vLLM asserts num_gpu_blocks > 0; here fewer than 2 (no block besides the null
    block) is a typed ConfigError."""
    from explorer.core.errors import ConfigError

    for bad in (0, 1, -3, 2.0, "8"):
        with pytest.raises(ConfigError, match="num_blocks"):
            BlockPool(bad)


# ---- rule 18: the hash map -------------------------------------------------------------------


def test_rule_18_map_value_becomes_a_dict_on_a_second_block_with_the_same_key():
    """Rule 18: a single block normally; a {block_id: block} dict once a second block has the key."""
    m = BlockHashToBlockMap()
    b3, b4 = KVCacheBlock(3), KVCacheBlock(4)
    m.insert(b"k", b3)
    assert m._cache[b"k"] is b3
    m.insert(b"k", b4)
    assert m._cache[b"k"] == {3: b3, 4: b4}
    assert len(m) == 1  # len counts keys


def test_rule_18_get_one_block_returns_the_earliest_inserted_survivor():
    """Rule 18: get_one_block returns the single block or the dict's first value (insertion order)."""
    m = BlockHashToBlockMap()
    b3, b4, b5 = KVCacheBlock(3), KVCacheBlock(4), KVCacheBlock(5)
    assert m.get_one_block(b"k") is None
    for b in (b4, b3, b5):
        m.insert(b"k", b)
    assert m.get_one_block(b"k") is b4
    m.pop(b"k", 4)
    assert m.get_one_block(b"k") is b3


def test_rule_18_pop_with_another_id_restores_a_single_entry():
    """Rule 18: pop(key, id) returns None and restores the entry if the single block has another id."""
    m = BlockHashToBlockMap()
    b3 = KVCacheBlock(3)
    m.insert(b"k", b3)
    assert m.pop(b"k", 9) is None
    assert m.get_one_block(b"k") is b3
    assert m.pop(b"missing", 3) is None
    assert m.pop(b"k", 3) is b3 and len(m) == 0


def test_rule_18_pop_from_a_dict_restores_the_rest():
    """Rule 18: for a dict, pop removes that id and re-stores the dict if it is not empty."""
    m = BlockHashToBlockMap()
    b3, b4 = KVCacheBlock(3), KVCacheBlock(4)
    m.insert(b"k", b3)
    m.insert(b"k", b4)
    assert m.pop(b"k", 9) is None and m._cache[b"k"] == {3: b3, 4: b4}
    assert m.pop(b"k", 3) is b3 and m._cache[b"k"] == {4: b4}
    assert m.pop(b"k", 4) is b4 and len(m) == 0


# ---- rule 19: duplicates ---------------------------------------------------------------------


def test_rule_19_identical_blocks_are_not_deduplicated(hasher):
    """Rule 19: caching an identical block a second time keeps both under the same key, and each
    caching emits its own BlockStored with the same hash."""
    pool = BlockPool(8, enable_kv_cache_events=True)
    a = Request("a", list(range(16)), hasher)
    b = Request("b", list(range(16)), hasher)
    ba, bb = pool.get_new_blocks(1), pool.get_new_blocks(1)
    pool.cache_full_blocks(a, ba, 0, 1, BS, 0)
    pool.cache_full_blocks(b, bb, 0, 1, BS, 0)
    k = key(a.block_hashes[0])
    assert pool.cached_block_hash_to_block._cache[k] == {1: ba[0], 2: bb[0]}
    ev = pool.take_events()
    assert [e.block_hashes for e in ev] == [[external_block_hash(a.block_hashes[0])]] * 2


# ---- rule 20: lookup -------------------------------------------------------------------------


def test_rule_20_get_cached_block_returns_one_block_per_group_or_none(hasher):
    """Rule 20: one block per group for the hash; None if any group misses."""
    pool = BlockPool(8)
    r = Request("r", list(range(40)), hasher)
    blks = pool.get_new_blocks(3)
    pool.cache_full_blocks(r, blks, 0, 2, BS, 0)
    assert pool.get_cached_block(r.block_hashes[1], [0]) == [blks[1]]
    assert pool.get_cached_block(r.block_hashes[1], [1]) is None  # another group: a miss
    assert pool.get_cached_block(r.block_hashes[1], [0, 1]) is None  # any group missing -> None
    other = pool.get_new_blocks(1)[0]  # a second group's block for the same hash
    pool.cache_full_blocks(r, [pool.null_block, other], 1, 2, BS, 1)
    assert pool.get_cached_block(r.block_hashes[1], [0, 1]) == [blks[1], other]


# ---- rule 21: cache_full_blocks --------------------------------------------------------------


def test_rule_21_cache_full_blocks_returns_at_once_when_nothing_new(hasher):
    """Rule 21: it returns at once if num_cached >= num_full: no hash, no event."""
    pool = BlockPool(8, enable_kv_cache_events=True)
    r = Request("r", list(range(32)), hasher)
    blks = pool.get_new_blocks(2)
    pool.cache_full_blocks(r, blks, 2, 2, BS, 0)
    pool.cache_full_blocks(r, blks, 2, 1, BS, 0)
    assert all(b.block_hash is None for b in blks) and pool.take_events() == []


def test_rule_21_inserts_key_with_group_id_for_each_new_full_block(hasher):
    """Rule 21: each blocks[num_cached:num_full] is inserted under key (hashes[i], gid)."""
    pool = BlockPool(8)
    r = Request("r", list(range(50)), hasher)
    blks = pool.get_new_blocks(4)
    pool.cache_full_blocks(r, blks, 0, 3, BS, 5)
    for i in range(3):
        assert blks[i].block_hash == key(r.block_hashes[i], 5)
        assert pool.cached_block_hash_to_block.get_one_block(key(r.block_hashes[i], 5)) is blks[i]
    assert blks[3].block_hash is None  # partial: never hashed


def test_rule_21_one_block_stored_per_call_with_its_fields(hasher):
    """Rule 21: exactly one BlockStored per call: converted hashes, parent None when num_cached == 0,
    token_ids of the range, block_size, medium "GPU", extra_keys, group_idx."""
    pool = BlockPool(8, enable_kv_cache_events=True)
    r = Request("r", list(range(50)), hasher)
    blks = pool.get_new_blocks(4)
    pool.cache_full_blocks(r, blks, 0, 3, BS, 0)
    (ev,) = pool.take_events()
    assert isinstance(ev, BlockStored)
    assert ev.block_hashes == [external_block_hash(h) for h in r.block_hashes]
    assert ev.parent_block_hash is None
    assert ev.token_ids == list(range(48))
    assert ev.block_size == BS and ev.medium == "GPU" and ev.group_idx == 0
    assert ev.lora_id is None and ev.lora_name is None
    assert ev.extra_keys == [None, None, None]
    assert ev.session_id is None
    assert ev.kv_cache_spec_kind is None and ev.kv_cache_spec_sliding_window is None  # rule 36


def test_rule_21_parent_is_the_hash_of_block_num_cached_minus_1(hasher):
    """Rule 21: parent_block_hash = converted hash of block num_cached-1; tokens from num_cached*bs."""
    pool = BlockPool(8, enable_kv_cache_events=True)
    r = Request("r", list(range(50)), hasher)
    blks = pool.get_new_blocks(4)
    pool.cache_full_blocks(r, blks, 0, 1, BS, 0)
    pool.cache_full_blocks(r, blks, 1, 3, BS, 0)
    first, second = pool.take_events()
    assert first.block_hashes == [external_block_hash(r.block_hashes[0])] and first.token_ids == list(range(16))
    assert second.parent_block_hash == external_block_hash(r.block_hashes[0])
    assert second.block_hashes == [external_block_hash(h) for h in r.block_hashes[1:3]]
    assert second.token_ids == list(range(16, 48))


def test_rule_21_null_blocks_are_skipped_but_their_tokens_stay_in_the_event(hasher):
    """Rule 21: null blocks are skipped (no hash, not in block_hashes) yet token_ids covers the whole
    range, so len(token_ids) can exceed len(block_hashes) * bs."""
    pool = BlockPool(8, enable_kv_cache_events=True)
    r = Request("r", list(range(48)), hasher)
    blks = [pool.null_block] + pool.get_new_blocks(2)
    pool.cache_full_blocks(r, blks, 0, 3, BS, 0)
    assert pool.null_block.block_hash is None
    (ev,) = pool.take_events()
    assert ev.block_hashes == [external_block_hash(h) for h in r.block_hashes[1:]]
    assert ev.token_ids == list(range(48)) and ev.extra_keys == [None, None]
    assert ev.parent_block_hash is None  # not adjusted for the skipped block


def test_rule_21_event_carries_lora_and_untagged_extra_keys(hasher):
    """Rule 21: lora_id = adapter id, lora_name = name; extra_keys = to_event_extra_keys per block."""
    pool = BlockPool(8, enable_kv_cache_events=True)
    r = Request(
        "r",
        list(range(32)),
        hasher,
        lora_request=LoRARequest("sql", 7, "/p/sql"),
        cache_salt="s",
        mm_features=[MultiModalFeature("img", 12, 8)],
    )
    blks = pool.get_new_blocks(2)
    pool.cache_full_blocks(r, blks, 0, 2, BS, 0)
    (ev,) = pool.take_events()
    assert ev.lora_id == 7 and ev.lora_name == "sql"
    assert ev.extra_keys == [("sql", ("img", 12), "s"), ("sql", ("img", -4))]


def test_rule_21_no_event_when_events_are_off(hasher):
    """Rule 21: the BlockStored is only queued when events are on (rule 26: take_events is [])."""
    pool = BlockPool(8)
    r = Request("r", list(range(16)), hasher)
    pool.cache_full_blocks(r, pool.get_new_blocks(1), 0, 1, BS, 0)
    assert pool.kv_event_queue == [] and pool.take_events() == []


# ---- rule 22: get_new_blocks -----------------------------------------------------------------


def test_rule_22_get_new_blocks_raises_when_short():
    """Rule 22: ValueError("Cannot get {n} free blocks from the pool") if n > free."""
    pool = BlockPool(4)
    with pytest.raises(ValueError, match="Cannot get 4 free blocks from the pool"):
        pool.get_new_blocks(4)
    assert pool.get_num_free_blocks() == 3


def test_rule_22_pops_from_the_head_and_sets_ref_cnt_1():
    """Rule 22: it popleft_n(n)s from the head and sets each ref_cnt from 0 to 1."""
    pool = BlockPool(6)
    got = pool.get_new_blocks(3)
    assert [b.block_id for b in got] == [1, 2, 3] and all(b.ref_cnt == 1 for b in got)
    assert free_ids(pool) == [4, 5]


def test_rule_22_popping_a_cached_block_evicts_it_with_one_block_removed(hasher):
    """Rule 22: each popped cached block loses its key and hash and emits one BlockRemoved
    (hash, medium, group_idx), in pop order; unhashed blocks emit nothing."""
    pool = BlockPool(4, enable_kv_cache_events=True)
    r = Request("r", list(range(32)), hasher)
    blks = pool.get_new_blocks(3)
    pool.cache_full_blocks(r, blks, 0, 2, BS, 2)
    pool.free_blocks(reversed(blks))  # FQ: [3, 2, 1]
    pool.take_events()
    got = pool.get_new_blocks(3)
    assert [b.block_id for b in got] == [3, 2, 1]
    assert all(b.block_hash is None and b.ref_cnt == 1 for b in got)
    assert len(pool.cached_block_hash_to_block) == 0
    ev = pool.take_events()
    assert all(isinstance(e, BlockRemoved) for e in ev)
    assert [e.block_hashes for e in ev] == [
        [external_block_hash(r.block_hashes[1])],
        [external_block_hash(r.block_hashes[0])],
    ]
    assert all(e.medium == "GPU" and e.group_idx == 2 for e in ev)


def test_rule_22_evicting_one_duplicate_keeps_the_other(hasher):
    """Rule 22 with rule 19: popping one copy removes only that copy from the map."""
    pool = BlockPool(3, enable_kv_cache_events=True)
    a, b = Request("a", list(range(16)), hasher), Request("b", list(range(16)), hasher)
    ba, bb = pool.get_new_blocks(1), pool.get_new_blocks(1)
    pool.cache_full_blocks(a, ba, 0, 1, BS, 0)
    pool.cache_full_blocks(b, bb, 0, 1, BS, 0)
    pool.free_blocks(ba)
    pool.take_events()
    pool.get_new_blocks(1)  # evicts block 1
    assert pool.get_cached_block(a.block_hashes[0], [0]) == bb
    assert [type(e) for e in pool.take_events()] == [BlockRemoved]


def test_rule_22_caching_off_pops_without_evicting():
    """Rule 22: eviction runs only with caching on."""
    pool = BlockPool(3, enable_caching=False)
    got = pool.get_new_blocks(2)
    assert [b.ref_cnt for b in got] == [1, 1]


# ---- rule 23: touch --------------------------------------------------------------------------


def test_rule_23_touch_removes_free_block_and_increments_all(hasher):
    """Rule 23: each block with ref_cnt 0 (not null) leaves the FQ; every block gets ref_cnt += 1."""
    pool = BlockPool(6)
    blks = pool.get_new_blocks(2)  # 1, 2
    pool.free_blocks([blks[0]])  # 1 free (unhashed -> front)
    assert free_ids(pool) == [1, 3, 4, 5]
    pool.touch([blks[0], blks[1], pool.null_block])
    assert [blks[0].ref_cnt, blks[1].ref_cnt, pool.null_block.ref_cnt] == [1, 2, 1]
    assert free_ids(pool) == [3, 4, 5] and pool.get_num_free_blocks() == 3


def test_rule_23_touch_takes_a_free_block_from_the_middle(hasher):
    """Rule 23: the free block is unlinked in place; the rest of the FQ keeps its order."""
    pool = BlockPool(6)
    pool.touch([pool.blocks[3]])
    assert free_ids(pool) == [1, 2, 4, 5] and pool.blocks[3].ref_cnt == 1


# ---- rule 24: free order ---------------------------------------------------------------------


def test_rule_24_free_order_example(hasher):
    """Rule 24 [verified]: A owns [1,2,3,4], 3 hashed and 4 partial; after free (reversed),
    FQ = [4, 5, 6, ..., 63, 3, 2, 1]."""
    pool = BlockPool(64)
    a = Request("A", list(range(50)), hasher)
    blks = pool.get_new_blocks(4)
    pool.cache_full_blocks(a, blks, 0, 3, BS, 0)
    pool.free_blocks(reversed(blks))
    assert free_ids(pool) == [4, *range(5, 64), 3, 2, 1]
    assert all(b.ref_cnt == 0 for b in blks)


def test_rule_24_unhashed_to_front_hashed_to_back_both_in_input_order(hasher):
    """Rule 24: blocks reaching 0 without a hash are prepended, with a hash appended; both lists
    keep the input order."""
    pool = BlockPool(8)
    r = Request("r", list(range(32)), hasher)
    blks = pool.get_new_blocks(4)  # 1..4; FQ [5, 6, 7]
    pool.cache_full_blocks(r, blks, 0, 2, BS, 0)  # 1, 2 hashed
    pool.free_blocks([blks[0], blks[2], blks[1], blks[3]])
    assert free_ids(pool) == [3, 4, 5, 6, 7, 1, 2]


def test_rule_24_only_blocks_reaching_zero_are_queued(hasher):
    """Rule 24: every block gets ref_cnt -= 1; only those reaching 0 (and not null) are queued."""
    pool = BlockPool(4)
    blks = pool.get_new_blocks(2)
    pool.touch([blks[0]])  # ref 2
    pool.free_blocks(reversed(blks))
    assert blks[0].ref_cnt == 1 and free_ids(pool) == [2, 3]


def test_rule_24_caching_off_sends_every_block_to_the_front(hasher):
    """Rule 24: with caching off every block goes to evict_first (the front)."""
    pool = BlockPool(8, enable_caching=False)
    r = Request("r", list(range(32)), hasher)
    blks = pool.get_new_blocks(3)
    blks[0].set_block_hash(key(r.block_hashes[0]))  # even a block carrying a hash
    pool.free_blocks(reversed(blks))
    assert free_ids(pool) == [3, 2, 1, 4, 5, 6, 7]


def test_rule_24_freeing_emits_no_event(hasher):
    """Rule 24: freeing emits no events."""
    pool = BlockPool(8, enable_kv_cache_events=True)
    r = Request("r", list(range(32)), hasher)
    blks = pool.get_new_blocks(2)
    pool.cache_full_blocks(r, blks, 0, 2, BS, 0)
    pool.take_events()
    pool.free_blocks(reversed(blks))
    assert pool.take_events() == []


# ---- rule 25: reset --------------------------------------------------------------------------


def test_rule_25_reset_refused_while_a_block_is_in_use(hasher):
    """Rule 25: it succeeds only when only the null block is in use; otherwise False, nothing changes."""
    pool = BlockPool(8, enable_kv_cache_events=True)
    r = Request("r", list(range(32)), hasher)
    blks = pool.get_new_blocks(2)
    pool.cache_full_blocks(r, blks, 0, 2, BS, 0)
    pool.take_events()
    pool.free_blocks([blks[1]])
    assert pool.reset_prefix_cache() is False
    assert blks[0].block_hash is not None and blks[1].block_hash is not None
    assert len(pool.cached_block_hash_to_block) == 2 and pool.take_events() == []


def test_rule_25_reset_clears_every_hash_with_one_all_blocks_cleared(hasher):
    """Rule 25 [verified]: on success the map is replaced, every block reset_hash'ed, and a single
    AllBlocksCleared is queued with no per-block BlockRemoved; the FQ order is unchanged."""
    pool = BlockPool(8, enable_kv_cache_events=True)
    r = Request("r", list(range(40)), hasher)
    blks = pool.get_new_blocks(3)
    pool.cache_full_blocks(r, blks, 0, 2, BS, 0)
    pool.free_blocks(reversed(blks))
    pool.take_events()
    before = free_ids(pool)
    assert pool.reset_prefix_cache() is True
    assert free_ids(pool) == before
    assert len(pool.cached_block_hash_to_block) == 0
    assert all(b.block_hash is None for b in pool.blocks)
    ev = pool.take_events()
    assert len(ev) == 1 and isinstance(ev[0], AllBlocksCleared)


def test_rule_25_reset_without_events_queues_nothing():
    """Rule 25: the AllBlocksCleared is appended only when events are on."""
    pool = BlockPool(4)
    assert pool.reset_prefix_cache() is True and pool.kv_event_queue == []


# ---- rule 26: take_events --------------------------------------------------------------------


def test_rule_26_take_events_is_empty_when_events_are_disabled():
    """Rule 26: take_events() returns [] when events are disabled."""
    assert BlockPool(4).take_events() == []


def test_rule_26_take_events_swaps_the_list_out(hasher):
    """Rule 26: it swaps out the list and returns it; the next call starts empty."""
    pool = BlockPool(4, enable_kv_cache_events=True)
    pool.reset_prefix_cache()
    first = pool.take_events()
    assert len(first) == 1 and pool.take_events() == []
    pool.reset_prefix_cache()
    assert len(first) == 1  # the returned list is not the pool's queue


# ---- rule 11: the event form of a hash -------------------------------------------------------


def test_rule_11_event_hash_is_the_last_8_bytes_big_endian(hasher):
    """Rule 11: maybe_convert_block_hash = int.from_bytes(h, "big") & (2**64-1): the last 8 bytes."""
    from explorer.core.hashing import maybe_convert_block_hash

    h = bytes(range(32))
    assert maybe_convert_block_hash(h, True) == int.from_bytes(h[-8:], "big")
    assert maybe_convert_block_hash(h, False) == h
    assert external_block_hash(b"\xff" * 16) == 2**64 - 1


def test_rule_11_events_carry_raw_bytes_when_int_hashes_are_off(hasher):
    """Rule 11: VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES off -> events carry the raw digest."""
    pool = BlockPool(4, enable_kv_cache_events=True, use_int_block_hashes=False)
    r = Request("r", list(range(32)), hasher)
    blks = pool.get_new_blocks(2)
    pool.cache_full_blocks(r, blks, 0, 1, BS, 0)
    pool.cache_full_blocks(r, blks, 1, 2, BS, 0)
    pool.free_blocks(reversed(blks))
    pool.get_new_blocks(3)
    stored1, stored2, removed_a, removed_b = pool.take_events()
    assert stored1.block_hashes == [r.block_hashes[0]]
    assert stored2.parent_block_hash == r.block_hashes[0]
    assert removed_a.block_hashes == [r.block_hashes[1]] and removed_b.block_hashes == [r.block_hashes[0]]
