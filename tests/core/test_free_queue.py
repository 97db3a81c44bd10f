"""KVCacheBlock and the free queue: spec rules 15 and 16."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from explorer.core.kv_cache_utils import FreeKVCacheBlockQueue, KVCacheBlock


def make(n):
    blocks = [KVCacheBlock(i) for i in range(n)]
    return blocks, FreeKVCacheBlockQueue(blocks)


def order(q):
    return [b.block_id for b in q.get_all_free_blocks()]


def test_rule_15_block_is_a_slots_dataclass_with_vllm_fields():
    """Rule 15: KVCacheBlock is a @dataclass(slots=True) with block_id, ref_cnt=0, _block_hash=None,
    prev_free_block, next_free_block, is_null=False."""
    b = KVCacheBlock(7)
    assert dataclasses.is_dataclass(b) and not hasattr(b, "__dict__")
    names = [f.name for f in dataclasses.fields(b)]
    for name in ("block_id", "ref_cnt", "_block_hash", "prev_free_block", "next_free_block", "is_null"):
        assert name in names
    assert (b.block_id, b.ref_cnt, b.block_hash, b.is_null) == (7, 0, None, False)
    assert b.prev_free_block is None and b.next_free_block is None


def test_rule_15_set_block_hash_asserts_no_hash_yet():
    """Rule 15: set_block_hash asserts the block has no hash yet."""
    b = KVCacheBlock(1)
    b.set_block_hash(b"k" * 36)
    assert b.block_hash == b"k" * 36
    with pytest.raises(AssertionError):
        b.set_block_hash(b"j" * 36)


def test_rule_15_reset_hash_clears_the_hash():
    """Rule 15: reset_hash clears the hash fields (and a new hash may then be set)."""
    b = KVCacheBlock(1)
    b.set_block_hash(b"k" * 36)
    b.reset_hash()
    assert b.block_hash is None
    b.set_block_hash(b"j" * 36)
    assert b.block_hash == b"j" * 36


def test_rule_16_initial_order_is_by_block_id_with_sentinels():
    """Rule 16: an intrusive doubly linked list with fake head and tail sentinels (block_id -1),
    an O(1) counter, and initial order by block id."""
    blocks, q = make(5)
    assert order(q) == [0, 1, 2, 3, 4] and q.num_free_blocks == 5
    assert q.fake_free_list_head.block_id == -1 and q.fake_free_list_tail.block_id == -1
    assert q.fake_free_list_head.next_free_block is blocks[0]
    assert q.fake_free_list_tail.prev_free_block is blocks[4]
    assert blocks[2].prev_free_block is blocks[1] and blocks[2].next_free_block is blocks[3]


def test_rule_16_popleft_pops_the_head_and_raises_when_empty():
    """Rule 16: popleft takes the head; empty -> ValueError("No free blocks available")."""
    _, q = make(2)
    assert q.popleft().block_id == 0 and q.popleft().block_id == 1
    assert q.num_free_blocks == 0
    with pytest.raises(ValueError, match="No free blocks available"):
        q.popleft()


def test_rule_16_popleft_n_pops_from_the_head_and_zero_is_empty():
    """Rule 16: popleft_n(n) pops from the head, and n == 0 returns []."""
    _, q = make(5)
    assert q.popleft_n(0) == []
    popped = q.popleft_n(3)
    assert [b.block_id for b in popped] == [0, 1, 2]
    assert all(b.prev_free_block is None and b.next_free_block is None for b in popped)
    assert order(q) == [3, 4] and q.num_free_blocks == 2


def test_rule_16_remove_unlinks_in_place_and_raises_if_not_linked():
    """Rule 16: remove(b) unlinks a block in O(1); RuntimeError if the block is not linked."""
    blocks, q = make(5)
    q.remove(blocks[2])
    assert order(q) == [0, 1, 3, 4] and q.num_free_blocks == 4
    assert blocks[2].prev_free_block is None and blocks[2].next_free_block is None
    with pytest.raises(RuntimeError):
        q.remove(blocks[2])


def test_rule_16_append_and_append_n_add_at_the_tail_in_order():
    """Rule 16: append and append_n add at the tail, keeping the list's order."""
    blocks, q = make(5)
    taken = q.popleft_n(5)
    q.append(taken[3])
    q.append_n([taken[1], taken[4]])
    q.append_n([])
    assert order(q) == [3, 1, 4] and q.num_free_blocks == 3


def test_rule_16_prepend_n_puts_blocks_0_at_the_head():
    """Rule 16: prepend_n(blocks) inserts at the head keeping the list's order: blocks[0] is the new head."""
    blocks, q = make(5)
    a, b = q.popleft(), q.popleft()  # 0, 1
    q.prepend_n([b, a])
    assert order(q) == [1, 0, 2, 3, 4] and q.num_free_blocks == 5
    q.prepend_n([])
    assert order(q) == [1, 0, 2, 3, 4]


def test_rule_16_prepend_n_into_an_empty_queue():
    """Rule 16: prepend_n on an empty queue links the blocks between the sentinels."""
    blocks, q = make(3)
    taken = q.popleft_n(3)
    q.prepend_n([taken[2], taken[0]])
    assert order(q) == [2, 0] and q.fake_free_list_tail.prev_free_block is taken[0]


def test_rule_16_there_is_no_single_block_prepend():
    """Rule 16: there is no single-block prepend."""
    assert not hasattr(FreeKVCacheBlockQueue, "prepend")


@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["pop", "popn", "remove", "append", "appendn", "prependn"]), st.integers(0, 7)),
        max_size=40,
    )
)
def test_rule_16_queue_matches_a_list_model(ops):
    """Rule 16: every operation keeps the linked list equal to a plain list model, head to tail."""
    blocks, q = make(8)
    model = list(range(8))
    for op, k in ops:
        if op == "pop" and model:
            assert q.popleft().block_id == model.pop(0)
        elif op == "popn" and k <= len(model):
            got = [b.block_id for b in q.popleft_n(k)]
            assert got == model[:k]
            del model[:k]
        elif op == "remove" and k in model:
            q.remove(blocks[k])
            model.remove(k)
        elif op == "append" and k not in model:
            q.append(blocks[k])
            model.append(k)
        elif op in ("appendn", "prependn"):
            free = [i for i in range(8) if i not in model]
            chosen = free[: k % 3 + 1][::-1]
            if op == "appendn":
                q.append_n([blocks[i] for i in chosen])
                model.extend(chosen)
            else:
                q.prepend_n([blocks[i] for i in chosen])
                model[:0] = chosen
        assert order(q) == model and q.num_free_blocks == len(model)
        for i in range(8):
            if i not in model:
                assert blocks[i].prev_free_block is None and blocks[i].next_free_block is None
