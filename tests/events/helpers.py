"""Frame builders and loopback helpers for the KV event tests."""

from __future__ import annotations

import socket
import time

from explorer.core.events import AllBlocksCleared, BlockRemoved, BlockStored, KVEventBatch, encode_batch
from explorer.events.wire import END_SEQ

LOOPBACK = "127.0.0.1"


def stored(*hashes, parent=None, block_size=4, medium="GPU"):
    return BlockStored(list(hashes), parent, list(range(block_size * len(hashes))), block_size, None, medium, None)


def removed(*hashes, medium="GPU"):
    return BlockRemoved(list(hashes), medium)


def cleared():
    return AllBlocksCleared()


def payload(events, ts=1.0, rank=0):
    return encode_batch(KVEventBatch(ts, list(events), rank))


def live(seq, events, topic=b"", ts=1.0, rank=0):
    return [topic, seq.to_bytes(8, "big"), payload(events, ts, rank)]


def replay(seq, events, topic=b"", ts=1.0, rank=0):
    return [b""] + live(seq, events, topic, ts, rank)


def replay_end():
    return [b"", b"", END_SEQ, b""]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def wait_until(cond, timeout=5.0, step=0.01, poll=None):
    """Call ``poll()`` (if given) until ``cond()`` holds; False on timeout."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if poll is not None:
            poll()
        if cond():
            return True
        if poll is None:
            time.sleep(step)
    return cond()


# A scenario whose replay queues every event type: BlockStored, BlockRemoved (eviction,
# one block at a time) and AllBlocksCleared; four of its nine ops queue events.
SCENARIO_TOML = """\
title = "every event type"
[engine]
num_blocks = 6
[[steps]]
op = "arrive"
id = "A"
prompt = "0:64"
[[steps]]
op = "admit"
id = "A"
[[steps]]
op = "finish"
id = "A"
[[steps]]
op = "arrive"
id = "B"
prompt = "1000:1048"
[[steps]]
op = "admit"
id = "B"
[[steps]]
op = "finish"
id = "B"
[[steps]]
op = "arrive"
id = "C"
prompt = "0:40"
[[steps]]
op = "admit"
id = "C"
[[steps]]
op = "reset"
running = true
"""


def scenario_file(tmp_path):
    path = tmp_path / "events.toml"
    path.write_text(SCENARIO_TOML)
    return path


def scenario_events_json(path):
    """Each event-queuing step's events as `run --json` prints them."""
    from explorer.scenario.engine import replay
    from explorer.scenario.parse import load_scenario

    trace = replay(load_scenario(path))
    return [s.to_json()["events"] for s in trace.steps if s.events]


class DroppingProxy:
    """Test-only relay between a publisher and a subscriber that drops chosen sequence numbers.

    Its SUB binds (the publisher connects, as vLLM does with a tcp://HOST:PORT endpoint) and its
    PUB binds (the subscriber connects). Single-threaded: call `pump` from the test loop.
    """

    def __init__(self, drop):
        import zmq

        self.drop = set(drop)
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.bind(f"tcp://{LOOPBACK}:0")
        self.pub = self.ctx.socket(zmq.PUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.pub.bind(f"tcp://{LOOPBACK}:0")
        self.inbound = self.sub.getsockopt_string(zmq.LAST_ENDPOINT)
        self.outbound = self.pub.getsockopt_string(zmq.LAST_ENDPOINT)
        self.relayed = 0

    def pump(self):
        import zmq

        while self.sub.poll(0):
            frames = self.sub.recv_multipart(zmq.NOBLOCK)
            if int.from_bytes(frames[1], "big") in self.drop:
                continue
            self.pub.send_multipart(frames)
            self.relayed += 1

    def close(self):
        self.sub.close(linger=0)
        self.pub.close(linger=0)
        self.ctx.term()
