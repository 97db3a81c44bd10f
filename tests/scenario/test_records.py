"""A step's typed records (explorer/scenario/records.py): one ordered tuple in the order the core
reported them, selected by kind, written to JSON by one generic writer, and kept lean."""

from __future__ import annotations

import dataclasses
import json
import typing
from pathlib import Path

import pytest

from explorer.core.kv_cache_observer import GroupCall
from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario
from explorer.scenario.records import (
    RECORD_TYPES,
    AdmissionCheck,
    CacheCall,
    CachedBlock,
    DraftsVerified,
    EagleDropped,
    Freed,
    GroupLookup,
    HashedBlock,
    Lookup,
    Popped,
    Record,
    Retention,
    SkippedFreed,
    Touched,
    record_to_json,
)

LESSONS = Path(__file__).resolve().parents[2] / "lessons"
H1, H2 = bytes(range(32)), b"\xab" * 32

# One record of every kind, and the JSON the generic writer must give for it.
EXAMPLES: list[tuple[Record, dict[str, typing.Any]]] = [
    (
        HashedBlock(1, 16, 32, H1, (("lora", "ada", 1), ("cache_salt", "s"))),
        {"index": 1, "start": 16, "end": 32, "hash": H1.hex(), "extra_keys": [["lora", "ada", 1], ["cache_salt", "s"]]},
    ),
    (
        Lookup("A", 40, 2, ((0, True, 5), (1, False, None)), 16),
        {
            "request_id": "A",
            "num_tokens": 40,
            "cap_blocks": 2,
            "probes": [[0, True, 5], [1, False, None]],
            "hit_tokens": 16,
            "skipped": None,
        },
    ),
    (
        Lookup("B", 9, 0, (), 0, "prefix caching is off"),
        {
            "request_id": "B",
            "num_tokens": 9,
            "cap_blocks": 0,
            "probes": [],
            "hit_tokens": 0,
            "skipped": "prefix caching is off",
        },
    ),
    (EagleDropped("R", 3, 7), {"request_id": "R", "block_index": 3, "block_id": 7}),
    (
        AdmissionCheck("A", 24, 16, 40, 2, 1, 9, True, False, 3),
        {
            "request_id": "A",
            "num_new_tokens": 24,
            "num_computed_tokens": 16,
            "num_tokens_need_slot": 40,
            "num_new_blocks": 2,
            "num_evictable_hit_blocks": 1,
            "num_free_blocks": 9,
            "ok": True,
            "full_sequence": False,
            "num_lookahead_tokens": 3,
        },
    ),
    (Touched(4, True), {"block_id": 4, "from_free": True}),
    (Popped("A", 6, H2), {"request_id": "A", "block_id": 6, "evicted_hash": H2.hex()}),
    (Popped("A", 8, None), {"request_id": "A", "block_id": 8, "evicted_hash": None}),
    (CacheCall(1, 48, 2), {"group_id": 1, "num_tokens": 48, "num_cached_blocks": 2}),
    (
        CachedBlock(6, 2, H1, (3,), 1),
        {"block_id": 6, "index": 2, "hash": H1.hex(), "duplicate_of": [3], "group_id": 1},
    ),
    (Freed(6, 0, "back"), {"block_id": 6, "ref_cnt": 0, "to": "back"}),
    (SkippedFreed("A", 1, (9, 8)), {"request_id": "A", "group_id": 1, "block_ids": [9, 8]}),
    (
        Retention("A", 1, 2, (True, False), None, (64,)),
        {
            "request_id": "A",
            "group_id": 1,
            "start_block": 2,
            "mask": [True, False],
            "retention_interval": None,
            "boundaries": [64],
        },
    ),
    (
        DraftsVerified("R", 3, 1, False, 33),
        {"request_id": "R", "num_drafts": 3, "num_accepted": 1, "placeholders": False, "num_computed_tokens": 33},
    ),
    (
        GroupLookup("C", (128, 96), (GroupCall(1, (1,), "sliding_window", 64, 127, 96),), 2, 96, 128),
        {
            "request_id": "C",
            "group_hit_tokens": [128, 96],
            "calls": [
                {
                    "pass_index": 1,
                    "group_ids": [1],
                    "kind": "sliding_window",
                    "sliding_window": 64,
                    "max_length": 127,
                    "hit_tokens": 96,
                    "drop_eagle_block": False,
                }
            ],
            "num_passes": 2,
            "hit_tokens": 96,
            "shared_prefix_boundary": 128,
        },
    ),
]


def test_every_record_kind_is_in_the_union_and_has_an_example():
    assert set(RECORD_TYPES) == set(typing.get_args(Record))
    assert {type(r) for r, _ in EXAMPLES} == set(RECORD_TYPES)


@pytest.mark.parametrize("record,want", EXAMPLES, ids=[type(r).__name__ for r, _ in EXAMPLES])
def test_the_generic_writer_gives_the_fields_in_order_with_hashes_as_hex(record, want):
    out = record_to_json(record)
    assert out == {"type": type(record).__name__, **want}
    assert list(out) == ["type", *want]  # the dataclass's field order
    assert json.loads(json.dumps(out)) == out  # plain JSON: no bytes, tuples or objects left


@pytest.mark.parametrize("kind", RECORD_TYPES, ids=lambda k: k.__name__)
def test_every_record_is_frozen_and_slotted(kind):
    """A full-pool step holds thousands of records: none carries a per-instance dict."""
    record = next(r for r, _ in EXAMPLES if type(r) is kind)
    assert not hasattr(record, "__dict__")
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(record, dataclasses.fields(record)[0].name, None)


def test_an_admit_s_records_come_in_the_order_the_core_reported_them():
    """Lesson 17, admit B: EAGLE's drop comes with its lookup, then the admission check, the
    touched hits, the pops, cache_blocks and the blocks it cached."""
    step = replay(load_scenario(LESSONS / "17_speculative_decoding.toml")).steps[4]
    kinds = [type(r) for r in step.records]
    order = [EagleDropped, Lookup, AdmissionCheck, Touched, Popped, CacheCall, CachedBlock]
    assert [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] is not k] == order
    (drop,) = step.of(EagleDropped)
    assert drop.request_id == "B" and step.first(Lookup) is step.last(Lookup)
    assert all(p.request_id == "B" for p in step.of(Popped))
    assert step.of(DraftsVerified) == () and step.first(DraftsVerified) is None


def test_the_selectors_keep_report_order_and_the_last_lookup_wins():
    step = replay(load_scenario(LESSONS / "16_sliding_window.toml")).steps[1]  # admit A, two groups
    calls = step.of(CacheCall)
    assert [c.group_id for c in calls] == [0, 1]
    # every cached block names the group whose cache_blocks call it followed
    at = {id(r): i for i, r in enumerate(step.records)}
    for c in step.of(CachedBlock):
        call = max((x for x in calls if at[id(x)] < at[id(c)]), key=lambda x: at[id(x)])
        assert c.group_id == call.group_id
    assert step.last(Lookup) is step.of(Lookup)[-1]


def test_every_eagle_drop_names_the_request_of_the_lookup_it_came_with():
    """Each drop comes just before its lookup; a hybrid lookup's explanatory per-group walk
    reports none of its own (it would name no request)."""
    seen = 0
    for stem in ("17_speculative_decoding", "16_sliding_window"):
        trace = replay(load_scenario(LESSONS / f"{stem}.toml"))
        for step in trace.steps:
            records = step.records
            for i, r in enumerate(records):
                if isinstance(r, EagleDropped):
                    after = next(x for x in records[i + 1 :] if not isinstance(x, EagleDropped))
                    assert isinstance(after, Lookup), (stem, step.index)
                    assert r.request_id == step.op.id
                    seen += 1
    assert seen == 2


def test_a_lean_replay_records_nothing_and_its_json_is_the_same():
    sc = load_scenario(LESSONS / "04_touch_then_allocate.toml")
    lean, full = replay(sc, record=False), replay(sc)
    assert all(s.records == () for s in lean.steps)
    assert any(s.records for s in full.steps)
    assert lean.to_json() == full.to_json()
    assert all("records" not in s.to_json() for s in full.steps)


def test_each_lookup_holds_only_its_own_walk():
    """An engine step looks several requests up: each `Lookup` has its own probes, from block 0
    to the first miss or the cap (with one KV cache group: a window group walks backwards)."""
    golden = Path(__file__).resolve().parent / "golden"
    several = 0
    for path in [*sorted(LESSONS.glob("*.toml")), *sorted(golden.rglob("*.toml"))]:
        scenario = load_scenario(path)
        if scenario.groups is not None:
            continue
        for step in replay(scenario).steps:
            lookups = step.of(Lookup)
            several += len(lookups) > 1
            for lk in lookups:
                assert [i for i, _, _ in lk.probes] == list(range(len(lk.probes))), (path.name, step.index)
                assert all(hit for _, hit, _ in lk.probes[:-1]), (path.name, step.index)
                assert len(lk.probes) <= lk.cap_blocks, (path.name, step.index)
    assert several >= 5
