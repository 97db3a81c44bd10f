"""KV events on the wire: spec rule 42 (and the event fields of rules 12, 21, 36)."""

from __future__ import annotations

import msgspec
import pytest

from explorer.core.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
    encode_batch,
    event_to_map,
)
from explorer.events.wire import decode_payload
from tests.core.helpers import Sched


# The wire schema of rule 42, declared as msgspec structs, to decode our bytes the way a vLLM
# subscriber does and to encode the same events the way vLLM's publisher does.
class WireEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    pass


class WireBlockStored(WireEvent, tag="BlockStored"):
    block_hashes: list[int | bytes]
    parent_block_hash: int | bytes | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[list | None] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None


class WireBlockRemoved(WireEvent, tag="BlockRemoved"):
    block_hashes: list[int | bytes]
    medium: str | None
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None


class WireAllBlocksCleared(WireEvent, tag="AllBlocksCleared"):
    pass


class WireBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[WireBlockStored | WireBlockRemoved | WireAllBlocksCleared]
    data_parallel_rank: int | None = None


def test_rule_42_all_blocks_cleared_batch_wire_bytes():
    """Rule 42 [verified]: KVEventBatch(ts=1.5, events=[AllBlocksCleared()], data_parallel_rank=0)
    encodes as 93 cb3ff8000000000000 91 81 a4"type" b0"AllBlocksCleared" 00."""
    wire = encode_batch(KVEventBatch(1.5, [AllBlocksCleared()], 0))
    expect = bytes.fromhex("93cb3ff80000000000009181") + b"\xa4type" + b"\xb0AllBlocksCleared" + b"\x00"
    assert wire == expect
    assert wire.hex().startswith("93cb3ff8")
    assert msgspec.msgpack.decode(wire) == [1.5, [{"type": "AllBlocksCleared"}], 0]


def test_rule_42_none_rank_is_still_a_3_element_array():
    """Rule 42: with data_parallel_rank=None the batch is still 3 elements, ending in nil; ts is float64."""
    wire = encode_batch(KVEventBatch(2, [AllBlocksCleared()]))
    assert wire[0] == 0x93 and wire[1] == 0xCB and wire[-1] == 0xC0
    assert wire == msgspec.msgpack.encode(WireBatch(2.0, [WireAllBlocksCleared()], None))


def test_rule_42_block_stored_map_key_order_and_omitted_defaults():
    """Rule 42: an event is a map led by "type"; BlockStored's fields without defaults are always
    written (even None) in declaration order; fields at their default are left out."""
    ev = BlockStored([1, 2], None, [0] * 32, 16, None, "GPU", None, group_idx=0)
    m = event_to_map(ev)
    assert list(m) == [
        "type",
        "block_hashes",
        "parent_block_hash",
        "token_ids",
        "block_size",
        "lora_id",
        "medium",
        "lora_name",
        "group_idx",
    ]
    assert m["type"] == "BlockStored" and m["parent_block_hash"] is None and m["lora_id"] is None
    full = BlockStored([1], 9, [0] * 16, 16, 3, "GPU", "l", [("l",)], 0, "full_attention", None, None, None, "sess")
    assert list(event_to_map(full))[-4:] == ["extra_keys", "group_idx", "kv_cache_spec_kind", "session_id"]
    removed = event_to_map(BlockRemoved([7], "GPU"))
    assert list(removed) == ["type", "block_hashes", "medium"]


def test_rule_42_bytes_equal_msgspec_structs_bytes():
    """Rule 42: our encoder writes the same bytes as msgspec encoding vLLM's struct layout."""
    ours = KVEventBatch(
        3.25,
        [
            BlockStored(
                [1, 2**64 - 1], 5, [1, 2, 3], 16, 1, "GPU", "l", [("l", ("img", -2)), None], 0, "full_attention"
            ),
            BlockRemoved([2**63], "GPU", 0),
            AllBlocksCleared(),
        ],
        1,
    )
    theirs = WireBatch(
        3.25,
        [
            WireBlockStored(
                [1, 2**64 - 1], 5, [1, 2, 3], 16, 1, "GPU", "l", [["l", ["img", -2]], None], 0, "full_attention"
            ),
            WireBlockRemoved([2**63], "GPU", 0),
            WireAllBlocksCleared(),
        ],
        1,
    )
    assert encode_batch(ours) == msgspec.msgpack.encode(theirs)


def test_rule_42_encode_then_msgspec_decode_round_trip():
    """Rule 42: the engine's real events, encoded, decode with msgspec into the wire schema with every
    field intact (tuples in extra_keys come back as arrays)."""
    from explorer.core.request import LoRARequest, MultiModalFeature

    s = Sched(4)
    r = s.request(
        "r",
        list(range(40)),
        lora_request=LoRARequest("l", 2, "p"),
        cache_salt="s",
        mm_features=[MultiModalFeature("img", 10, 10)],
    )
    s.admit(r)
    s.finish(r)
    s.admit(s.request("x", list(range(100, 148))))
    events = s.mgr.take_events()
    assert [type(e).__name__ for e in events] == ["BlockStored", "BlockRemoved", "BlockRemoved", "BlockStored"]
    wire = encode_batch(KVEventBatch(10.0, events, 0))
    batch = msgspec.msgpack.Decoder(type=WireBatch).decode(wire)
    assert batch.ts == 10.0 and batch.data_parallel_rank == 0
    first = batch.events[0]
    assert isinstance(first, WireBlockStored)
    assert first.block_hashes == events[0].block_hashes and first.token_ids == list(range(32))
    assert first.lora_id == 2 and first.lora_name == "l" and first.medium == "GPU"
    assert first.extra_keys == [["l", ["img", 10], "s"], ["l", ["img", -6]]]
    assert first.group_idx == 0 and first.kv_cache_spec_kind == "full_attention"
    assert isinstance(batch.events[1], WireBlockRemoved) and batch.events[1].block_hashes == events[1].block_hashes
    # and the subscriber's decoder reads it back to equal events (extra_keys as lists)
    back = decode_payload(wire)
    assert back.ts == 10.0 and back.data_parallel_rank == 0
    assert [type(e) for e in back.events] == [type(e) for e in events]
    assert back.events[1] == events[1]
    assert back.events[0].block_hashes == events[0].block_hashes


def test_rule_42_plain_request_extra_keys_are_a_list_of_none():
    """Rule 42 with rule 12 [verified]: a plain request's BlockStored.extra_keys is [None, None, ...]
    and is written on the wire (it is not the default None)."""
    s = Sched(8)
    s.admit(s.request("r", list(range(48))))
    (ev,) = s.mgr.take_events()
    assert ev.extra_keys == [None, None, None]
    assert msgspec.msgpack.decode(encode_batch(KVEventBatch(0.0, [ev])))[1][0]["extra_keys"] == [None, None, None]


def test_rule_42_decode_rejects_malformed_payloads():
    """Rule 42: the subscriber's decoder refuses bytes that are not a batch, with ValueError."""
    for bad in (
        b"\xc1",
        msgspec.msgpack.encode({"a": 1}),
        msgspec.msgpack.encode(["x", []]),
        msgspec.msgpack.encode([1.0, [{"type": "Nope"}]]),
    ):
        with pytest.raises(ValueError):
            decode_payload(bad)
