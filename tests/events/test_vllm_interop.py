"""Interoperability with vLLM 0.31.0's own KV event code, on 127.0.0.1.

(a) vLLM's ZmqEventPublisher publishes to our subscriber: in order, through gaps (recovered
    from vLLM's replay ROUTER), a late joiner catching up by replay, a restart, a DP rank.
(b) our publisher's frames and payloads decoded by vLLM's own msgspec classes
    (``msgspec.msgpack.Decoder(type=KVEventBatch)``), and re-encoded by vLLM to the same bytes.

vLLM runs in a ``.venv-vllm`` subprocess (``vllm_helper.py``); a missing venv fails these tests.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from explorer.core.events import KVEventBatch, encode_batch
from explorer.events.endpoints import is_bind_endpoint, offset_endpoint_port
from explorer.events.publisher import KVEventPublisher
from explorer.events.subscriber import KVEventSubscriber
from tests.events.helpers import LOOPBACK, DroppingProxy, free_port, scenario_file
from tests.events.vllm_side import VllmHelper, VllmHelperError, all_fields

pytestmark = pytest.mark.conformance

ANY = f"tcp://{LOOPBACK}:0"
H32 = bytes(range(32))


@pytest.fixture(scope="module")
def vllm():
    helper = VllmHelper()
    try:
        yield helper
    finally:
        helper.close()


def batches(base: int):
    """Batches of every event type and field shape, as [ts, [event maps]] for the helper."""
    return [
        [
            1.25,
            [
                {
                    "type": "BlockStored",
                    "block_hashes": [base + 1, base + 2],
                    "parent_block_hash": None,
                    "token_ids": list(range(8)),
                    "block_size": 4,
                    "lora_id": None,
                    "medium": "GPU",
                    "lora_name": None,
                    "extra_keys": [None, None],
                    "kv_cache_spec_kind": "full_attention",
                }
            ],
        ],
        [
            1.5,
            [
                {
                    "type": "BlockStored",
                    "block_hashes": [base + 3, "hex:" + H32.hex()],
                    "parent_block_hash": base + 2,
                    "token_ids": list(range(8, 16)),
                    "block_size": 4,
                    "lora_id": 1,
                    "medium": "GPU",
                    "lora_name": "adapter",
                    "extra_keys": [["img", 3], None],
                    "group_idx": 0,
                }
            ],
        ],
        [1.75, [{"type": "BlockRemoved", "block_hashes": [base + 1], "medium": "GPU"}]],
        [
            2.0,
            [
                {
                    "type": "BlockStored",
                    "block_hashes": [base + 2],
                    "parent_block_hash": None,
                    "token_ids": [0, 1, 2, 3],
                    "block_size": 4,
                    "lora_id": None,
                    "medium": "CPU",
                    "lora_name": None,
                }
            ],
        ],
        [
            2.25,
            [
                {"type": "AllBlocksCleared"},
                {
                    "type": "BlockStored",
                    "block_hashes": [base + 9],
                    "parent_block_hash": None,
                    "token_ids": [9, 9, 9, 9],
                    "block_size": 4,
                    "lora_id": None,
                    "medium": "GPU",
                    "lora_name": None,
                },
            ],
        ],
        [
            2.5,
            [
                {
                    "type": "BlockStored",
                    "block_hashes": [base + 9, base + 10],
                    "parent_block_hash": None,
                    "token_ids": list(range(8)),
                    "block_size": 4,
                    "lora_id": None,
                    "medium": "GPU",
                    "lora_name": None,
                }
            ],
        ],
    ]


def expected_fields(sent):
    """The helper's full-field form of the maps we sent (defaults filled in as vLLM does)."""
    defaults = {
        "BlockStored": dict(
            extra_keys=None,
            group_idx=None,
            kv_cache_spec_kind=None,
            kv_cache_spec_sliding_window=None,
            locality=None,
            ownership=None,
            session_id=None,
        ),
        "BlockRemoved": dict(group_idx=None, locality=None, ownership=None),
        "AllBlocksCleared": {},
    }
    return [[{**defaults[e["type"]], **e} for e in evs] for _, evs in sent]


def multiset_after(sent, upto=None):
    c = Counter()
    for _, evs in sent[:upto]:
        for e in evs:
            hs = [bytes.fromhex(h[4:]) if isinstance(h, str) else h for h in e.get("block_hashes", [])]
            if e["type"] == "BlockStored":
                c.update(hs)
            elif e["type"] == "BlockRemoved":
                c.subtract(hs)
            else:
                c.clear()
    return +c


def pump(sub, until, timeout=10.0, proxy=None):
    out = []
    end = time.monotonic() + timeout
    while time.monotonic() < end and not until(out):
        if proxy is not None:
            proxy.pump()
        out += sub.poll(0.02)
    return out


def settle(sub, seconds, proxy=None):
    return pump(sub, lambda o: False, timeout=seconds, proxy=proxy)


def wait_connected(sub, timeout=20.0):
    """Until vLLM's PUB finished its handshake with our SUB (then the subscription is sent)."""
    out = pump(sub, lambda o: sub.connection in ("publisher connected", "connected"), timeout=timeout)
    assert sub.connection in ("publisher connected", "connected"), sub.connection
    return out + settle(sub, 0.2)


def check_applied(applied, sent, first_seq=0):
    assert [a.seq for a in applied] == list(range(first_seq, first_seq + len(sent)))
    got = [[all_fields(e) for e in a.batch.events] for a in applied]
    want = expected_fields(sent)
    assert got == [[{k: e[k] for k in g} for g, e in zip(gs, es)] for gs, es in zip(got, want)]
    assert [[{k: g[k] for k in e} for g, e in zip(gs, es)] for gs, es in zip(got, want)] == want
    assert [a.batch.ts for a in applied] == [ts for ts, _ in sent]


# ---- (a) vLLM publishes, we subscribe ---------------------------------------------------------


def test_vllm_publisher_to_our_subscriber(vllm):
    rport = free_port()
    with KVEventSubscriber(ANY, bind=True, topic="kv", monitor=True) as sub:
        # vLLM connects a tcp://127.0.0.1 endpoint (its bind-or-connect rule) to our bound SUB
        cfg = vllm.call(
            "publisher", name="a", endpoint=sub.bound_endpoint, replay_endpoint=f"tcp://{LOOPBACK}:{rport}", topic="kv"
        )
        assert cfg["endpoint"] == sub.bound_endpoint
        wait_connected(sub)
        sent = batches(100)
        assert vllm.call("publish", name="a", batches=sent)["unsent"] == 0
        applied = pump(sub, lambda o: len(o) >= len(sent))
        vllm.call("shutdown", name="a")
        check_applied(applied, sent)
        s = sub.stream
        assert s.malformed == 0 and s.lost == 0 and s.restarts == 0
        (inst,) = s.instances.values()
        assert inst.key == ("kv", 0)
        assert inst.hashes == multiset_after(sent) == Counter({109: 2, 110: 1})


def test_late_joiner_recovers_the_first_batches_from_vllms_replay(vllm):
    port, rport = free_port(), free_port()
    sent = batches(200)
    vllm.call(
        "publisher", name="late", endpoint=f"tcp://{LOOPBACK}:{port}", replay_endpoint=f"tcp://{LOOPBACK}:{rport}"
    )
    try:
        # nobody subscribes yet: vLLM's PUB drops these three
        assert vllm.call("publish", name="late", batches=sent[:3])["unsent"] == 0
        with KVEventSubscriber(f"tcp://{LOOPBACK}:{port}", f"tcp://{LOOPBACK}:{rport}", bind=True, monitor=True) as sub:
            assert wait_connected(sub) == []
            vllm.call("publish", name="late", batches=sent[3:])
            applied = pump(sub, lambda o: len(o) >= len(sent))
            check_applied(applied, sent)
            assert [a.replayed for a in applied] == [True] * 3 + [False] * 3
            assert sub.stream.summary() == {
                "batches": 6,
                "gaps": 0,
                "replayed": 3,
                "lost": 0,
                "malformed": 0,
                "restarts": 0,
            }
            (inst,) = sub.stream.instances.values()
            assert inst.hashes == multiset_after(sent)
    finally:
        vllm.call("shutdown", name="late")


def test_gaps_recovered_from_vllms_replay_router(vllm):
    rport = free_port()
    proxy = DroppingProxy(drop={2, 3, 5})
    try:
        with KVEventSubscriber(proxy.outbound, f"tcp://{LOOPBACK}:{rport}") as sub:
            vllm.call("publisher", name="gap", endpoint=proxy.inbound, replay_endpoint=f"tcp://{LOOPBACK}:{rport}")
            try:
                # warm up through the proxy until a batch arrives and any catch-up replay is over
                warm = []
                end = time.monotonic() + 30
                while not warm and time.monotonic() < end:
                    vllm.call("publish", name="gap", batches=[[0.5, [{"type": "AllBlocksCleared"}]]])
                    warm = pump(sub, lambda o: bool(o), timeout=0.3, proxy=proxy)
                warm += pump(
                    sub, lambda o: not sub.stream.pending and not sub.stream.replay_in_flight, timeout=10, proxy=proxy
                )
                assert warm and not sub.stream.pending
                w = warm[-1].seq + 1
                before = sub.stream.summary()
                proxy.drop = {w + 2, w + 3, w + 5}
                sent = batches(300) + batches(400)
                vllm.call("publish", name="gap", batches=sent)
                applied = pump(sub, lambda o: len(o) >= len(sent), proxy=proxy)
            finally:
                vllm.call("shutdown", name="gap")
        check_applied(applied, sent, first_seq=w)
        assert {a.seq - w for a in applied if a.replayed} == {2, 3, 5}
        after = sub.stream.summary()
        assert {k: after[k] - before[k] for k in after} == {
            "batches": 12,
            "gaps": 3,
            "replayed": 3,
            "lost": 0,
            "malformed": 0,
            "restarts": 0,
        }
    finally:
        proxy.close()


def start_on_released_port(vllm, timeout=10.0, **kw):
    """A new publisher on the replay port the last one closed: ZMQ releases a closed socket's
    port in its own I/O thread, so a restart on the same port may find it busy for a moment
    (as a restarted vLLM would); retried until ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return vllm.call("publisher", **kw)
        except VllmHelperError as e:
            if "Address already in use" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_vllm_restart_clears_the_instance(vllm):
    rport = free_port()
    with KVEventSubscriber(ANY, bind=True, monitor=True) as sub:
        ep, rep = sub.bound_endpoint, f"tcp://{LOOPBACK}:{rport}"
        first, second = batches(500)[:3], batches(600)[:2]
        vllm.call("publisher", name="r1", endpoint=ep, replay_endpoint=rep)
        wait_connected(sub)
        vllm.call("publish", name="r1", batches=first)
        applied = pump(sub, lambda o: len(o) >= 3)
        vllm.call("shutdown", name="r1")
        sub.connection = "waiting"
        start_on_released_port(vllm, name="r2", endpoint=ep, replay_endpoint=rep)
        try:
            wait_connected(sub)
            vllm.call("publish", name="r2", batches=second)
            applied += pump(sub, lambda o: len(o) >= 2)
        finally:
            vllm.call("shutdown", name="r2")
        assert [a.seq for a in applied] == [0, 1, 2, 0, 1]
        assert sub.stream.restarts == 1 and sub.stream.lost == 0
        (inst,) = sub.stream.instances.values()
        assert inst.hashes == multiset_after(second)


def test_vllm_data_parallel_rank_offsets_and_tags(vllm):
    with KVEventSubscriber(ANY, bind=True, monitor=True) as sub:
        port = int(sub.bound_endpoint.rsplit(":", 1)[1])
        rank = 1
        cfg = vllm.call("publisher", name="dp", endpoint=f"tcp://{LOOPBACK}:{port - rank}", data_parallel_rank=rank)
        try:
            assert cfg["endpoint"] == sub.bound_endpoint
            wait_connected(sub)
            sent = batches(700)[:2]
            vllm.call("publish", name="dp", batches=sent)
            applied = pump(sub, lambda o: len(o) >= 2)
        finally:
            vllm.call("shutdown", name="dp")
        assert [a.batch.data_parallel_rank for a in applied] == [rank, rank]
        assert list(sub.stream.instances) == [("", rank)]


def test_endpoint_rules_match_vllm(vllm):
    cases = [
        ("tcp://*:5557", 0),
        ("tcp://*:5557", 3),
        ("tcp://127.0.0.1:5557", 2),
        ("tcp://*:0", 4),
        ("tcp://[::1]:7000", 1),
        ("tcp://[::]:7000", 0),
        ("inproc://kv", 2),
        ("ipc:///run/kv", 0),
        ("ipc:///run/kv", 1),
        ("tcp://host:port", 1),
        ("", 2),
        (None, 1),
        ("tcp://localhost:1", 0),
        ("ipc:///run/tcp_sock", 1),
        ("tcp://h:9", -1),
    ]
    theirs = vllm.call("endpoint_rules", cases=cases)["results"]
    for (ep, rank), t in zip(cases, theirs):
        try:
            ours = {"offset": offset_endpoint_port(ep, rank)}
        except ValueError as e:
            ours = {"error": f"ValueError: {e}"}
        if ep:
            ours["binds"] = is_bind_endpoint(ep)
        assert ours == t, (ep, rank)


# ---- (b) we publish, vLLM decodes -------------------------------------------------------------


def our_batches():
    from explorer.core.events import AllBlocksCleared, BlockRemoved, BlockStored

    return [
        KVEventBatch(1.5, [AllBlocksCleared()], 0),
        KVEventBatch(
            2.0,
            [
                BlockStored(
                    [1, 2**64 - 1],
                    None,
                    list(range(8)),
                    4,
                    None,
                    "GPU",
                    None,
                    extra_keys=[None, ("img", 3)],
                    kv_cache_spec_kind="full_attention",
                )
            ],
        ),
        KVEventBatch(
            2.5,
            [
                BlockStored(
                    [H32],
                    2**63,
                    [1, 2, 3, 4],
                    4,
                    7,
                    "CPU",
                    "lora-a",
                    group_idx=1,
                    kv_cache_spec_sliding_window=128,
                    session_id="s",
                )
            ],
        ),
        KVEventBatch(3.0, [BlockRemoved([1, H32], "GPU", group_idx=0), BlockRemoved([2], None)]),
    ]


def test_our_payloads_decode_and_reencode_identically_in_vllm(vllm):
    ours = our_batches()
    payloads = [encode_batch(KVEventBatch(b.ts, b.events, b.data_parallel_rank)) for b in ours]
    results = vllm.call("decode", payloads=[p.hex() for p in payloads])["results"]
    for b, p, r in zip(ours, payloads, results):
        assert "decode_error" not in r, r
        assert r["reencoded"] == p.hex()  # vLLM writes exactly our bytes
        assert r["ts"] == b.ts and r["data_parallel_rank"] == b.data_parallel_rank
        assert r["events"] == [all_fields(e) for e in b.events]
    # the spec's verified wire example
    assert payloads[0].hex() == "93cb3ff8000000000000" + "9181a474797065b0" + b"AllBlocksCleared".hex() + "00"


def test_our_publisher_over_the_wire_to_vllm_decoder(vllm, tmp_path):
    import threading

    from explorer.core.events import AllBlocksCleared
    from explorer.events.cli import scenario_batches

    scenario_events = scenario_batches(str(scenario_file(tmp_path)))
    sent = [b.events for b in our_batches()] + scenario_events
    port = free_port()
    vllm.call("sub", endpoint=f"tcp://{LOOPBACK}:{port}", topic="kv")
    try:
        with KVEventPublisher(f"tcp://{LOOPBACK}:{port}", ANY, topic="kv-0") as pub:
            # our PUB connects to vLLM's side, which binds; warm up until the subscription is up
            warm = []
            end = time.monotonic() + 30
            while not warm and time.monotonic() < end:
                pub.publish(KVEventBatch(time.time(), [AllBlocksCleared()]))
                warm = vllm.call("collect", count=1, timeout=0.2)["messages"]
            assert warm, "vLLM's SUB never received a batch"
            time.sleep(0.3)
            vllm.call("collect", count=1000, timeout=0.2)  # late warm-up copies
            first = pub.next_seq
            for events in sent:
                pub.publish(KVEventBatch(time.time(), events))
            live = vllm.call("collect", count=len(sent), timeout=10.0)["messages"]
            answer = {}

            def ask():
                answer.update(vllm.call("replay", endpoint=pub.last_endpoint("replay"), start=first, timeout=5.0))

            t = threading.Thread(target=ask)
            t.start()
            while t.is_alive():
                pub.serve(0.02)
            t.join()
    finally:
        vllm.call("close_sub")
    assert len(live) == len(sent)
    for i, (m, events) in enumerate(zip(live, sent)):
        frames = m["frames"]
        assert len(frames) == 3 and bytes.fromhex(frames[0]) == b"kv-0"
        assert frames[1] == (first + i).to_bytes(8, "big").hex()
        assert "decode_error" not in m, m
        assert m["decoded"]["events"] == [all_fields(e) for e in events]
        assert m["decoded"]["data_parallel_rank"] == 0
        assert m["decoded"]["reencoded"] == frames[2]  # vLLM re-encodes our exact bytes
    # the replay ROUTER's answer, read by a DEALER: every batch from `first`, then the end marker
    assert answer["ended"] and answer["end_frames"] == ["", "", "ff" * 8, ""]
    replayed = answer["messages"]
    assert len(replayed) == len(sent)
    for m, lm in zip(replayed, live):
        frames = m["frames"]
        assert frames[0] == "" and frames[1:] == lm["frames"]
        assert m["decoded"]["events"] == lm["decoded"]["events"]


def payload_corpus(seed: int = 7, mutations: int = 400) -> list[bytes]:
    """Valid payloads, odd-but-valid ones, wrong types, and random mutations of valid ones."""
    import random

    import msgspec

    rnd = random.Random(seed)
    enc = msgspec.msgpack.encode
    valid = [encode_batch(b) for b in our_batches()]
    stored = {
        "type": "BlockStored",
        "block_hashes": [1],
        "parent_block_hash": None,
        "token_ids": [1],
        "block_size": 1,
        "lora_id": None,
        "medium": None,
        "lora_name": None,
    }
    odd = [
        enc([1, [], 0]),  # int ts
        enc([1.0, []]),  # no rank
        enc([1.0, [], None]),
        enc([1.0, [], 0, "extra", 5]),  # trailing elements
        enc([1.0, [{**stored, "unknown": [1, {"x": 2}]}], 3]),  # unknown key
        enc([1.0, [{"type": "AllBlocksCleared", "junk": 1}], 0]),
        enc([1.0, [{**stored, "block_hashes": [2**64 - 1, -(2**63), b"x"]}], 0]),
        enc([1.0, [{**stored, "extra_keys": [None, [1, "a"], []]}], 0]),
    ]
    wrong = [
        enc([]),
        enc([1.0]),
        enc(["1", [], 0]),
        enc([True, [], 0]),
        enc([1.0, {}, 0]),
        enc([1.0, [], "0"]),
        enc([1.0, [], 1.5]),
        enc([1.0, [], True]),
        enc({"ts": 1.0, "events": []}),
        enc([1.0, [1], 0]),
        enc([1.0, [{"type": "Nope"}], 0]),
        enc([1.0, [{"block_hashes": []}], 0]),
        enc([1.0, [{**stored, "block_hashes": [1.5]}], 0]),
        enc([1.0, [{**stored, "block_hashes": [True]}], 0]),
        enc([1.0, [{**stored, "block_hashes": [[1]]}], 0]),
        enc([1.0, [{**stored, "token_ids": ["a"]}], 0]),
        enc([1.0, [{**stored, "block_size": None}], 0]),
        enc([1.0, [{**stored, "medium": 3}], 0]),
        enc([1.0, [{**stored, "extra_keys": [5]}], 0]),
        enc([1.0, [{**stored, "extra_keys": {"a": 1}}], 0]),
        enc([1.0, [{k: v for k, v in stored.items() if k != "lora_name"}], 0]),
        enc([1.0, [{"type": "BlockRemoved", "block_hashes": [1]}], 0]),
        enc([1.0, [{"type": "BlockRemoved", "block_hashes": [1], "medium": None, "group_idx": "0"}], 0]),
        b"",
        b"\xc1",
        b"\x93",
        b"\x93\x00\x90\x00\x00",
        b"\x91" * 5000,
        b"\x93\x00\xdd\xff\xff\xff\xff",
        b"\x93\x00\x90\xc4\x05ab",
    ]
    corpus = valid + odd + wrong
    for _ in range(mutations):
        p = bytearray(rnd.choice(valid + odd))
        op = rnd.randrange(4)
        if op == 0:
            p = p[: rnd.randrange(len(p))]
        elif op == 1:
            for _ in range(rnd.randint(1, 3)):
                p[rnd.randrange(len(p))] = rnd.randrange(256)
        elif op == 2:
            i = rnd.randrange(len(p) + 1)
            p[i:i] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 4)))
        else:
            i = rnd.randrange(len(p))
            del p[i : i + rnd.randint(1, 4)]
        corpus.append(bytes(p))
    return corpus


def test_our_decoder_accepts_exactly_what_vllms_accepts(vllm):
    """Malformed = what vLLM's own typed decoder rejects; accepted payloads decode the same."""
    from explorer.events.wire import decode_payload

    corpus = payload_corpus()
    theirs = vllm.call("decode", payloads=[p.hex() for p in corpus])["results"]
    accepted = 0
    for p, t in zip(corpus, theirs):
        try:
            ours = decode_payload(p)
        except ValueError as e:
            assert "decode_error" in t, (p.hex(), str(e), t)
            continue
        assert "decode_error" not in t, (p.hex(), t)
        accepted += 1
        assert t["ts"] == ours.ts or (t["ts"] != t["ts"] and ours.ts != ours.ts)  # NaN
        assert t["data_parallel_rank"] == ours.data_parallel_rank
        assert t["events"] == [all_fields(e) for e in ours.events], p.hex()
    assert 20 <= accepted < len(corpus) - 100
