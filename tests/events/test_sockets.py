"""Publisher and subscriber over real sockets, on 127.0.0.1 only, every socket closed."""

from __future__ import annotations

import time
from collections import Counter

import msgspec
import pytest
import zmq

from explorer.core.events import KVEventBatch
from explorer.errors import BadInput
from explorer.events.publisher import KVEventPublisher
from explorer.events.subscriber import KVEventSubscriber
from explorer.events.wire import END_SEQ
from tests.events.helpers import LOOPBACK, DroppingProxy, free_port, removed, stored, wait_until

ANY = f"tcp://{LOOPBACK}:0"


@pytest.fixture
def ctx():
    c = zmq.Context()
    socks = []

    def sock(kind):
        s = c.socket(kind)
        s.setsockopt(zmq.LINGER, 0)
        socks.append(s)
        return s

    yield sock
    for s in socks:
        s.close(linger=0)
    c.term()


def bound_sub(sock, topic=b""):
    s = sock(zmq.SUB)
    s.setsockopt(zmq.SUBSCRIBE, topic)
    s.bind(ANY)
    return s, s.getsockopt_string(zmq.LAST_ENDPOINT)


def recv(s, timeout=3.0):
    assert s.poll(int(timeout * 1000)), "nothing arrived in time"
    return s.recv_multipart()


def publish_until_received(pub, sub, batch, timeout=5.0):
    """Publish ``batch`` until the connecting PUB's subscription is up; the frames received."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        pub.publish(batch)
        if sub.poll(50):
            return sub.recv_multipart()
    raise AssertionError("the subscription never came up")


def test_live_frames_and_replay_router_frames(ctx):
    sub, ep = bound_sub(ctx)
    with KVEventPublisher(ep, ANY, topic="kv", data_parallel_rank=0) as pub:
        # tcp://127.0.0.1:P connects (vLLM's rule), to our bound SUB
        first = publish_until_received(pub, sub, KVEventBatch(1.0, [stored(1)]))
        assert first[0] == b"kv" and len(first[1]) == 8 and len(first) == 3
        warmup = int.from_bytes(first[1], "big")
        payloads = {}
        for i in range(3):
            seq = pub.publish(KVEventBatch(2.0 + i, [stored(10 + i), removed(10 + i)]))
            frames = recv(sub)
            assert frames[0] == b"kv" and frames[1] == seq.to_bytes(8, "big")
            assert msgspec.msgpack.decode(frames[2])[2] == 0  # data_parallel_rank filled in
            payloads[seq] = frames[2]
        assert seq == warmup + 3

        dealer = ctx(zmq.DEALER)
        dealer.connect(pub.last_endpoint("replay"))
        # a request with the wrong frame count is ignored
        dealer.send_multipart([b"", b"\0" * 8, b"extra"])
        dealer.send_multipart([b"", (warmup + 2).to_bytes(8, "big")])
        got = []
        assert wait_until(
            lambda: len(got) == 3,
            poll=lambda: (pub.serve(0.01), got.extend(dealer.recv_multipart() for _ in range(3) if dealer.poll(0))),
        )
        assert got[0] == [b"", b"kv", (warmup + 2).to_bytes(8, "big"), payloads[warmup + 2]]
        assert got[1] == [b"", b"kv", (warmup + 3).to_bytes(8, "big"), payloads[warmup + 3]]
        assert got[2] == [b"", b"", END_SEQ, b""]
        assert pub.invalid_replay_requests == 1 and pub.replay_requests == 1


def test_buffer_steps_keep_the_last_batches_only(ctx):
    sub, ep = bound_sub(ctx)
    with KVEventPublisher(ep, ANY, buffer_steps=2) as pub:
        for i in range(5):
            pub.publish(KVEventBatch(float(i), [stored(i)]))
        dealer = ctx(zmq.DEALER)
        dealer.connect(pub.last_endpoint("replay"))
        dealer.send_multipart([b"", (0).to_bytes(8, "big")])
        got = []
        assert wait_until(
            lambda: got and got[-1][2] == END_SEQ,
            poll=lambda: (pub.serve(0.01), dealer.poll(0) and got.append(dealer.recv_multipart())),
        )
        assert [int.from_bytes(f[2], "big", signed=True) for f in got] == [3, 4, -1]


def test_hwm_is_set_on_the_pub_socket(ctx):
    sub, ep = bound_sub(ctx)
    with KVEventPublisher(ep, hwm=1234) as pub:
        assert pub._pub.getsockopt(zmq.SNDHWM) == 1234


def test_wildcard_port_zero_binds_the_node_ip(ctx):
    # tcp://*:0 binds this node's IP; the test pins that IP to loopback.
    with KVEventPublisher("tcp://*:0", node_ip_address=LOOPBACK) as pub:
        assert pub.endpoint.startswith(f"tcp://{LOOPBACK}:") and not pub.endpoint.endswith(":0")
        sub = ctx(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(pub.endpoint)
        frames = publish_until_received(pub, sub, KVEventBatch(1.0, [stored(1)]))
        assert len(frames) == 3


def test_data_parallel_rank_offsets_both_endpoints(ctx):
    sub, ep = bound_sub(ctx)
    port = int(ep.rsplit(":", 1)[1])
    rport = free_port()
    rank = 2
    with KVEventPublisher(
        f"tcp://{LOOPBACK}:{port - rank}", f"tcp://{LOOPBACK}:{rport - rank}", data_parallel_rank=rank
    ) as pub:
        assert pub.endpoint == ep and pub.replay_endpoint == f"tcp://{LOOPBACK}:{rport}"
        frames = publish_until_received(pub, sub, KVEventBatch(1.0, [stored(1)]))
        assert msgspec.msgpack.decode(frames[2])[2] == rank
    with pytest.raises(BadInput, match="must contain 'inproc' or 'tcp'"):
        KVEventPublisher("ipc:///nonexistent/kv", data_parallel_rank=1)


def test_bad_endpoints_raise_bad_input():
    with pytest.raises(BadInput):
        KVEventPublisher("nonsense")
    with pytest.raises(BadInput):
        KVEventSubscriber("tcp://127.0.0.1:notaport")
    with pytest.raises(BadInput):
        KVEventSubscriber("tcp://999.1.1.1:5", bind=True)


def test_port_in_use_is_bad_input():
    with KVEventSubscriber(ANY, bind=True) as a:
        with pytest.raises(BadInput, match="in use"):
            KVEventSubscriber(a.bound_endpoint, bind=True)


def pump(sub, pub=None, proxy=None, seconds=0.0, until=None, timeout=5.0):
    out = []
    end = time.monotonic() + (seconds if until is None else timeout)
    while time.monotonic() < end:
        if proxy is not None:
            proxy.pump()
        if pub is not None:
            pub.serve(0)
        out += sub.poll(0.01)
        if until is not None and until(out):
            break
    return out


def test_gaps_are_recovered_through_the_replay_endpoint():
    proxy = DroppingProxy(drop={3, 4, 7})
    try:
        with (
            KVEventPublisher(proxy.inbound, ANY) as pub,
            KVEventSubscriber(proxy.outbound, pub.last_endpoint("replay"), monitor=True) as sub,
        ):
            pump(sub, pub, proxy, seconds=0.5)  # let both connections and subscriptions settle
            expected = Counter()
            seen = []
            for i in range(10):
                pub.publish(KVEventBatch(float(i), [stored(100 + i, 200 + i), stored(100 + i)]))
                expected.update({100 + i: 2, 200 + i: 1})
                seen += pump(sub, pub, proxy, seconds=0.01)
            seen += pump(sub, pub, proxy, until=lambda o: sub.stream.batches >= 10)
            assert [a.seq for a in seen] == list(range(10))
            assert {a.seq for a in seen if a.replayed} >= {3, 4, 7}
            s = sub.stream
            assert s.batches == 10 and s.lost == 0 and s.malformed == 0, s.summary()
            assert s.replayed >= 3 and s.gaps <= 3
            (inst,) = s.instances.values()
            assert inst.hashes == expected and inst.last_seq == 9
            assert proxy.relayed <= 7
    finally:
        proxy.close()


def test_applied_order_and_restart_over_sockets():
    with KVEventSubscriber(ANY, bind=True) as sub:
        ep = sub.bound_endpoint
        replay_ep = f"tcp://{LOOPBACK}:{free_port()}"
        log = []
        with KVEventPublisher(ep, replay_ep) as pub:
            pump(sub, pub, seconds=0.3)
            for i in range(5):
                pub.publish(KVEventBatch(float(i), [stored(i)]))
            log += pump(sub, pub, until=lambda o: len(o) >= 5)
        with KVEventPublisher(ep, replay_ep) as pub2:
            log += pump(sub, pub2, seconds=0.3)
            for i in range(3):
                pub2.publish(KVEventBatch(float(i), [stored(50 + i)]))
            log += pump(sub, pub2, until=lambda o: sum(a.batch.events[0].block_hashes[0] >= 50 for a in o) >= 3)
        seqs = [a.seq for a in log]
        assert seqs == [0, 1, 2, 3, 4, 0, 1, 2], seqs
        s = sub.stream
        assert s.restarts == 1 and s.lost == 0
        (inst,) = s.instances.values()
        assert inst.hashes == Counter({50: 1, 51: 1, 52: 1})
