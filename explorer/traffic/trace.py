"""Mooncake traces: parsing and checking them, expanding their ids into tokens, and the skip rule.

A trace is in Mooncake's format (design section 4): one JSON object per line with
`timestamp` (ms), `input_length`, `output_length` and `hash_ids`, one id per 512-token block of
the prompt. Equal ids mean equal content with an equal prefix. The explorer turns ids into
tokens: token j of trace block i is ``hash_ids[i] * 512 + j``, and a prompt is the first
`input_length` tokens of that expansion.

A request is skipped (never replayed, no hit) iff it could not fit even in an empty cache:
``cdiv(input_length + (output_length - 1 if --outputs and output_length > 0 else 0),
block_size) > num_blocks - 1``. Skipped requests still count in ``requests`` and
``prompt_tokens``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from explorer.errors import BadInput, read_user_file
from explorer.traffic.clock import MAX_TIMESTAMP_MS

TRACE_BLOCK_TOKENS = 512  # Mooncake: one hash id per 512 prompt tokens
MAX_MODEL_LEN = 1 << 20  # the engine's max_model_len: input + output must fit
MAX_HASH_ID = 1 << 32  # hash ids are below this (tokens stay below 2**41)
MAX_TRACE_BYTES = 64 << 20  # the command line's cap on a trace file (the shipped one: 1.1 MB)
UI_MAX_TRACE_BYTES = 32 << 20  # the web page's cap on an upload


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# ---- the trace ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TraceRequest:
    line: int  # 1-based line in the file
    timestamp: float  # ms
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]  # only the ids the prompt reaches


@dataclass(frozen=True)
class RequestTrace:
    source: str
    requests: tuple[TraceRequest, ...]

    @property
    def prompt_tokens(self) -> int:
        return sum(r.input_length for r in self.requests)


def _field_int(where: str, obj: dict, name: str, lo: int) -> int:
    if name not in obj:
        raise BadInput(f"{where}: missing field {name!r}")
    v = obj[name]
    if type(v) is not int:
        raise BadInput(f"{where}: {name} must be an integer, got {json.dumps(v)[:40]}")
    if v < 0:
        raise BadInput(f"{where}: {name} is negative ({v})")
    if v < lo:
        raise BadInput(f"{where}: {name} is {v}; it must be at least {lo}")
    return v


def _parse_line(where: str, line_no: int, text: str) -> TraceRequest:
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise BadInput(f"{where}: not JSON ({e})") from None
    if not isinstance(obj, dict):
        raise BadInput(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if "timestamp" not in obj:
        raise BadInput(f"{where}: missing field 'timestamp'")
    ts = obj["timestamp"]
    if type(ts) not in (int, float) or not math.isfinite(ts) or not 0 <= ts <= MAX_TIMESTAMP_MS:
        raise BadInput(
            f"{where}: timestamp must be a number of ms in [0, {MAX_TIMESTAMP_MS:g}], got {json.dumps(ts)[:40]}"
        )
    input_length = _field_int(where, obj, "input_length", 1)
    output_length = _field_int(where, obj, "output_length", 0)
    if "hash_ids" not in obj:
        raise BadInput(f"{where}: missing field 'hash_ids'")
    ids = obj["hash_ids"]
    if not isinstance(ids, list) or not ids:
        raise BadInput(f"{where}: hash_ids must be a non-empty list of integers")
    for k, h in enumerate(ids):
        if type(h) is not int or not 0 <= h < MAX_HASH_ID:
            raise BadInput(f"{where}: hash_ids[{k}] must be an integer in [0, 2**32), got {json.dumps(h)[:40]}")
    if input_length > TRACE_BLOCK_TOKENS * len(ids):
        raise BadInput(
            f"{where}: input_length {input_length} is beyond its {len(ids)} hash ids "
            f"({len(ids)} x {TRACE_BLOCK_TOKENS} = {TRACE_BLOCK_TOKENS * len(ids)} tokens)"
        )
    if input_length + output_length > MAX_MODEL_LEN:
        raise BadInput(
            f"{where}: input_length + output_length = {input_length + output_length} is above "
            f"the engine's max_model_len {MAX_MODEL_LEN}"
        )
    needed = cdiv(input_length, TRACE_BLOCK_TOKENS)
    return TraceRequest(
        line_no, float(ts) if type(ts) is float else ts, input_length, output_length, tuple(ids[:needed])
    )


def parse_trace_bytes(
    data: bytes, source: str = "trace", limit: int | None = None, max_bytes: int = MAX_TRACE_BYTES
) -> RequestTrace:
    """Parse a Mooncake-format trace; bad input raises `BadInput` naming the line.

    Blank lines are ignored. With ``limit`` only the first ``limit`` requests are read (and
    checked).
    """
    if len(data) > max_bytes:
        raise BadInput(f"{source}: {len(data):,} bytes is more than the {max_bytes:,}-byte limit for a trace")
    if b"\x00" in data:
        raise BadInput(f"{source}: not a text file (it contains NUL bytes); expected JSON lines")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadInput(f"{source}: not a UTF-8 text file (byte {e.start}); expected JSON lines") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    requests: list[TraceRequest] = []
    for line_no, line in enumerate(text.split("\n"), start=1):
        if limit is not None and len(requests) >= limit:
            break
        if not line.strip():
            continue
        requests.append(_parse_line(f"{source} line {line_no}", line_no, line))
    if not requests:
        raise BadInput(f"{source}: empty trace (no request lines)")
    return RequestTrace(source, tuple(requests))


def load_trace(path: str | Path, limit: int | None = None, max_bytes: int = MAX_TRACE_BYTES) -> RequestTrace:
    p = Path(path)
    data = read_user_file(p, "trace file", max_bytes)
    return parse_trace_bytes(data, p.name, limit, max_bytes)


def shipped_trace_path() -> Path:
    """The synthetic Mooncake trace shipped with the project (data/, see its README)."""
    return Path(__file__).resolve().parents[2] / "data" / "mooncake_synthetic_trace.jsonl"


# ---- expansion and the skip rule --------------------------------------------------------------


def expand_tokens(hash_ids: Sequence[int], start: int, end: int) -> list[int]:
    """Tokens at positions [start, end) of the expansion of ``hash_ids``."""
    out: list[int] = []
    pos = start
    while pos < end:
        i, j = divmod(pos, TRACE_BLOCK_TOKENS)
        stop = min(end, (i + 1) * TRACE_BLOCK_TOKENS)
        base = hash_ids[i] * TRACE_BLOCK_TOKENS
        out.extend(range(base + j, base + j + (stop - pos)))
        pos = stop
    return out


def expand_prompt(req: TraceRequest) -> list[int]:
    """The prompt: the first ``input_length`` tokens of the expansion."""
    out: list[int] = []
    for h in req.hash_ids:
        base = h * TRACE_BLOCK_TOKENS
        out.extend(range(base, base + TRACE_BLOCK_TOKENS))
    del out[req.input_length :]
    return out


def footprint_tokens(req: TraceRequest, outputs: bool) -> int:
    """Slots a request holds at its largest: the prompt, plus every output token but the last
    (which is sampled and never computed)."""
    extra = req.output_length - 1 if outputs and req.output_length > 0 else 0
    return req.input_length + extra


def is_skipped(req: TraceRequest, block_size: int, num_blocks: int, outputs: bool) -> bool:
    return cdiv(footprint_tokens(req, outputs), block_size) > num_blocks - 1
