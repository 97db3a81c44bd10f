"""Fuzzing the subscriber's decoder and state machine (hypothesis): it never raises, every bad
frame is counted exactly once, and a stream with drops, replays and restarts rebuilds the
publisher's multiset of block hashes."""

from __future__ import annotations

import struct
from collections import Counter

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from explorer.core.events import KVEventBatch, encode_batch
from explorer.events.stream import KVEventStream
from explorer.events.wire import END_SEQ
from tests.events.helpers import cleared, live, removed, replay, replay_end, stored

FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

hashes = st.one_of(st.integers(0, 2**64 - 1), st.binary(min_size=32, max_size=32))
events = st.one_of(
    st.builds(lambda hs: stored(*hs), st.lists(hashes, min_size=1, max_size=4)),
    st.builds(lambda hs: removed(*hs), st.lists(hashes, min_size=1, max_size=3)),
    st.just(cleared()),
)
good_payloads = st.builds(
    lambda evs, ts: encode_batch(KVEventBatch(ts, evs, 0)), st.lists(events, max_size=4), st.floats(0, 1e10)
)
SEQ0 = (0).to_bytes(8, "big")


def counted_bad(stream, feed, frames):
    before = stream.malformed
    assert feed(frames, now=0) == []
    assert stream.malformed == before + 1, frames


# ---- arbitrary input: no crash, accounting adds up ----------------------------------------------


@FUZZ
@given(st.lists(st.tuples(st.booleans(), st.lists(st.binary(max_size=64), max_size=6)), max_size=40))
def test_arbitrary_frames_never_raise_and_are_all_accounted(messages):
    s = KVEventStream(replay=True)
    for to_replay, frames in messages:
        (s.feed_replay if to_replay else s.feed_live)(frames, now=0)
        if s.next_replay_request(now=0) is not None:
            pass
    s.tick(now=1e9)
    s.flush()
    acc = s.frame_accounting()
    assert acc["fed"] == len(messages)
    assert acc["fed"] == sum(v for k, v in acc.items() if k != "fed")


@FUZZ
@given(st.binary(max_size=256))
def test_random_payload_bytes_never_raise(payload):
    s = KVEventStream()
    s.feed_live([b"", SEQ0, payload], now=0)
    assert s.malformed + s.batches == 1


msgpack_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**64 - 1),
        st.floats(),
        st.text(max_size=8),
        st.binary(max_size=8),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=20,
)


@FUZZ
@given(msgpack_values)
def test_random_msgpack_documents_never_raise(value):
    s = KVEventStream()
    s.feed_live([b"", SEQ0, msgspec.msgpack.encode(value)], now=0)
    assert s.malformed + s.batches == 1


# ---- known-bad frames: each one counted ------------------------------------------------------------


@FUZZ
@given(good_payloads, st.integers(0, 6).filter(lambda n: n != 3), st.data())
def test_wrong_live_frame_counts_are_counted(payload, n, data):
    s = KVEventStream()
    frames = ([b"", SEQ0, payload] + [data.draw(st.binary(max_size=8)) for _ in range(n)])[:n]
    counted_bad(s, s.feed_live, frames)


@FUZZ
@given(good_payloads, st.integers(0, 7).filter(lambda n: n != 4), st.data())
def test_wrong_replay_frame_counts_are_counted(payload, n, data):
    s = KVEventStream(replay=True)
    frames = ([b"", b"", SEQ0, payload] + [data.draw(st.binary(max_size=8)) for _ in range(n)])[:n]
    counted_bad(s, s.feed_replay, frames)


@FUZZ
@given(good_payloads, st.binary(max_size=16).filter(lambda b: len(b) != 8))
def test_bad_sequence_frames_are_counted(payload, seq):
    s = KVEventStream()
    counted_bad(s, s.feed_live, [b"", seq, payload])


@FUZZ
@given(good_payloads, st.data())
def test_truncated_payloads_are_counted(payload, data):
    cut = data.draw(st.integers(0, len(payload) - 1))
    s = KVEventStream()
    counted_bad(s, s.feed_live, [b"", SEQ0, payload[:cut]])


@FUZZ
@given(good_payloads, st.binary(min_size=1, max_size=16))
def test_trailing_bytes_are_counted(payload, tail):
    s = KVEventStream()
    counted_bad(s, s.feed_live, [b"", SEQ0, payload + tail])


@FUZZ
@given(
    st.sampled_from([b"\xdd", b"\xdf", b"\xc6", b"\xdb", b"\xc9\x00"]),
    st.integers(2**20, 2**32 - 1),
    st.binary(max_size=32),
)
def test_absurd_length_headers_are_counted(header, length, rest):
    # array32 / map32 / bin32 / str32 / ext32 claiming up to 4 GiB with a few bytes behind
    payload = b"\x93\x00" + header + struct.pack(">I", length) + rest
    s = KVEventStream()
    counted_bad(s, s.feed_live, [b"", SEQ0, payload])


@FUZZ
@given(st.integers(1, 20000))
def test_deep_nesting_is_counted(depth):
    s = KVEventStream()
    counted_bad(s, s.feed_live, [b"", SEQ0, b"\x93\x00" + b"\x91" * depth + b"\x90\x00"])


ints = st.integers(-(2**63), 2**64 - 1)  # what msgpack can carry


def _stored_map(**over):
    m = {
        "type": "BlockStored",
        "block_hashes": [1],
        "parent_block_hash": None,
        "token_ids": [1, 2],
        "block_size": 2,
        "lora_id": None,
        "medium": "GPU",
        "lora_name": None,
    }
    m.update(over)
    return {k: v for k, v in m.items() if v is not ...}


wrong_fields = st.one_of(
    st.builds(
        lambda v: _stored_map(block_hashes=v),
        st.one_of(
            ints,
            st.text(),
            st.lists(st.one_of(st.floats(), st.text(), st.none(), st.lists(ints)), min_size=1, max_size=3),
        ),
    ),
    st.builds(lambda v: _stored_map(parent_block_hash=v), st.one_of(st.floats(), st.text(), st.lists(ints))),
    st.builds(lambda v: _stored_map(block_size=v), st.one_of(st.floats(), st.text(), st.none(), st.booleans())),
    st.builds(lambda v: _stored_map(token_ids=v), st.one_of(st.text(), st.lists(st.text(), min_size=1))),
    st.builds(
        lambda k: _stored_map(**{k: ...}),
        st.sampled_from(
            ["block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name"]
        ),
    ),
    st.builds(
        lambda t: {"type": t, "block_hashes": [1], "medium": None},
        st.one_of(
            st.text(max_size=10).filter(lambda t: t not in ("BlockStored", "BlockRemoved", "AllBlocksCleared")),
            ints,
            st.none(),
            st.lists(ints, max_size=2),
        ),
    ),
    st.builds(
        lambda v: {"type": "BlockRemoved", "block_hashes": v, "medium": None},
        st.one_of(st.none(), st.text(), st.lists(st.floats(), min_size=1)),
    ),
    st.builds(
        lambda v: {"type": "BlockRemoved", "block_hashes": [1], "medium": v},
        st.one_of(ints, st.lists(st.text(), min_size=1)),
    ),
    st.one_of(ints, st.text(), st.lists(ints, max_size=2), st.none()),  # not a map
)


@FUZZ
@given(st.lists(wrong_fields, min_size=1, max_size=3), st.data())
def test_wrongly_typed_events_are_counted(bad_events, data):
    good = [_stored_map()]
    evs = data.draw(st.permutations(good + bad_events))
    payload = msgspec.msgpack.encode([1.0, evs, 0])
    s = KVEventStream()
    counted_bad(s, s.feed_live, [b"", SEQ0, payload])


@FUZZ
@given(
    st.one_of(
        st.text(),
        st.lists(ints, max_size=2),
        st.none(),
        st.booleans(),
        st.dictionaries(st.text(max_size=3), ints, max_size=2),
    ),
    st.sampled_from(["ts", "events", "rank", "short"]),
)
def test_wrongly_shaped_batches_are_counted(value, where):
    batch = {
        "ts": [value, [], 0],
        "events": [1.0, value if not isinstance(value, list) else {"x": 1}, 0],
        "rank": [1.0, [], value if value is not None else "x"],
        "short": [value],
    }[where]
    s = KVEventStream()
    counted_bad(s, s.feed_live, [b"", SEQ0, msgspec.msgpack.encode(batch)])


def test_oversize_payload_is_counted():
    s = KVEventStream(max_payload=1 << 10)
    counted_bad(s, s.feed_live, [b"", SEQ0, encode_batch(KVEventBatch(1.0, [stored(*range(200))], 0))])


@FUZZ
@given(
    st.lists(
        st.one_of(
            good_payloads.map(lambda p: ("good", p)),
            st.binary(max_size=40).map(lambda b: ("junk", b"\xc1" + b)),
            st.integers(0, 5).filter(lambda n: n != 3).map(lambda n: ("count", n)),
        ),
        max_size=30,
    )
)
def test_mixed_streams_count_each_bad_frame_once_and_apply_the_good(items):
    s = KVEventStream()
    good = bad = 0
    for seq, (kind, x) in enumerate(items):
        if kind == "good":
            s.feed_live([b"", seq.to_bytes(8, "big"), x], now=0)
            good += 1
        elif kind == "junk":  # 0xc1 is never valid msgpack
            s.feed_live([b"", seq.to_bytes(8, "big"), x], now=0)
            bad += 1
        else:
            s.feed_live([b""] * x, now=0)
            bad += 1
    assert s.malformed == bad and s.batches == good


# ---- a simulated publisher with drops, replays, evictions and restarts ----------------------------


ops = st.lists(
    st.one_of(
        st.tuples(st.just("publish"), events.map(lambda e: [e]), st.booleans()),  # delivered live?
        st.tuples(st.just("serve"), st.booleans(), st.booleans()),  # answer replay; lose the answer?
        st.tuples(st.just("restart"), st.none(), st.none()),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(ops, st.integers(1, 8), st.booleans())
def test_stream_model_rebuilds_the_multiset(schedule, buffer_steps, replay_on):
    s = KVEventStream(replay=replay_on, replay_timeout=1.0)
    now = 0.0
    inc, seq, buffer, incarnation = 0, 0, [], []  # the publisher
    applied = []
    request = None
    # A restarted publisher whose first frames were not seen live answers a replay with its new
    # batches under the old sequence numbers: no subscriber can tell them from the lost old
    # ones, so the order across incarnations is only checked when that did not happen.
    restart_unseen = ambiguous = False
    for op, a, b in schedule:
        now += 0.1
        if op == "publish":
            restart_unseen = restart_unseen and not b
            # ts carries (incarnation, index) so the test can tell the batches apart
            payload = encode_batch(KVEventBatch(float(inc * 10_000 + seq), a, 0))
            incarnation.append(a)
            buffer = (buffer + [(seq, payload)])[-buffer_steps:]
            if b:
                applied += s.feed_live([b"", seq.to_bytes(8, "big"), payload], now=now)
            seq += 1
        elif op == "serve":
            if request is None:
                request = s.next_replay_request(now)
            if request is not None and not b:
                ambiguous = ambiguous or restart_unseen
                for q, p in buffer:
                    if q >= request:
                        applied += s.feed_replay([b"", b"", q.to_bytes(8, "big"), p], now=now)
                applied += s.feed_replay([b"", b"", END_SEQ, b""], now=now)
                request = None
            elif request is not None:  # the answer is lost: the subscriber times out
                now += 2.0
                applied += s.tick(now)
                request = None
        else:
            inc, seq, buffer, incarnation = inc + 1, 0, [], []
            restart_unseen = True
        if s.reset_replay_socket and not s.replay_in_flight:
            s.reset_replay_socket = False
            request = None
    applied += s.flush()
    assert s.malformed == 0
    tags = [(int(x.batch.ts) // 10_000, int(x.batch.ts) % 10_000) for x in applied]
    assert all(x.seq == t[1] for x, t in zip(applied, tags))  # the seq is the publisher's
    # within an incarnation, batches are applied once each, in sequence order
    for i in range(inc + 1):
        mine = [q for j, q in tags if j == i]
        assert mine == sorted(set(mine))
    # incarnations never interleave (unless a replay could not tell them apart, see above)
    order = [j for j, _ in tags]
    assert ambiguous or order == sorted(order)
    # every gap is recovered or lost
    assert s.gaps <= s.replayed + s.lost
    # when the last incarnation was applied whole, the multiset is exactly the publisher's
    last = [q for j, q in tags if j == inc]
    if incarnation and last == list(range(len(incarnation))):
        ref = Counter()
        for evs in incarnation:
            for e in evs:
                if type(e).__name__ == "BlockStored":
                    ref.update(e.block_hashes)
                elif type(e).__name__ == "BlockRemoved":
                    for h in e.block_hashes:
                        if ref[h] > 0:
                            ref[h] -= 1
                else:
                    ref.clear()
        (inst,) = s.instances.values()
        assert inst.hashes == +ref


@FUZZ
@given(st.lists(st.integers(0, 30), min_size=1, max_size=40))
def test_replayed_frames_in_any_order_never_break_order(seqs):
    s = KVEventStream(replay=True)
    out = s.feed_live(live(0, []), now=0)
    out += s.feed_live(live(31, []), now=0)
    assert s.next_replay_request(now=0) == 1
    for q in seqs:
        out += s.feed_replay(replay(q, [stored(q)]), now=0)
    out += s.feed_replay(replay_end(), now=0)
    got = [a.seq for a in out]
    assert got == sorted(set(got)) and got[0] == 0 and got[-1] == 31
    assert s.lost == 30 - len(set(seqs) - {0})
    assert s.replayed == len(set(seqs) - {0})
