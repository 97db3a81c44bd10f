"""vLLM 0.31.0's own KV event code, driven over stdin/stdout by the interop tests.

Runs inside the vLLM virtualenv (``.venv-vllm``), never the project's, and so must not
import ``explorer``. One JSON command per line on stdin, one JSON answer per line on stdout
(``{"ok": true, ...}`` or ``{"error": "..."}``). Bytes travel as ``"hex:<hex>"`` strings.

Commands:
- ``publisher``: start a ``ZmqEventPublisher`` (name, endpoint, replay_endpoint, topic,
  data_parallel_rank, buffer_steps); ``publish``: publish batches ``[ts, [event maps]]`` with
  it and wait until its thread sent them; ``shutdown``: shut it down.
- ``sub``: bind a SUB socket; ``collect``: receive up to ``count`` messages from it and decode
  each payload with ``msgspec.msgpack.Decoder(type=KVEventBatch)``; ``replay``: ask a replay
  ROUTER with a DEALER socket and decode what comes back; ``close_sub``.
- ``decode``: decode payloads with vLLM's decoder and re-encode them with vLLM's encoder.
- ``endpoint_rules``: vLLM's ``offset_endpoint_port`` and ``_is_bind_endpoint`` on inputs.
"""

from __future__ import annotations

import json
import os
import sys
import time

# vLLM's logger writes to stdout: keep the real stdout for the protocol alone.
_OUT = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
os.dup2(2, 1)
sys.stdout = sys.stderr
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

import msgspec  # noqa: E402
import zmq  # noqa: E402
from vllm.distributed.kv_events import (  # noqa: E402
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
    ZmqEventPublisher,
)

CLASSES = {c.__name__: c for c in (BlockStored, BlockRemoved, AllBlocksCleared)}
DECODER = msgspec.msgpack.Decoder(type=KVEventBatch)
ENCODER = msgspec.msgpack.Encoder()


def from_wire_json(v):
    if isinstance(v, str) and v.startswith("hex:"):
        return bytes.fromhex(v[4:])
    if isinstance(v, list):
        return [from_wire_json(x) for x in v]
    return v


def to_wire_json(v):
    if isinstance(v, bytes):
        return "hex:" + v.hex()
    if isinstance(v, (list, tuple)):
        return [to_wire_json(x) for x in v]
    return v


def make_event(m):
    m = dict(m)
    cls = CLASSES[m.pop("type")]
    return cls(**{k: from_wire_json(v) for k, v in m.items()})


def event_fields(ev):
    d = {"type": type(ev).__name__}
    for name in ev.__struct_fields__:
        d[name] = to_wire_json(getattr(ev, name))
    return d


def decoded(payload: bytes):
    batch = DECODER.decode(payload)
    return {
        "ts": batch.ts,
        "events": [event_fields(e) for e in batch.events],
        "data_parallel_rank": batch.data_parallel_rank,
        "reencoded": ENCODER.encode(batch).hex(),
    }


class Helper:
    def __init__(self):
        self.publishers = {}
        self.ctx = zmq.Context()
        self.sub = None

    def publisher(self, name, endpoint, replay_endpoint=None, topic="", data_parallel_rank=0, buffer_steps=10_000):
        pub = ZmqEventPublisher(
            data_parallel_rank=data_parallel_rank,
            endpoint=endpoint,
            replay_endpoint=replay_endpoint,
            buffer_steps=buffer_steps,
            topic=topic,
        )
        self.publishers[name] = pub
        cfg = pub.get_publisher_config()
        return {"endpoint": cfg.endpoint, "replay_endpoint": cfg.replay_endpoint}

    def publish(self, name, batches, timeout=10.0):
        pub = self.publishers[name]
        for ts, events in batches:
            pub.publish(KVEventBatch(ts=ts, events=[make_event(e) for e in events]))
        end = time.monotonic() + timeout
        q = pub._event_queue  # wait until the publisher thread sent them all
        while q.unfinished_tasks and time.monotonic() < end:
            time.sleep(0.005)
        return {"unsent": q.unfinished_tasks}

    def shutdown(self, name):
        self.publishers.pop(name).shutdown()
        return {}

    def sub_(self, endpoint, topic=""):
        s = self.ctx.socket(zmq.SUB)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.SUBSCRIBE, topic.encode())
        s.bind(endpoint)
        self.sub = s
        return {}

    def collect(self, count, timeout=5.0):
        got = []
        end = time.monotonic() + timeout
        while len(got) < count:
            left = end - time.monotonic()
            if left <= 0 or not self.sub.poll(int(left * 1000)):
                break
            frames = self.sub.recv_multipart()
            got.append(self._frames(frames))
        return {"messages": got}

    def _frames(self, frames):
        item = {"frames": [f.hex() for f in frames]}
        try:
            item["decoded"] = decoded(frames[-1])
        except Exception as e:  # report, do not die
            item["decode_error"] = f"{type(e).__name__}: {e}"
        return item

    def replay(self, endpoint, start, timeout=5.0):
        d = self.ctx.socket(zmq.DEALER)
        d.setsockopt(zmq.LINGER, 0)
        try:
            d.connect(endpoint)
            d.send_multipart([b"", start.to_bytes(8, "big")])
            got = []
            end = time.monotonic() + timeout
            while True:
                left = end - time.monotonic()
                if left <= 0 or not d.poll(int(left * 1000)):
                    return {"messages": got, "ended": False}
                frames = d.recv_multipart()
                if frames[2] == (-1).to_bytes(8, "big", signed=True):
                    return {"messages": got, "ended": True, "end_frames": [f.hex() for f in frames]}
                got.append(self._frames(frames))
        finally:
            d.close(linger=0)

    def close_sub(self):
        if self.sub is not None:
            self.sub.close(linger=0)
            self.sub = None
        return {}

    def decode(self, payloads):
        out = []
        for p in payloads:
            try:
                out.append(decoded(bytes.fromhex(p)))
            except Exception as e:
                out.append({"decode_error": f"{type(e).__name__}: {e}"})
        return {"results": out}

    def endpoint_rules(self, cases):
        out = []
        for endpoint, rank in cases:
            try:
                r = {"offset": ZmqEventPublisher.offset_endpoint_port(endpoint, rank)}
            except Exception as e:
                r = {"error": f"{type(e).__name__}: {e}"}
            if endpoint:
                r["binds"] = ZmqEventPublisher._is_bind_endpoint(endpoint)
            out.append(r)
        return {"results": out}

    def close(self):
        for pub in self.publishers.values():
            pub.shutdown()
        self.close_sub()
        self.ctx.term()


def main():
    helper = Helper()
    _OUT.write(json.dumps({"ok": True, "ready": True}) + "\n")
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                cmd = json.loads(line)
                name = cmd.pop("cmd")
                fn = getattr(helper, "sub_" if name == "sub" else name)
                answer = {"ok": True, **fn(**cmd)}
            except Exception as e:
                answer = {"error": f"{type(e).__name__}: {e}"}
            _OUT.write(json.dumps(answer) + "\n")
    finally:
        helper.close()


if __name__ == "__main__":
    main()
