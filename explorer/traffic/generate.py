"""Traces at scale: a Mooncake-format trace of N requests with a sample trace's statistics,
and a streaming reader that replays a trace of any length in bounded memory.

The generator learns three things from the sample (by default the shipped trace) and draws
each new request from them with a seeded generator:
- lengths: the (input_length, output_length) of a request drawn uniformly from the sample;
- arrivals: Poisson, at the sample's mean rate (its requests over its time span);
- prefix sharing: the drawn request keeps the leading run of its ids that more than one sample
  request holds (the shared system prompts and documents keep their ids, so generated requests
  share them as the sample's do); its other ids become fresh ones, never used before.
It writes one line at a time, so N is bounded by the disk, not the memory.

`stream_trace` yields the requests of a file one line at a time (each line checked as
`load_trace` checks it), and `replay_vllm_stream` (explorer/traffic/sequential.py) replays them
with the core's own request hasher, holding one request and the cache at a time.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from explorer.errors import BadInput
from explorer.traffic.trace import MAX_HASH_ID, RequestTrace, TraceRequest, _parse_line, load_trace, shipped_trace_path

MAX_GENERATED = 10_000_000  # requests one generated trace may hold
MAX_LINE_BYTES = 1 << 20  # a streamed line longer than this is bad input (the shipped longest: 2.6 KB)


def _shared_prefix(req: TraceRequest, counts: Counter[int]) -> int:
    n = 0
    while n < len(req.hash_ids) and counts[req.hash_ids[n]] > 1:
        n += 1
    return n


def generate_trace(path: str | Path, n: int, seed: int = 0, sample: RequestTrace | None = None) -> int:
    """Write ``n`` requests to ``path``; the number of bytes written."""
    if not 1 <= n <= MAX_GENERATED:
        raise BadInput(f"a generated trace holds 1 to {MAX_GENERATED:,} requests, not {n:,}")
    sample = sample or load_trace(shipped_trace_path())
    reqs = sample.requests
    counts: Counter[int] = Counter(h for r in reqs for h in set(r.hash_ids))
    shared = [_shared_prefix(r, counts) for r in reqs]
    span = max(r.timestamp for r in reqs) - min(r.timestamp for r in reqs)
    rate = (len(reqs) - 1) / span if span > 0 else 1.0  # requests per ms
    rng = random.Random(seed)
    fresh = max(h for r in reqs for h in r.hash_ids) + 1
    t = 0.0
    written = 0
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(n):
            k = rng.randrange(len(reqs))
            r = reqs[k]
            ids = list(r.hash_ids[: shared[k]])
            extra = len(r.hash_ids) - len(ids)
            ids.extend(range(fresh, fresh + extra))
            fresh += extra
            if fresh >= MAX_HASH_ID:
                raise BadInput(f"{n:,} requests need more than 2**32 distinct hash ids")
            line = json.dumps(
                {
                    "timestamp": round(t),
                    "input_length": r.input_length,
                    "output_length": r.output_length,
                    "hash_ids": ids,
                }
            )
            f.write(line + "\n")
            written += len(line) + 1
            t += rng.expovariate(rate)
    return written


def stream_trace(path: str | Path, limit: int | None = None) -> Iterator[TraceRequest]:
    """The requests of a Mooncake-format file, one line at a time (bad input names the line)."""
    p = Path(path)
    try:
        f = open(p, "rb")  # noqa: SIM115 (closed by the generator's finally)
    except OSError as e:
        raise BadInput(f"trace file {p.name}: cannot open it ({e.strerror})") from None
    count = 0
    try:
        for line_no, raw in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), start=1):
            if limit is not None and count >= limit:
                return
            if len(raw) > MAX_LINE_BYTES:
                raise BadInput(f"{p.name} line {line_no}: longer than {MAX_LINE_BYTES:,} bytes")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise BadInput(f"{p.name} line {line_no}: not UTF-8 text") from None
            if line_no == 1:
                text = text.removeprefix("\ufeff")
            if not text.strip():
                continue
            count += 1
            yield _parse_line(f"{p.name} line {line_no}", line_no, text)
    finally:
        f.close()
    if count == 0:
        raise BadInput(f"{p.name}: empty trace (no request lines)")
