"""Strict JSON for whatever the wire decoder accepted: the lines of `listen --json`.

vLLM's decoder (and so ours, explorer/events/wire.py) types ``extra_keys`` only as arrays of
anything msgpack holds: floats that are NaN or infinite, binary strings, maps whose keys are
binary strings, arrays or numbers, extension types, timestamps, nested up to about a thousand
levels. Strict JSON has none of these, so each gets one documented form (docs/design.md,
section 7):

- bytes: lowercase hex, as everywhere in the explorer's JSON;
- a float that is NaN or infinite: null (strict JSON has no such numbers);
- a map key that is not a string: the compact JSON text of the key (bytes: their hex);
- a msgpack extension: ``{"ext_type": code, "data": hex}``; a msgpack timestamp: its ISO 8601
  text.

The writer keeps its own stack instead of recursing, so the deepest value the decoder accepts
is written whatever the depth of the caller.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
from typing import Any

from explorer.core.events import BlockStored, KVCacheEvent, event_to_map
from explorer.events.instance import AppliedBatch


class _Text(str):
    """Already written JSON text on the writer's stack."""


_COMMA = _Text(", ")


def dumps_strict(value: Any) -> str:
    """``value`` as strict JSON text (no NaN, no Infinity, every key a string), without recursion."""
    out: list[str] = []
    stack: list[Any] = [value]
    while stack:
        v = stack.pop()
        if type(v) is _Text:
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out.append("[")
            stack.append(_Text("]"))
            for i in range(len(v) - 1, -1, -1):
                stack.append(v[i])
                if i:
                    stack.append(_COMMA)
        elif isinstance(v, dict):
            out.append("{")
            stack.append(_Text("}"))
            items = list(v.items())
            for i in range(len(items) - 1, -1, -1):
                key, item = items[i]
                stack.append(item)
                stack.append(_Text(json.dumps(_key_text(key)) + ": "))
                if i:
                    stack.append(_COMMA)
        else:
            out.append(_scalar(v))
    return "".join(out)


def _scalar(v: Any) -> str:
    if v is None:
        return "null"
    if v is True or v is False:
        return "true" if v else "false"
    if isinstance(v, int):
        return str(int(v))
    if isinstance(v, float):
        return repr(float(v)) if math.isfinite(v) else "null"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return '"' + bytes(v).hex() + '"'
    if isinstance(v, datetime.datetime):
        return json.dumps(v.isoformat())
    code, data = getattr(v, "code", None), getattr(v, "data", None)
    if isinstance(code, int) and isinstance(data, (bytes, bytearray, memoryview)):  # msgspec.msgpack.Ext
        return dumps_strict({"ext_type": code, "data": data})
    return json.dumps(str(v))  # nothing else comes out of the decoder


def _key_text(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key).hex()
    return dumps_strict(key)


def event_map(event: KVCacheEvent) -> dict[str, Any]:
    """The event as vLLM's msgpack map (the core's `event_to_map`), with ``extra_keys`` left as
    decoded (the writer above walks it, however deep)."""
    if isinstance(event, BlockStored) and event.extra_keys is not None:
        head = event_to_map(dataclasses.replace(event, extra_keys=None))
        out: dict[str, Any] = {}
        for k, v in head.items():
            out[k] = v
            if k == "lora_name":  # extra_keys follows it in the struct
                out["extra_keys"] = event.extra_keys
        return out
    return event_to_map(event)


def batch_line(a: AppliedBatch) -> str:
    """One `listen --json` line: ``{"seq", "ts", "events", "data_parallel_rank"}``."""
    return dumps_strict(
        {
            "seq": a.seq,
            "ts": a.batch.ts,
            "events": [event_map(e) for e in a.batch.events],
            "data_parallel_rank": a.batch.data_parallel_rank,
        }
    )
