"""vLLM 0.31.0's KV event wire format (vllm/distributed/kv_events.py, spec section 7, rule 45).

- live: a PUB socket sends three frames per batch, ``(topic, seq, payload)``: the topic as
  UTF-8 bytes, the sequence number as 8 bytes big-endian (0, 1, 2, ... per publisher, one per
  batch), and the msgpack payload ``[ts, [event maps...], data_parallel_rank]``.
- replay: a ROUTER socket (always bound) takes ``(client_id, b"", start_seq)`` (exactly three
  frames; anything else is ignored) and answers ``(client_id, b"", topic, seq, payload)`` for
  every buffered batch with ``seq >= start_seq``, then the end marker
  ``(client_id, b"", b"", END_SEQ, b"")`` with ``END_SEQ = (-1).to_bytes(8, "big",
  signed=True)``. Batches evicted from the buffer (``buffer_steps`` batches are kept) are
  silently missing.

The decoder is typed by the wire schema: a payload is malformed exactly when vLLM's own
``msgspec.msgpack.Decoder(type=KVEventBatch)`` rejects it (the interop tests check this on a
corpus of mutated payloads). msgspec is imported only on the first decode, so importing this
module does not cost it. The encoder is the core's `explorer.core.events.encode_batch`.
"""

# No `from __future__ import annotations` here: msgspec reads the wire structs' annotations,
# and those structs are defined inside a function (to import msgspec lazily), where string
# annotations could not be resolved.

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from explorer.core.events import AllBlocksCleared, BlockRemoved, BlockStored, KVCacheEvent, KVEventBatch

if TYPE_CHECKING:
    import msgspec

END_SEQ = (-1).to_bytes(8, "big", signed=True)

# A payload larger than this is counted as malformed without being decoded.
DEFAULT_MAX_PAYLOAD = 64 << 20
# What one batch may expand to, checked on the msgpack array headers before the arrays are
# decoded (a 1-byte msgpack int is an 8-byte list slot and often a 32-byte int object): token
# ids per BlockStored event, token ids plus block hashes over the whole batch, and the encoded
# bytes of every event's extra_keys together. A vLLM step stores at most its scheduled tokens
# (max_num_batched_tokens, thousands to a few hundred thousand), far below these.
MAX_TOKEN_IDS = 1 << 20
MAX_BATCH_IDS = 1 << 21
MAX_EXTRA_KEYS_BYTES = 4 << 20
# vLLM's KVEventsConfig.buffer_steps default: the batches a publisher keeps for replay.
DEFAULT_BUFFER_STEPS = 10_000


# ---- frames ------------------------------------------------------------------------------------


def live_frames(topic: bytes, seq: int, payload: bytes) -> list[bytes]:
    return [topic, seq.to_bytes(8, "big"), payload]


def replay_request_frames(start_seq: int) -> list[bytes]:
    """What a DEALER sends to ask for a replay: the ROUTER sees (client_id, b"", start)."""
    return [b"", start_seq.to_bytes(8, "big")]


def as_frames(frames: object) -> list[bytes] | None:
    """A multipart message as a list of bytes (zmq.Frame, bytearray, memoryview accepted); None
    when it is not a list or tuple of byte strings."""
    if type(frames) is list and all(type(f) is bytes for f in frames):
        return frames
    if not isinstance(frames, (list, tuple)):
        return None
    out = []
    for f in frames:
        if isinstance(f, bytes):
            out.append(f)
        elif isinstance(f, (bytearray, memoryview)):
            out.append(bytes(f))
        elif hasattr(f, "bytes") and isinstance(getattr(f, "bytes", None), bytes):  # zmq.Frame
            out.append(f.bytes)
        else:
            return None
    return out


# ---- decoding ----------------------------------------------------------------------------------


class _WireDecoder(NamedTuple):
    decoder: "msgspec.msgpack.Decoder[Any]"
    # wire struct type -> the explorer.core.events class with the same fields in the same order
    convert: dict[type, Callable[[Any], KVCacheEvent]]
    decode_error: type[Exception]


def _build_decoder() -> _WireDecoder:
    """A typed msgspec decoder for the wire schema (spec rule 42) and its event converters.

    The structs describe the payload exactly as vLLM's typed decoder reads it: tagged maps
    (``"type"``), required fields without defaults, unknown keys ignored, an array batch whose
    trailing ``data_parallel_rank`` may be missing. Type checks run in C; the decoded structs
    are then turned into explorer.core.events objects (same fields, same order). The arrays that
    can be long (block hashes, token ids, extra keys) are first kept as raw msgpack, so that
    their sizes are checked before they are expanded, and then decoded with their own types.
    """
    import msgspec

    # Fields without a default are required; those with one may be left out.
    class WireBlockStored(msgspec.Struct, tag_field="type", tag="BlockStored", omit_defaults=True):
        block_hashes: msgspec.Raw  # list[int | bytes]
        parent_block_hash: int | bytes | None
        token_ids: msgspec.Raw  # list[int]
        block_size: int
        lora_id: int | None
        medium: str | None
        lora_name: str | None
        extra_keys: msgspec.Raw = msgspec.Raw(b"\xc0")  # list[tuple | None] | None; nil when left out
        group_idx: int | None = None
        kv_cache_spec_kind: str | None = None
        kv_cache_spec_sliding_window: int | None = None
        locality: str | None = None
        ownership: str | None = None
        session_id: str | None = None
        lookahead_token_ids: list[list[int]] | None = None

    class WireBlockRemoved(msgspec.Struct, tag_field="type", tag="BlockRemoved", omit_defaults=True):
        block_hashes: msgspec.Raw  # list[int | bytes]
        medium: str | None
        group_idx: int | None = None
        locality: str | None = None
        ownership: str | None = None

    class WireAllBlocksCleared(msgspec.Struct, tag_field="type", tag="AllBlocksCleared", omit_defaults=True):
        pass

    class WireBatch(msgspec.Struct, array_like=True):
        ts: float
        events: list[WireBlockStored | WireBlockRemoved | WireAllBlocksCleared]
        data_parallel_rank: int | None = None

    hashes = msgspec.msgpack.Decoder(list[int | bytes])
    tokens = msgspec.msgpack.Decoder(list[int])
    extra = msgspec.msgpack.Decoder(list[tuple | None] | None)

    def stored(e: Any) -> KVCacheEvent:
        return BlockStored(
            hashes.decode(e.block_hashes), e.parent_block_hash, tokens.decode(e.token_ids), e.block_size,
            e.lora_id, e.medium, e.lora_name, extra.decode(e.extra_keys),
            e.group_idx, e.kv_cache_spec_kind, e.kv_cache_spec_sliding_window, e.locality, e.ownership,
            e.session_id,
        )  # fmt: skip

    def removed(e: Any) -> KVCacheEvent:
        return BlockRemoved(hashes.decode(e.block_hashes), e.medium, e.group_idx, e.locality, e.ownership)

    convert: dict[type, Callable[[Any], KVCacheEvent]] = {
        WireBlockStored: stored,
        WireBlockRemoved: removed,
        WireAllBlocksCleared: lambda e: AllBlocksCleared(),
    }
    return _WireDecoder(msgspec.msgpack.Decoder(WireBatch), convert, msgspec.DecodeError)


def _array_len(raw: memoryview) -> int:
    """The length a msgpack array header announces; 0 for anything else (its typed decode
    rejects it, or it is nil)."""
    b0 = raw[0] if len(raw) else 0
    if 0x90 <= b0 <= 0x9F:
        return b0 & 0x0F
    if b0 in (0xDC, 0xDD):
        return int.from_bytes(raw[1 : 3 if b0 == 0xDC else 5], "big")
    return 0


def check_sizes(events: list[Any]) -> None:
    """ValueError when the raw arrays of a decoded batch announce more than the caps allow."""
    ids = extra_bytes = 0
    for i, e in enumerate(events):
        hashes = getattr(e, "block_hashes", None)
        if hashes is None:
            continue
        ids += _array_len(memoryview(hashes))
        raw_tokens = getattr(e, "token_ids", None)
        if raw_tokens is not None:
            n = _array_len(memoryview(raw_tokens))
            if n > MAX_TOKEN_IDS:
                raise ValueError(f"event {i}: BlockStored with {n:,} token ids, over the cap of {MAX_TOKEN_IDS:,}")
            ids += n
            extra_bytes += len(memoryview(e.extra_keys))
        if ids > MAX_BATCH_IDS:
            raise ValueError(f"over {MAX_BATCH_IDS:,} token ids and block hashes in one batch")
        if extra_bytes > MAX_EXTRA_KEYS_BYTES:
            raise ValueError(f"extra_keys over {MAX_EXTRA_KEYS_BYTES >> 20} MiB in one batch")


@functools.cache
def _decoder() -> _WireDecoder:
    """Built on first use (msgspec is imported only then); immutable afterwards."""
    return _build_decoder()


def decode_payload(payload: bytes, max_payload: int = DEFAULT_MAX_PAYLOAD) -> KVEventBatch:
    """A checked KVEventBatch from a payload; ValueError (never anything else) when bad.

    Accepts exactly what vLLM's ``msgspec.msgpack.Decoder(type=KVEventBatch)`` accepts.
    """
    if len(payload) > max_payload:
        raise ValueError(f"payload of {len(payload)} bytes is over the {max_payload}-byte limit")
    decoder, convert, decode_error = _decoder()
    try:
        wire = decoder.decode(payload)
    except decode_error as e:
        raise ValueError(f"malformed payload: {e}") from None
    except Exception as e:  # RecursionError, MemoryError, ...
        raise ValueError(f"undecodable payload ({type(e).__name__})") from None
    check_sizes(wire.events)
    try:
        events = [convert[type(e)](e) for e in wire.events]
    except decode_error as e:
        raise ValueError(f"malformed payload: {e}") from None
    except Exception as e:
        raise ValueError(f"undecodable payload ({type(e).__name__})") from None
    return KVEventBatch(wire.ts, events, wire.data_parallel_rank)
