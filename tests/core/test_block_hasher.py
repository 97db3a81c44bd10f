"""The request block hasher and extra keys: spec rules 9, 10 and 12."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from explorer.core.hashing import init_none_hash
from explorer.core.kv_cache_utils import (
    generate_block_hash_extra_keys,
    get_request_block_hasher,
    hash_block_tokens,
    to_event_extra_keys,
)
from explorer.core.request import LoRARequest, MultiModalFeature, Request

BS = 16


@pytest.fixture
def ctx():
    return init_none_hash("sha256")


def chain(ctx, tokens, bs=BS, extra=lambda start, end: None):
    """The expected hashes, computed block by block from rule 8."""
    out, parent = [], None
    for start in range(0, len(tokens) - bs + 1, bs):
        parent = hash_block_tokens(ctx, parent, tokens[start : start + bs], extra(start, start + bs))
        out.append(parent)
    return out


def test_rule_9_only_full_blocks_are_hashed(ctx):
    """Rule 9: the hasher hashes only full blocks; a partial tail has no hash."""
    req = Request("r", list(range(50)), get_request_block_hasher(BS, ctx))
    assert req.block_hashes == chain(ctx, list(range(50)))
    assert len(req.block_hashes) == 3
    assert Request("s", list(range(15)), get_request_block_hasher(BS, ctx)).block_hashes == []


def test_rule_9_hasher_returns_nothing_without_a_new_full_block(ctx):
    """Rule 9: it starts at len(block_hashes) * bs and returns [] when no new block is full."""
    hasher = get_request_block_hasher(BS, ctx)
    req = Request("r", list(range(32)), hasher)
    assert hasher(req) == []  # both blocks already hashed
    req.append_output_token_ids([1] * 15)
    assert len(req.block_hashes) == 2


def test_rule_9_generated_tokens_extend_the_chain(ctx):
    """Rule 9: append_output_token_ids re-runs the hasher; hashes cover prompt and output tokens,
    chained from block_hashes[-1]."""
    req = Request("r", list(range(20)), get_request_block_hasher(BS, ctx))
    assert len(req.block_hashes) == 1
    req.append_output_token_ids(list(range(100, 112)))  # 32 tokens now
    assert req.block_hashes == chain(ctx, list(range(20)) + list(range(100, 112)))
    req.append_output_token_ids(7)  # a single int is one token
    assert req.num_tokens == 33 and len(req.block_hashes) == 2


@settings(max_examples=200, deadline=None)
@given(
    prompt=st.lists(st.integers(0, 5), min_size=1, max_size=40),
    outputs=st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=7), max_size=8),
    bs=st.integers(1, 6),
)
def test_rule_9_incremental_hashing_equals_hashing_all_at_once(prompt, outputs, bs):
    """Rule 9: hashing as tokens arrive gives the same chain as hashing the whole sequence."""
    ctx = init_none_hash("sha256")
    req = Request("r", prompt, get_request_block_hasher(bs, ctx))
    for out in outputs:
        req.append_output_token_ids(out)
    assert req.block_hashes == chain(ctx, req.all_token_ids, bs)


def test_rule_9_hashes_exist_before_any_kv_is_computed(ctx):
    """Rule 9: Request.__init__ runs the hasher once: the hashes exist before any KV is computed."""
    req = Request("r", list(range(48)), get_request_block_hasher(BS, ctx))
    assert req.num_computed_tokens == 0 and len(req.block_hashes) == 3


def test_rule_9_block_size_must_be_positive(ctx):
    """Rule 9: a hasher needs a positive block size (0 would never advance)."""
    from explorer.core.errors import ConfigError

    with pytest.raises(ConfigError, match="block size"):
        get_request_block_hasher(0, ctx)


def test_rule_10_no_extra_keys_is_none(ctx):
    """Rule 10: generate_block_hash_extra_keys returns None when there are no extra keys."""
    req = Request("r", list(range(32)))
    assert generate_block_hash_extra_keys(req, 0, 16) is None
    assert generate_block_hash_extra_keys(req, 16, 32) is None


def test_rule_10_lora_key_on_every_block_with_path(ctx):
    """Rule 10: LoRA: ("lora", lora_name, lora_path) on every block (the path is included)."""
    lora = LoRARequest("sql", 3, "/adapters/sql")
    hasher = get_request_block_hasher(BS, ctx)
    req = Request("r", list(range(48)), hasher, lora_request=lora)
    key = (("lora", "sql", "/adapters/sql"),)
    for start in (0, 16, 32):
        assert generate_block_hash_extra_keys(req, start, start + BS) == key
    assert req.block_hashes == chain(ctx, list(range(48)), extra=lambda s, e: key)
    # Another path for the same name is another adapter: different hashes from block 0 on.
    other = Request("o", list(range(48)), hasher, lora_request=LoRARequest("sql", 3, "/adapters/v2"))
    assert other.block_hashes[0] != req.block_hashes[0]


def test_rule_10_mm_item_overlapping_blocks_has_relative_offsets(ctx):
    """Rule 10: one ("mm", id, offset - start) per item overlapping [start, end); negative when the
    item began in an earlier block."""
    req = Request("r", list(range(64)), mm_features=[MultiModalFeature("img", 10, 30)])  # [10, 40)
    assert generate_block_hash_extra_keys(req, 0, 16) == (("mm", "img", 10),)
    assert generate_block_hash_extra_keys(req, 16, 32) == (("mm", "img", -6),)
    assert generate_block_hash_extra_keys(req, 32, 48) == (("mm", "img", -22),)
    assert generate_block_hash_extra_keys(req, 48, 64) is None


def test_rule_10_mm_item_ending_at_a_block_boundary_is_not_in_the_next_block(ctx):
    """Rule 10: an item covering [8, 32) ends exactly where block 2 starts: block 2 has no mm key."""
    req = Request("r", list(range(48)), mm_features=[MultiModalFeature("img", 8, 24)])
    assert generate_block_hash_extra_keys(req, 16, 32) == (("mm", "img", -8),)
    assert generate_block_hash_extra_keys(req, 32, 48) is None


def test_rule_10_mm_item_starting_at_a_block_end_is_not_in_that_block(ctx):
    """Rule 10: only items overlapping [start, end): one starting at 16 is not in block [0, 16)."""
    req = Request("r", list(range(32)), mm_features=[MultiModalFeature("img", 16, 4)])
    assert generate_block_hash_extra_keys(req, 0, 16) is None
    assert generate_block_hash_extra_keys(req, 16, 32) == (("mm", "img", 0),)


def test_rule_10_multiple_mm_items_in_one_block(ctx):
    """Rule 10: every overlapping item gets its key, in offset order."""
    feats = [MultiModalFeature("b", 8, 4), MultiModalFeature("a", 2, 3), MultiModalFeature("c", 14, 6)]
    req = Request("r", list(range(32)), mm_features=feats)  # sorted by offset on the way in
    assert generate_block_hash_extra_keys(req, 0, 16) == (("mm", "a", 2), ("mm", "b", 8), ("mm", "c", 14))
    assert generate_block_hash_extra_keys(req, 16, 32) == (("mm", "c", -2),)


def test_rule_10_mm_identifier_changes_the_hash(ctx):
    """Rule 10: the same placeholder tokens with another image id hash differently."""
    hasher = get_request_block_hasher(BS, ctx)
    a = Request("a", [0] * 32, hasher, mm_features=[MultiModalFeature("img-1", 4, 8)])
    b = Request("b", [0] * 32, hasher, mm_features=[MultiModalFeature("img-2", 4, 8)])
    c = Request("c", [0] * 32, hasher, mm_features=[MultiModalFeature("img-1", 5, 8)])
    assert a.block_hashes[0] != b.block_hashes[0] and a.block_hashes[0] != c.block_hashes[0]


def test_rule_10_cache_salt_on_block_0_only(ctx):
    """Rule 10: ("cache_salt", salt) only when start == 0, so only the first block is salted."""
    hasher = get_request_block_hasher(BS, ctx)
    req = Request("r", list(range(48)), hasher, cache_salt="s1")
    assert generate_block_hash_extra_keys(req, 0, 16) == (("cache_salt", "s1"),)
    assert generate_block_hash_extra_keys(req, 16, 32) is None
    salt = {0: (("cache_salt", "s1"),)}
    assert req.block_hashes == chain(ctx, list(range(48)), extra=lambda s, e: salt.get(s))
    plain = Request("p", list(range(48)), hasher)
    assert all(x != y for x, y in zip(req.block_hashes, plain.block_hashes))  # the chain carries it


def test_rule_10_empty_salt_is_no_salt(ctx):
    """Rule 10: only a truthy salt is added."""
    req = Request("r", list(range(16)), cache_salt="")
    assert generate_block_hash_extra_keys(req, 0, 16) is None


def test_rule_10_extra_key_order_is_lora_mm_salt(ctx):
    """Rule 10: the order is fixed: LoRA, then multimodal, then cache_salt."""
    req = Request(
        "r",
        list(range(16)),
        lora_request=LoRARequest("l", 1, "p"),
        cache_salt="s",
        mm_features=[MultiModalFeature("img", 3, 2)],
    )
    assert generate_block_hash_extra_keys(req, 0, 16) == (("lora", "l", "p"), ("mm", "img", 3), ("cache_salt", "s"))


def test_rule_12_to_event_extra_keys_strips_tags():
    """Rule 12: mm -> (identifier, offset), any other key -> key[1]; the LoRA path is dropped."""
    keys = [(("lora", "l", "p"), ("mm", "img", -3), ("cache_salt", "s")), (("lora", "l", "p"),)]
    assert to_event_extra_keys(keys) == [("l", ("img", -3), "s"), ("l",)]


def test_rule_12_none_entries_stay_none():
    """Rule 12: None entries stay None, one entry per block: a plain request gives [None, None, ...]."""
    assert to_event_extra_keys([None, None, None]) == [None, None, None]
    assert to_event_extra_keys([None, (("cache_salt", "s"),)]) == [None, ("s",)]


def test_rule_12_empty_or_none_input_is_none():
    """Rule 12: an empty or None input gives None."""
    assert to_event_extra_keys([]) is None
    assert to_event_extra_keys(None) is None
