"""`listen` as a process against a hostile or bursty publisher on 127.0.0.1: a 60 MB BlockStored
of 60 million token ids, 1 MB junk frames for seconds, a burst of 20,000 batches then quiet.
Memory is the child's peak resident set; every wait is a guard against a hang."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import msgspec
import zmq

from explorer.events.wire import MAX_TOKEN_IDS
from tests.events.helpers import LOOPBACK, free_port, payload, stored
from tests.hostile.helpers import ROOT
from tests.own_peak import kill_group, read_peak_kib, wrapped

GUARD_S = 120.0


@dataclass
class Listened:
    rc: int
    lines: list[dict]
    summary: dict
    err: str
    peak_mib: float


@contextmanager
def listener_and_pub(*args: str) -> Iterator[tuple[zmq.Socket, list[Listened]]]:
    """A `listen --bind --json` child and a PUB (an XPUB, to wait for the subscription) in the
    test connected to it; after the block, the child's result lands in the yielded list."""
    port = free_port()
    peak_dir = tempfile.TemporaryDirectory()
    peak_file = Path(peak_dir.name) / "peak"
    command = [sys.executable, "-m", "explorer", "listen", "--bind", "--endpoint", f"tcp://{LOOPBACK}:{port}", "--json"]
    proc = subprocess.Popen(
        wrapped(peak_file, command + list(args)),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        start_new_session=True,
    )
    ctx = zmq.Context()
    pub = ctx.socket(zmq.XPUB)
    pub.setsockopt(zmq.SNDHWM, 0)  # the test's sender never drops: what is lost is the listener's
    result: list[Listened] = []
    try:
        pub.connect(f"tcp://{LOOPBACK}:{port}")
        assert pub.poll(60_000), "the listener never subscribed"
        assert pub.recv() == b"\x01"
        yield pub, result
        pub.close(linger=int(GUARD_S * 1000))  # everything sent reaches the listener
        out_chunks: list[bytes] = []
        end = time.monotonic() + GUARD_S
        assert proc.stdout is not None and proc.stderr is not None
        os.set_blocking(proc.stdout.fileno(), False)
        while True:  # read stdout while waiting, so that a full pipe never stalls the child
            chunk = proc.stdout.read()
            if chunk:
                out_chunks.append(chunk)
            if proc.poll() is not None:
                break
            assert time.monotonic() < end, "listen hung"
            time.sleep(0.02)
        rest = proc.stdout.read()
        out_chunks.append(rest or b"")
        err = proc.stderr.read().decode()
        lines = [json.loads(x) for x in b"".join(out_chunks).decode().splitlines()]
        rc = proc.returncode
        result.append(
            Listened(rc, lines[:-1], lines[-1]["summary"] if lines else {}, err, read_peak_kib(peak_file) / 1024)
        )
    finally:
        if proc.poll() is None:
            kill_group(proc)
            proc.wait()
        peak_dir.cleanup()
        pub.close(linger=0)
        ctx.term()


def huge_stored_payload(n: int) -> bytes:
    """A well-formed batch of one BlockStored whose token_ids holds ``n`` ids of value 1 (one
    byte each on the wire), built without a list of ``n`` ints in this process."""
    event = {
        "type": "BlockStored",
        "block_hashes": [7],
        "parent_block_hash": None,
        "token_ids": "@@MARK@@",
        "block_size": 16,
        "lora_id": None,
        "medium": "GPU",
        "lora_name": None,
    }
    head = msgspec.msgpack.encode([1.0, [event], 0])
    return head.replace(msgspec.msgpack.encode("@@MARK@@"), b"\xdd" + n.to_bytes(4, "big") + b"\x01" * n)


def test_a_60_mb_block_stored_is_one_counted_line_in_bounded_memory():
    with listener_and_pub("--max-batches", "1", "--timeout", "30") as (pub, result):
        pub.send_multipart([b"", (0).to_bytes(8, "big"), huge_stored_payload(60_000_000)])
        pub.send_multipart([b"", (1).to_bytes(8, "big"), payload([stored(8)])])
    (r,) = result
    assert r.rc == 0 and "Traceback" not in r.err, r.err[-2000:]
    assert [b["seq"] for b in r.lines] == [1]
    assert r.summary["malformed"] == 1
    told = [x for x in r.err.splitlines() if "malformed" in x]
    assert len(told) == 1 and "60,000,000 token ids" in told[0] and f"{MAX_TOKEN_IDS:,}" in told[0], r.err
    assert r.peak_mib < 400, r.peak_mib  # the 60 MB frame (and libzmq's copy), never 60M ints


def test_1_mb_junk_frames_for_seconds_stay_in_bounded_memory():
    junk = os.urandom(1 << 20)
    with listener_and_pub("--max-batches", "1", "--timeout", "30") as (pub, result):
        end = time.monotonic() + 6.0
        sent = 0
        while time.monotonic() < end and sent < 3000:  # 6 s or 3 GB, whichever comes first
            pub.send_multipart([b"", sent.to_bytes(8, "big"), junk], copy=False)
            sent += 1
        pub.send_multipart([b"", sent.to_bytes(8, "big"), payload([stored(9)])])
    (r,) = result
    assert r.rc == 0 and "Traceback" not in r.err, r.err[-2000:]
    assert [b["seq"] for b in r.lines] == [sent]
    assert r.summary["malformed"] == sent  # every junk frame counted, none dropped uncounted
    assert len([x for x in r.err.splitlines() if "malformed" in x]) == 1, r.err[-2000:]
    assert r.peak_mib < 400, (r.peak_mib, sent)


def test_a_burst_of_20000_then_quiet_reports_every_batch():
    with listener_and_pub("--timeout", "0.3") as (pub, result):
        body = payload([stored(10)])
        for seq in range(20_000):
            pub.send_multipart([b"", seq.to_bytes(8, "big"), body])
    (r,) = result
    assert r.rc == 0 and "Traceback" not in r.err, r.err[-2000:]
    assert len(r.lines) == r.summary["batches"]
    assert r.summary["batches"] + r.summary["lost"] == 20_000, r.summary
