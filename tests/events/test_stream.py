"""The socket-free subscriber state machine: ordering, gaps, replays, restarts, multisets."""

from __future__ import annotations

from collections import Counter

import pytest

from explorer.events.stream import KVEventStream
from explorer.events.wire import decode_payload
from tests.events.helpers import cleared, live, removed, replay, replay_end, stored


def seqs(applied):
    return [a.seq for a in applied]


def only_instance(stream):
    (inst,) = stream.instances.values()
    return inst


def test_in_order_batches_apply_and_build_the_multiset():
    s = KVEventStream()
    out = []
    out += s.feed_live(live(0, [stored(1, 2, 3)]), now=0)
    out += s.feed_live(live(1, [stored(2, parent=1), stored(4, parent=3)]), now=0)
    out += s.feed_live(live(2, [removed(2)]), now=0)
    assert seqs(out) == [0, 1, 2]
    inst = only_instance(s)
    # the duplicate hash 2 was stored twice and removed once: one copy left
    assert inst.hashes == Counter({1: 1, 2: 1, 3: 1, 4: 1})
    assert inst.key == ("", 0)
    assert s.summary() == {"batches": 3, "gaps": 0, "replayed": 0, "lost": 0, "malformed": 0, "restarts": 0}


def test_removal_of_duplicate_then_clear():
    s = KVEventStream()
    s.feed_live(live(0, [stored(7), stored(7), stored(8, parent=7)]), now=0)
    inst = only_instance(s)
    assert inst.hashes[7] == 2
    s.feed_live(live(1, [removed(7)]), now=0)
    assert inst.hashes[7] == 1
    s.feed_live(live(2, [removed(7), removed(7)]), now=0)
    assert 7 not in inst.hashes and inst.unknown_removals == 1
    s.feed_live(live(3, [cleared()]), now=0)
    assert not inst.hashes and inst.num_blocks() == 0


def test_prefix_chains_follow_parents():
    s = KVEventStream()
    s.feed_live(live(0, [stored(10, 11, 12), stored(20, parent=10)]), now=0)
    chains = only_instance(s).prefixes()
    assert chains == [[10, 11, 12], [10, 20]]


def test_bytes_hashes_are_kept_as_bytes():
    s = KVEventStream()
    h1, h2 = bytes(range(32)), bytes(range(1, 33))
    s.feed_live(live(0, [stored(h1, h2)]), now=0)
    assert only_instance(s).hashes == Counter({h1: 1, h2: 1})


def test_gap_without_replay_is_lost():
    s = KVEventStream()
    out = s.feed_live(live(0, [stored(1)]), now=0)
    out += s.feed_live(live(3, [stored(2)]), now=0)
    assert seqs(out) == [0, 3]
    assert s.summary()["gaps"] == 2 and s.lost == 2 and s.replayed == 0
    assert s.next_replay_request(0) is None


def test_late_joiner_without_replay_starts_where_it_joins():
    s = KVEventStream()
    out = s.feed_live(live(5, [stored(1)]), now=0)
    assert seqs(out) == [5]
    assert s.summary() == {"batches": 1, "gaps": 0, "replayed": 0, "lost": 0, "malformed": 0, "restarts": 0}


def test_gap_recovered_by_replay_with_live_batches_buffered_meanwhile():
    s = KVEventStream(replay=True)
    assert seqs(s.feed_live(live(0, [stored(1)]), now=0)) == [0]
    assert s.feed_live(live(3, [stored(4)]), now=0) == []  # hole 1..2: held
    assert s.next_replay_request(now=0) == 1
    assert s.next_replay_request(now=0) is None  # one in flight
    assert s.feed_live(live(4, [stored(5)]), now=0) == []  # live during the replay: buffered
    out = s.feed_replay(replay(1, [stored(2)]), now=0)
    assert seqs(out) == [1]
    out = s.feed_replay(replay(2, [stored(3)]), now=0)
    assert seqs(out) == [2, 3, 4]
    # the ROUTER also sends what we already hold, then the end marker
    assert s.feed_replay(replay(3, [stored(4)]), now=0) == []
    assert s.feed_replay(replay(4, [stored(5)]), now=0) == []
    assert s.feed_replay(replay_end(), now=0) == []
    assert s.summary() == {"batches": 5, "gaps": 2, "replayed": 2, "lost": 0, "malformed": 0, "restarts": 0}
    assert only_instance(s).hashes == Counter({1: 1, 2: 1, 3: 1, 4: 1, 5: 1})


def test_replay_that_misses_some_counts_them_lost_and_applies_the_rest_in_order():
    s = KVEventStream(replay=True)
    s.feed_live(live(0, []), now=0)
    s.feed_live(live(4, []), now=0)
    assert s.next_replay_request(0) == 1
    out = s.feed_replay(replay(2, []), now=0)  # 1 was evicted
    assert out == []
    out = s.feed_replay(replay(3, []), now=0)
    out += s.feed_replay(replay_end(), now=0)
    assert seqs(out) == [2, 3, 4]
    assert s.summary()["gaps"] == 3 and s.replayed == 2 and s.lost == 1


def test_late_joiner_initial_replay_counts_as_replayed_not_gaps():
    s = KVEventStream(replay=True)
    assert s.feed_live(live(3, [stored(4)]), now=0) == []
    assert s.next_replay_request(0) == 0
    out = []
    for i in range(5):  # the publisher's buffer: 0..4
        out += s.feed_replay(replay(i, [stored(i + 1)]), now=0)
    out += s.feed_replay(replay_end(), now=0)
    out += s.feed_live(live(4, [stored(5)]), now=0)
    assert seqs(out) == [0, 1, 2, 3, 4]
    assert [a.replayed for a in out] == [True, True, True, False, False]
    assert s.summary() == {"batches": 5, "gaps": 0, "replayed": 3, "lost": 0, "malformed": 0, "restarts": 0}


def test_late_joiner_whose_start_was_evicted_is_not_a_loss():
    s = KVEventStream(replay=True)
    s.feed_live(live(10, []), now=0)
    s.next_replay_request(0)
    out = s.feed_replay(replay(8, []), now=0) + s.feed_replay(replay(9, []), now=0)
    out += s.feed_replay(replay_end(), now=0)
    assert seqs(out) == [8, 9, 10]
    inst = only_instance(s)
    assert s.lost == 0 and s.gaps == 0 and inst.unrecovered_initial == 8


def test_replay_timeout_gives_up_and_resets_the_socket():
    s = KVEventStream(replay=True, replay_timeout=1.0)
    s.feed_live(live(0, []), now=0)
    s.feed_live(live(2, []), now=0)
    assert s.next_replay_request(now=10) == 1
    assert s.replay_deadline == 11
    assert s.tick(now=10.5) == []
    out = s.tick(now=11.0)
    assert seqs(out) == [2]
    assert s.lost == 1 and s.replay_timeouts == 1 and s.reset_replay_socket


def test_restart_clears_the_instance():
    s = KVEventStream()
    s.feed_live(live(0, [stored(1)]), now=0)
    s.feed_live(live(1, [stored(2)]), now=0)
    out = s.feed_live(live(0, [stored(9)]), now=0)
    assert seqs(out) == [0]
    assert only_instance(s).hashes == Counter({9: 1})
    assert s.summary()["restarts"] == 1 and s.gaps == 0
    # and the new incarnation continues normally
    assert seqs(s.feed_live(live(1, []), now=0)) == [1]


def test_restart_with_replay_applies_pending_then_replays_the_new_incarnation():
    s = KVEventStream(replay=True)
    s.feed_live(live(0, [stored(1)]), now=0)
    s.feed_live(live(3, [stored(4)]), now=0)  # hole 1..2
    assert s.next_replay_request(0) == 1
    out = s.feed_live(live(2, [stored(50)]), now=0)  # fell back: a restart
    # the old incarnation's pending batch is applied before the clear; the hole is lost
    assert seqs(out) == [3]
    assert s.restarts == 1 and s.lost == 2 and s.reset_replay_socket
    inst = only_instance(s)
    assert not inst.hashes
    # the new incarnation's first seq is 2: a late-joiner replay from 0
    assert s.next_replay_request(0) == 0
    out = s.feed_replay(replay(0, [stored(30)]), now=0) + s.feed_replay(replay(1, [stored(40)]), now=0)
    assert seqs(out) == [0, 1, 2]
    assert inst.hashes == Counter({30: 1, 40: 1, 50: 1})


def test_equal_seq_is_a_restart():
    s = KVEventStream()
    s.feed_live(live(0, [stored(1)]), now=0)
    s.feed_live(live(0, [stored(2)]), now=0)
    assert s.restarts == 1 and only_instance(s).hashes == Counter({2: 1})


def test_instances_are_told_apart_by_topic_and_rank():
    s = KVEventStream()
    s.feed_live(live(0, [stored(1)], topic=b"a"), now=0)
    s.feed_live(live(0, [stored(2)], topic=b"b"), now=0)
    s.feed_live(live(0, [stored(3)], topic=b"a", rank=1), now=0)
    assert set(s.instances) == {("a", 0), ("b", 0), ("a", 1)}
    assert s.restarts == 0 and s.batches == 3


def test_topic_filter():
    s = KVEventStream("kv")
    assert s.feed_live(live(0, [], topic=b"other"), now=0) == []
    assert seqs(s.feed_live(live(0, [], topic=b"kv-1"), now=0)) == [0]
    assert s.filtered == 1 and s.malformed == 0


@pytest.mark.parametrize(
    "frames, reason",
    [
        ([b"", b"\0" * 8], "frame_count"),
        ([b"", b"\0" * 8, b"\x93\xcb" + b"\0" * 8 + b"\x90\x00", b"extra"], "frame_count"),
        ([], "frame_count"),
        ([b"", b"\0" * 7, b"\x93\x00\x90\x00"], "seq_size"),
        ([b"", b"\0" * 8, b"\x93\x00\x90"], "payload"),  # truncated
        ([b"", b"\0" * 8, b"\xc1"], "payload"),  # never-used msgpack byte
        ([b"", b"\0" * 8, b"\x92\xa1x\x90"], "payload"),  # ts is a string
        ([b"", b"\0" * 8, b"\x93\x00\x91\x81\xa4type\xa3Foo\x00"], "payload"),  # unknown event
        ([b"", b"\xff" * 8, b""], "seq_end"),
        ("not frames", "frame_type"),
        ([b"", 5, b""], "frame_type"),
    ],
)
def test_malformed_live_frames_are_counted_never_raised(frames, reason):
    s = KVEventStream()
    assert s.feed_live(frames, now=0) == []
    assert s.malformed == 1 and s.malformed_reasons[reason] == 1
    assert seqs(s.feed_live(live(0, [stored(1)]), now=0)) == [0]


def test_wrongly_typed_hashes_are_malformed():
    import msgspec

    bad = msgspec.msgpack.encode(
        [
            1.0,
            [
                {
                    "type": "BlockStored",
                    "block_hashes": [[1, 2]],
                    "parent_block_hash": None,
                    "token_ids": [],
                    "block_size": 4,
                    "lora_id": None,
                    "medium": None,
                    "lora_name": None,
                }
            ],
            0,
        ]
    )
    s = KVEventStream()
    assert s.feed_live([b"", b"\0" * 8, bad], now=0) == []
    assert s.malformed == 1
    with pytest.raises(ValueError):
        decode_payload(bad)


def test_oversize_payload_is_malformed_without_decoding():
    s = KVEventStream(max_payload=16)
    assert s.feed_live(live(0, [stored(*range(10))]), now=0) == []
    assert s.malformed_reasons["payload"] == 1


def test_malformed_replay_frames_are_counted():
    s = KVEventStream(replay=True)
    s.feed_live(live(0, []), now=0)
    s.feed_live(live(2, []), now=0)
    s.next_replay_request(0)
    assert s.feed_replay([b"x", b"", b"\0" * 8, b""], now=0) == []  # no delimiter
    assert s.feed_replay([b"", b"\0" * 8, b""], now=0) == []  # three frames
    assert s.feed_replay([b"", b"", b"\xff" * 8, b"junk"], now=0) == []  # bad end marker
    assert s.malformed == 3
    out = s.feed_replay(replay(1, []), now=0)
    assert seqs(out) == [1, 2]


def test_replayed_frames_with_no_replay_running_are_ignored():
    s = KVEventStream(replay=True)
    s.feed_live(live(0, []), now=0)
    assert s.feed_replay(replay(0, []), now=0) == []
    assert s.feed_replay(replay_end(), now=0) == []
    assert s.replay_ignored == 1 and s.replay_ends == 1 and s.malformed == 0


def test_flush_gives_up_open_holes():
    s = KVEventStream(replay=True)
    s.feed_live(live(0, []), now=0)
    s.feed_live(live(5, []), now=0)
    s.next_replay_request(0)
    out = s.flush()
    assert seqs(out) == [5] and s.lost == 4 and s.gaps == 4


def test_pending_overflow_gives_up_the_hole():
    s = KVEventStream(replay=True, max_pending=3)
    s.feed_live(live(0, []), now=0)
    out = []
    for i in range(2, 7):
        out += s.feed_live(live(i, []), now=0)
    # the fourth batch held behind the hole overflows: the hole (seq 1) is given up
    assert seqs(out) == [2, 3, 4, 5, 6] and s.lost == 1 and s.gaps == 1


def test_frame_accounting_adds_up():
    s = KVEventStream(replay=True)
    s.feed_live(live(0, []), now=0)
    s.feed_live([b""], now=0)
    s.feed_live(live(3, []), now=0)
    s.next_replay_request(0)
    s.feed_replay(replay(1, []), now=0)
    s.feed_replay(replay(1, []), now=0)
    s.feed_replay(replay_end(), now=0)
    acc = s.frame_accounting()
    assert acc["fed"] == 6
    assert acc["fed"] == sum(v for k, v in acc.items() if k != "fed")


# ---- sequence numbers checked against what a publisher can produce (issue 13) ----------------


def test_a_seq_near_2_63_is_one_malformed_frame_not_10_18_gaps():
    s = KVEventStream()
    s.feed_live(live(0, [stored(1)]), now=0)
    assert s.feed_live(live(2**63 - 5, [stored(2)]), now=0) == []
    s.feed_live(live(1, [stored(3)]), now=0)
    assert s.summary() == {"batches": 2, "gaps": 0, "replayed": 0, "lost": 0, "malformed": 1, "restarts": 0}
    assert s.malformed_reasons["seq_range"] == 1


def test_2_62_is_the_first_seq_refused():
    s = KVEventStream()
    assert seqs(s.feed_live(live(2**62 - 1, []), now=0)) == [2**62 - 1]
    assert s.feed_live(live(2**62, []), now=0) == [] and s.malformed == 1


def test_a_jump_past_the_replay_buffer_is_a_restart_not_gaps():
    s = KVEventStream(max_jump=100)
    s.feed_live(live(0, [stored(1)]), now=0)
    out = s.feed_live(live(10**18, [stored(2)]), now=0)
    assert seqs(out) == [10**18]
    inst = only_instance(s)
    assert s.summary() == {"batches": 2, "gaps": 0, "replayed": 0, "lost": 0, "malformed": 0, "restarts": 1}
    assert inst.seq_jumps == 1 and inst.hashes == Counter({2: 1})  # the old state is unknown: cleared
    assert seqs(s.feed_live(live(10**18 + 1, []), now=0)) == [10**18 + 1]


def test_a_jump_within_the_buffer_is_gaps():
    s = KVEventStream(max_jump=100)
    s.feed_live(live(0, []), now=0)
    s.feed_live(live(101, []), now=0)  # 100 missing: as far as a replay could reach
    assert s.gaps == 100 and s.restarts == 0 and s.lost == 100
    s.feed_live(live(203, []), now=0)  # 101 missing: a jump
    assert s.gaps == 100 and s.restarts == 1


def test_a_late_joiner_at_a_huge_seq_asks_only_for_the_buffer():
    s = KVEventStream(replay=True, max_jump=100)
    assert s.feed_live(live(2**61, []), now=0) == []
    assert s.next_replay_request(0) == 2**61 - 100
    out = s.feed_replay(replay(2**61 - 1, []), now=0) + s.feed_replay(replay_end(), now=0)
    assert seqs(out) == [2**61 - 1, 2**61]
    inst = only_instance(s)
    assert inst.unrecovered_initial == 99 and s.lost == 0 and s.gaps == 0


def test_counters_stay_bounded_under_random_garbage_seqs():
    import random

    rng = random.Random(13)
    s = KVEventStream(replay=False)
    n = 2000
    for _ in range(n):
        s.feed_live(live(rng.getrandbits(64), []), now=0)
    counts = s.summary()
    assert counts["malformed"] + counts["batches"] == n
    # every jump past the buffer restarts; gaps are at most the buffer per batch
    assert counts["gaps"] <= n * s.max_jump and counts["lost"] <= n * s.max_jump


def test_new_instances_past_the_cap_are_malformed_frames():
    s = KVEventStream(max_instances=3)
    for rank in range(5):
        s.feed_live(live(0, [stored(rank)], rank=rank), now=0)
    assert len(s.instances) == 3 and s.malformed == 2 and s.malformed_reasons["instances"] == 2
    assert seqs(s.feed_live(live(1, [], rank=2), now=0)) == [1]  # a known instance goes on


def test_hash_budget_is_shared_by_instances_and_given_back_on_removal_and_clear():
    """A publisher cannot grow the listener without end: at most ``max_hashes`` distinct
    hashes over all instances; the rest are counted as dropped, and room comes back when a
    hash's last copy is removed or the instance is cleared."""
    s = KVEventStream(max_hashes=3)
    s.feed_live(live(0, [stored(1, 2), stored(2, parent=1)], rank=0), now=0)  # 2 distinct, 3 copies
    s.feed_live(live(0, [stored(5, 6)], rank=1), now=0)  # one fits, one is dropped
    a, b = s.instances[("", 0)], s.instances[("", 1)]
    assert a.hashes == Counter({1: 1, 2: 2}) and b.hashes == Counter({5: 1})
    assert b.counters()["dropped_hashes"] == 1 and a.counters()["dropped_hashes"] == 0
    s.feed_live(live(1, [removed(2)], rank=0), now=0)  # one copy of 2 left: no room yet
    s.feed_live(live(1, [stored(7)], rank=1), now=0)
    assert 7 not in b.hashes and b.counters()["dropped_hashes"] == 2
    s.feed_live(live(2, [removed(2)], rank=0), now=0)  # last copy gone: room for one
    s.feed_live(live(2, [stored(7)], rank=1), now=0)
    assert b.hashes == Counter({5: 1, 7: 1})
    s.feed_live(live(3, [cleared()], rank=0), now=0)
    s.feed_live(live(3, [stored(8, 9)], rank=1), now=0)
    assert b.hashes == Counter({5: 1, 7: 1, 8: 1}) and s.hash_budget.left == 0
