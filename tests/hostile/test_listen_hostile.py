"""`listen --json` as a process, fed hostile frames on 127.0.0.1 by a PUB socket in the test.

Every batch the decoder accepts is printed as strict JSON (binary and array keys, an extension
type, NaN and infinite floats, a NaN timestamp), a sequence number near 2**63 is one malformed
frame, and a jump past the replay buffer is one restart: the counters never count 10**18 gaps.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import msgspec
import zmq

from tests.events.helpers import LOOPBACK, free_port, payload, stored
from tests.hostile.helpers import ROOT


def strict_loads(text: str):
    def refuse(name):
        raise AssertionError(f"{name} printed: not strict JSON")

    return json.loads(text, parse_constant=refuse)


def hostile_payload() -> bytes:
    event = {
        "type": "BlockStored",
        "block_hashes": [11],
        "parent_block_hash": None,
        "token_ids": [1, 2, 3, 4],
        "block_size": 4,
        "lora_id": None,
        "medium": "GPU",
        "lora_name": None,
        "extra_keys": [[{b"\x01k": 1}, {(1, 2): 3}, msgspec.msgpack.Ext(5, b"xy"), math.nan, -math.inf]],
    }
    return msgspec.msgpack.encode([math.nan, [event], 0])


def test_listen_json_prints_what_the_decoder_accepts_and_keeps_counters_sane():
    port = free_port()
    listener = subprocess.Popen(
        [sys.executable, "-m", "explorer", "listen", "--bind", "--endpoint", f"tcp://{LOOPBACK}:{port}"]
        + ["--json", "--max-batches", "4", "--timeout", "20"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    ctx = zmq.Context()
    pub = ctx.socket(zmq.XPUB)  # a PUB that hears subscriptions: send once the listener subscribed
    try:
        pub.connect(f"tcp://{LOOPBACK}:{port}")  # retried until the listener has bound
        assert pub.poll(60_000), "the listener never subscribed"
        assert pub.recv() == b"\x01"  # subscribed to every topic
        frames = [
            (0, hostile_payload()),
            (1, payload([stored(12)])),
            (2**63 - 5, payload([stored(13)])),  # garbage: beyond what a publisher reaches
            (2, payload([stored(14)])),
            (2 + 10**18, payload([stored(15)])),  # a jump no replay can fill: a restart
        ]
        for seq, body in frames:
            pub.send_multipart([b"", seq.to_bytes(8, "big"), body])
        try:
            out, err = listener.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            listener.kill()
            out, err = listener.communicate()
            raise AssertionError(f"listen hung: {err}") from None
    finally:
        pub.close(linger=0)
        ctx.term()
    assert listener.returncode == 0, err
    assert "Traceback" not in err
    lines = [strict_loads(x) for x in out.splitlines()]
    batches, summary = lines[:-1], lines[-1]["summary"]
    assert [b["seq"] for b in batches] == [0, 1, 2, 2 + 10**18]
    first = batches[0]
    assert first["ts"] is None
    assert first["events"][0]["extra_keys"] == [
        [{"016b": 1}, {"[1, 2]": 3}, {"ext_type": 5, "data": "7879"}, None, None]
    ]
    assert summary == {"batches": 4, "gaps": 0, "replayed": 0, "lost": 0, "malformed": 1, "restarts": 1}
