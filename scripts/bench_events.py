"""Benchmark: can the KV event subscriber keep up with 10,000 batches/s on loopback?

Not part of CI. Run from the repository root:

    .venv/bin/python scripts/bench_events.py                 # 10,000 batches/s for 5 s, then flat out
    .venv/bin/python scripts/bench_events.py --rate 20000 --seconds 3 --json

Two processes on 127.0.0.1: a publisher (`KVEventPublisher`, vLLM's wire format, with its
replay ROUTER) paced at ``--rate`` batches per second, and the subscriber under test
(`KVEventSubscriber`, bound; the publisher connects, as vLLM does with a tcp://HOST:PORT
endpoint) applying every batch to its per-instance multiset. Each batch is one engine step's
worth of events: a BlockStored of 1 to 4 blocks of 16 tokens (int hashes), and every other
batch a BlockRemoved, so the multiset stays bounded. Reported: what was sent, applied, lost,
recovered, the subscriber's measured rate (batches applied / time from its first to its
last batch), its rate per CPU second (meaningful on a shared machine), and its lag behind the
publisher's last send. A paced run passes when nothing was lost and every batch was applied. A second,
unpaced run ("flat out") measures the most the subscriber takes, and a third, socket-free
run measures the decoder and state machine alone.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from explorer.core.events import BlockRemoved, BlockStored, KVEventBatch, encode_batch  # noqa: E402

LOOPBACK = "127.0.0.1"


def payloads(n: int) -> list[bytes]:
    """n distinct-enough payloads, a step's worth of events each."""
    out = []
    for i in range(n):
        k = 1 + i % 4
        base = (i * 7919) % 1_000_003 * 8
        hashes = [(base + j) * 0x9E3779B97F4A7C15 % (1 << 64) for j in range(k)]
        events = [
            BlockStored(hashes, None, list(range(16 * k)), 16, None, "GPU", None, kv_cache_spec_kind="full_attention")
        ]
        if i % 2:
            events.append(BlockRemoved(hashes[:1], "GPU"))
        out.append(encode_batch(KVEventBatch(time.time(), events, 0)))
    return out


def run_publisher(endpoint: str, replay_port: int, rate: float, count: int, wait: float, hold: float) -> None:
    from explorer.events.publisher import KVEventPublisher

    pool = payloads(1024)
    pub = KVEventPublisher(endpoint, f"tcp://{LOOPBACK}:{replay_port}", hwm=1_000_000, buffer_steps=200_000)
    try:
        pub.serve_for(wait)
        t0 = time.perf_counter()
        i = 0
        while i < count:
            if rate > 0:
                due = min(count, int((time.perf_counter() - t0) * rate) + 1)
                if due <= i:
                    pub.serve(0)
                    time.sleep(0.0005)
                    continue
            else:
                due = min(count, i + 256)
            while i < due:
                pub.publish_payload(pool[i % len(pool)])
                i += 1
        elapsed = time.perf_counter() - t0
        sys.stdout.write(json.dumps({"sent": count, "publisher_s": elapsed, "end_wall": time.time()}) + "\n")
        sys.stdout.flush()
        pub.serve_for(hold)
    finally:
        pub.close(linger=1.0)


def run_one(rate: float, seconds: float, count: int | None = None) -> dict:
    from explorer.events.subscriber import KVEventSubscriber

    count = count if count is not None else int(rate * seconds)
    sub = KVEventSubscriber(f"tcp://{LOOPBACK}:0", None, bind=True, hwm=1_000_000)
    endpoint = sub.bound_endpoint
    sub.close()
    import socket

    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        replay_port = s.getsockname()[1]
    sub = KVEventSubscriber(endpoint, f"tcp://{LOOPBACK}:{replay_port}", bind=True, hwm=1_000_000)
    pub = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--role",
            "publisher",
            "--endpoint",
            endpoint,
            "--replay-port",
            str(replay_port),
            "--rate",
            str(rate),
            "--count",
            str(count),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=str(ROOT),
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    first = last = last_wall = None
    applied = 0
    cpu0 = time.process_time()
    try:
        deadline = time.monotonic() + 30 + 3 * (count / rate if rate > 0 else 10)
        idle_since = None
        while applied < count and time.monotonic() < deadline:
            got = sub.poll(0.05)
            if got:
                now = time.perf_counter()
                first = first if first is not None else now
                last = now
                last_wall = time.time()
                applied += len(got)
                idle_since = None
            elif first is not None:
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since > 5:
                    break
        applied += len(sub.stream.flush())
        cpu = time.process_time() - cpu0
        out, _ = pub.communicate(timeout=60)
    finally:
        if pub.poll() is None:
            pub.kill()
        stats = sub.stream.summary()
        sub.close()
    sent = json.loads(out.splitlines()[0]) if out.strip() else {"sent": count, "publisher_s": None}
    span = (last - first) if first is not None and last is not None and last > first else None
    return {
        "target_rate": rate or "unpaced",
        "sent": sent["sent"],
        "applied": applied,
        "gaps": stats["gaps"],
        "replayed": stats["replayed"],
        "lost": stats["lost"],
        "malformed": stats["malformed"],
        "publisher_batches_per_s": round(sent["sent"] / sent["publisher_s"]) if sent.get("publisher_s") else None,
        "subscriber_batches_per_s": round(applied / span) if span else None,
        # CPU seconds of the subscriber process (all its threads), waiting included
        "subscriber_batches_per_cpu_s": round(applied / cpu) if cpu > 0 else None,
        # how long after the publisher's last send the subscriber applied its last batch
        "lag_s": round(last_wall - sent["end_wall"], 3) if last_wall and sent.get("end_wall") else None,
        "kept_up": applied == sent["sent"] and stats["lost"] == 0,
    }


def run_decoder(n: int) -> dict:
    """The socket-free state machine alone: frames in, batches applied."""
    from explorer.events.stream import KVEventStream
    from explorer.events.wire import live_frames

    pool = payloads(1024)
    stream = KVEventStream()
    frames = [live_frames(b"", i, pool[i % len(pool)]) for i in range(n)]
    t0, c0 = time.perf_counter(), time.process_time()
    for f in frames:
        stream.feed_live(f, now=0.0)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert stream.batches == n and stream.malformed == 0
    return {"batches": n, "decoder_batches_per_s": round(n / dt), "decoder_batches_per_cpu_s": round(n / cpu)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--role", default="bench", choices=["bench", "publisher"])
    p.add_argument("--endpoint")
    p.add_argument("--replay-port", type=int)
    p.add_argument("--rate", type=float, default=10_000)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--count", type=int)
    p.add_argument("--flat-out", type=int, default=50_000, help="batches for the unpaced run (0: skip)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    if a.role == "publisher":
        run_publisher(a.endpoint, a.replay_port, a.rate, a.count, wait=1.0, hold=3.0)
        return 0
    results = {"paced": run_one(a.rate, a.seconds)}
    if a.flat_out:
        results["flat_out"] = run_one(0, 0, count=a.flat_out)
    results["decoder_only"] = run_decoder(50_000)
    if a.json:
        print(json.dumps(results))
    else:
        for name, r in results.items():
            print(f"{name}: " + ", ".join(f"{k} {v}" for k, v in r.items()))
    return 0 if results["paced"]["kept_up"] else 1


if __name__ == "__main__":
    sys.exit(main())
