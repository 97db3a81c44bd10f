"""KV cache events and their wire form (EventBatch to KVEventBatch, vllm/distributed/kv_events.py:31-142).

vLLM declares the events as tagged msgspec structs that are *not* array-like, so each event
goes on the wire as a msgpack map led by ``"type": "<ClassName>"``; fields without a default
are always written (even when None), fields at their default (None) are left out. A batch is
an array ``[ts (float64), [events...], data_parallel_rank]``.

The classes here are plain dataclasses with the same fields in the same order, and
`event_to_map` produces exactly the map msgspec would write, so encoding that map with any
msgpack encoder that keeps key order gives vLLM's bytes. msgspec is imported only by the encoder;
the checked decoder is the subscriber's (`explorer.events.wire.decode_payload`).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from explorer.core.hashing import ExternalBlockHash

MEDIUM_GPU = "GPU"


@dataclass(slots=True)
class BlockStored:
    block_hashes: list[ExternalBlockHash]
    parent_block_hash: ExternalBlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[tuple[Any, ...] | None] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None
    # vLLM 0.33's lookahead hashes: the tokens past each block its hash covers (None otherwise).
    lookahead_token_ids: list[list[int]] | None = None


@dataclass(slots=True)
class BlockRemoved:
    block_hashes: list[ExternalBlockHash]
    medium: str | None
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None


@dataclass(slots=True)
class AllBlocksCleared:
    pass


KVCacheEvent = BlockStored | BlockRemoved | AllBlocksCleared
EVENT_TYPES = (BlockStored, BlockRemoved, AllBlocksCleared)


@dataclass(slots=True)
class KVEventBatch:
    ts: float
    events: list[Any] = field(default_factory=list)
    data_parallel_rank: int | None = None


def _field_plan(cls: type[Any]) -> list[tuple[str, bool]]:
    """(name, always_written) for each field in declaration order."""
    return [(f.name, f.default is MISSING and f.default_factory is MISSING) for f in fields(cls)]


_PLANS = {cls: _field_plan(cls) for cls in EVENT_TYPES}


def event_to_map(event: KVCacheEvent) -> dict[str, Any]:
    """The map vLLM's msgspec encoder writes for an event: tag first, defaults left out.

    Tuples (inside ``extra_keys``) become lists, as msgpack arrays decode.
    """
    cls = type(event)
    out: dict[str, Any] = {"type": cls.__name__}
    for name, always in _PLANS[cls]:
        value = getattr(event, name)
        if always or value is not None:
            out[name] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def to_json_value(value: Any) -> Any:
    """JSON form used by the replay JSON: bytes become lowercase hex."""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, (list, tuple)):
        return [to_json_value(v) for v in value]
    if isinstance(value, dict):
        return {k: to_json_value(v) for k, v in value.items()}
    return value


def event_to_json(event: KVCacheEvent) -> dict[str, Any]:
    return {k: to_json_value(v) for k, v in event_to_map(event).items()}


def encode_batch(batch: KVEventBatch) -> bytes:
    """The msgpack payload vLLM's publisher sends for a batch."""
    import msgspec

    return msgspec.msgpack.encode([float(batch.ts), [event_to_map(e) for e in batch.events], batch.data_parallel_rank])
