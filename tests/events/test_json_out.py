"""`listen --json` prints every event the decoder accepts, as strict JSON (issue 13)."""

from __future__ import annotations

import datetime
import json
import math

import msgspec
import pytest

from explorer.core.events import KVEventBatch, to_json_value
from explorer.events.instance import AppliedBatch
from explorer.events.json_out import batch_line, dumps_strict
from explorer.events.wire import decode_payload
from tests.events.helpers import cleared, payload, removed, stored


def strict_loads(text: str):
    def refuse(name):
        raise AssertionError(f"{name} is not strict JSON")

    return json.loads(text, parse_constant=refuse)


def stored_map(extra_keys, ts=1.0):
    event = {
        "type": "BlockStored",
        "block_hashes": [1, b"\x02" * 32],
        "parent_block_hash": None,
        "token_ids": [1, 2, 3, 4],
        "block_size": 4,
        "lora_id": None,
        "medium": "GPU",
        "lora_name": None,
        "extra_keys": extra_keys,
    }
    return msgspec.msgpack.encode([ts, [event], 0])


def test_ordinary_batches_print_as_before():
    batch = decode_payload(payload([stored(1, 2), removed(b"\x01" * 32), cleared()]))
    a = AppliedBatch(("", 0), 7, batch)
    assert batch_line(a) == json.dumps(to_json_value(a.to_json()))


@pytest.mark.parametrize(
    "extra, expected",
    [
        ([[{b"k": 1}]], [[{"6b": 1}]]),  # a binary key: its hex
        ([[{(1, 2): 3}]], [[{"[1, 2]": 3}]]),  # an array key: its JSON text
        ([[{7: "x", None: 1, 1.5: 2}]], [[{"7": "x", "null": 1, "1.5": 2}]]),
        ([[msgspec.msgpack.Ext(5, b"xy")]], [[{"ext_type": 5, "data": "7879"}]]),
        ([[math.nan, math.inf, -math.inf, 0.5]], [[None, None, None, 0.5]]),
        ([[b"\x00\xff"]], [["00ff"]]),
        ([None, ["lora", 3]], [None, ["lora", 3]]),
    ],
)
def test_values_strict_json_has_no_form_for_get_one(extra, expected):
    batch = decode_payload(stored_map(extra))
    line = batch_line(AppliedBatch(("", 0), 0, batch))
    assert strict_loads(line)["events"][0]["extra_keys"] == expected


def test_a_msgpack_timestamp_prints_as_iso_text():
    when = datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    batch = decode_payload(stored_map([[when]]))
    line = batch_line(AppliedBatch(("", 0), 0, batch))
    assert strict_loads(line)["events"][0]["extra_keys"] == [["2024-01-02T03:04:05+00:00"]]


@pytest.mark.parametrize("ts", [math.nan, math.inf, -math.inf])
def test_a_non_finite_timestamp_is_null(ts):
    batch = decode_payload(payload([stored(1)], ts=ts))
    assert strict_loads(batch_line(AppliedBatch(("", 0), 0, batch)))["ts"] is None


def nested_payload(depth: int) -> bytes:
    """A BlockStored whose extra key is an array nested ``depth`` deep (built as bytes: an
    encoder would refuse the depth before the decoder does)."""
    marker = msgspec.msgpack.encode(0x7ABCDEF1)
    raw = stored_map([[0x7ABCDEF1]])
    return raw.replace(marker, b"\x91" * depth + b"\x01")


def test_the_deepest_value_the_decoder_accepts_is_written():
    lo, hi = 1, 1 << 16
    while hi - lo > 1:  # the deepest nesting the decoder accepts, here
        mid = (lo + hi) // 2
        try:
            decode_payload(nested_payload(mid))
            lo = mid
        except ValueError:
            hi = mid
    assert 100 < lo < 1 << 16
    batch = decode_payload(nested_payload(lo))
    line = batch_line(AppliedBatch(("", 0), 0, batch))
    assert line.count("[") == line.count("]") > lo
    assert "[1]" + "]" * lo in line


def test_dumps_strict_matches_json_for_plain_values():
    value = {"a": [1, 2.5, "é\n", None, True, False, {"b": []}], "c": -(2**64)}
    assert dumps_strict(value) == json.dumps(value)


def test_batch_with_no_events():
    a = AppliedBatch(("", None), 0, KVEventBatch(0.0, [], None))
    assert strict_loads(batch_line(a)) == {"seq": 0, "ts": 0.0, "events": [], "data_parallel_rank": None}
