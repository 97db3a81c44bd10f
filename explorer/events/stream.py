"""KV events over ZMQ in vLLM 0.31.0's wire format: a publisher, a subscriber, and the CLI.

Wire format (vllm/distributed/kv_events.py, spec section 7, rule 45):

- live: a PUB socket sends three frames per batch, ``(topic, seq, payload)``: the topic as
  UTF-8 bytes, the sequence number as 8 bytes big-endian (0, 1, 2, ... per publisher, one per
  batch), and the msgpack payload ``[ts, [event maps...], data_parallel_rank]``.
- replay: a ROUTER socket (always bound) takes ``(client_id, b"", start_seq)`` (exactly three
  frames; anything else is ignored) and answers ``(client_id, b"", topic, seq, payload)`` for
  every buffered batch with ``seq >= start_seq``, then the end marker
  ``(client_id, b"", b"", END_SEQ, b"")`` with ``END_SEQ = (-1).to_bytes(8, "big",
  signed=True)``. Batches evicted from the buffer (``buffer_steps`` batches are kept) are
  silently missing.
- bind or connect: the PUB socket binds only when the endpoint contains ``*`` or ``::`` or is
  ``ipc://`` / ``inproc://``; otherwise it *connects* (so ``tcp://127.0.0.1:5557`` connects to
  a subscriber that binds). ``tcp://*:0`` binds the node's IP on a port the OS picks.
- data parallel ranks: both endpoints are offset by the rank (`offset_endpoint_port`).

Three layers, so that other pages can reuse the decoding without sockets:

- `KVEventStream`: a pure state machine. Frames go in (`feed_live`, `feed_replay`), applied
  batches come out in sequence order per instance, with counters. It detects gaps, asks for
  replays (`next_replay_request`), buffers live batches while a replay runs, treats a sequence
  number that falls back as a publisher restart, counts every malformed frame, and keeps per
  instance the multiset of block hashes the instance holds.
- `KVEventSubscriber`: a thin socket loop (SUB + DEALER for replays) around a stream.
- `KVEventPublisher`: the publisher side, single-threaded: `publish` sends and buffers a batch,
  `serve` answers replay requests.

pyzmq is imported only inside the socket classes, msgspec only on the first encode or decode,
so importing this module costs neither. The decoder is typed by the wire schema: a payload is
malformed exactly when vLLM's own ``msgspec.msgpack.Decoder(type=KVEventBatch)`` rejects it
(the interop tests check this on a corpus of mutated payloads). An "instance" is one publisher's stream, told apart by (topic,
data_parallel_rank) in case several publishers connect to one bound subscriber; give each a
topic of its own (or a subscriber of its own) when they share a rank.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import json
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from explorer.core.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
    encode_batch,
    event_to_json,
    to_json_value,
)
from explorer.errors import BadInput

END_SEQ = (-1).to_bytes(8, "big", signed=True)

# vLLM's KVEventsConfig defaults.
DEFAULT_BUFFER_STEPS = 10_000
DEFAULT_HWM = 100_000
# A payload larger than this is counted as malformed without being decoded.
DEFAULT_MAX_PAYLOAD = 64 << 20
DEFAULT_REPLAY_TIMEOUT = 2.0
DEFAULT_MAX_PENDING = 200_000

InstanceKey = tuple[str, "int | None"]  # (topic, data_parallel_rank)


# ---- endpoints ---------------------------------------------------------------------------------


def offset_endpoint_port(endpoint: str | None, data_parallel_rank: int) -> str | None:
    """The endpoint a data-parallel rank uses (vLLM's ``offset_endpoint_port`` semantics).

    Rank 0, None or an empty endpoint: unchanged. An endpoint containing ``inproc``: suffix
    ``_dp<rank>``. Containing ``tcp``: the port after the last colon plus the rank, except that
    port 0 stays 0 (the OS picks one); a port that is not an integer raises ValueError.
    Anything else (``ipc://`` for one) with a rank > 0 raises
    ``ValueError("Invalid endpoint: must contain 'inproc' or 'tcp'")``.
    """
    if not endpoint or data_parallel_rank == 0:
        return endpoint
    if "inproc" in endpoint:
        return f"{endpoint}_dp{data_parallel_rank}"
    if "tcp" in endpoint:
        head, sep, port_text = endpoint.rpartition(":")
        if not sep:
            return endpoint
        port = int(port_text)  # ValueError for a port that is not an integer, as in vLLM
        if port == 0:
            return endpoint
        return f"{head}:{port + data_parallel_rank}"
    raise ValueError("Invalid endpoint: must contain 'inproc' or 'tcp'")


def is_bind_endpoint(endpoint: str) -> bool:
    """vLLM's rule for the PUB socket: bind wildcard, ipc and inproc endpoints; connect others."""
    return "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://"))


_SCHEMES = ("tcp://", "ipc://", "inproc://")


def check_endpoint(endpoint: str, what: str) -> str:
    """Reject an endpoint that is obviously not a ZMQ endpoint, with a one-line BadInput."""
    if not isinstance(endpoint, str) or not endpoint.strip():
        raise BadInput(f"{what}: empty endpoint")
    if endpoint != endpoint.strip() or any(c.isspace() for c in endpoint):
        raise BadInput(f"{what} {endpoint!r}: an endpoint has no spaces")
    if not endpoint.startswith(_SCHEMES):
        raise BadInput(f"{what} {endpoint!r}: expected tcp://HOST:PORT, ipc://PATH or inproc://NAME")
    rest = endpoint.split("://", 1)[1]
    if not rest:
        raise BadInput(f"{what} {endpoint!r}: nothing after the scheme")
    if endpoint.startswith("tcp://"):
        host, sep, port = rest.rpartition(":")
        if not sep or not host:
            raise BadInput(f"{what} {endpoint!r}: expected tcp://HOST:PORT")
        if port != "*" and not (port.isdigit() and 0 <= int(port) <= 65535):
            raise BadInput(f"{what} {endpoint!r}: port must be 0..65535")
    return endpoint


def node_ip() -> str:
    """This node's outward IP, found by routing a UDP socket (no packet is sent)."""
    import socket

    for family, probe in ((socket.AF_INET, ("192.0.2.1", 9)), (socket.AF_INET6, ("2001:db8::1", 9))):
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as s:
                s.connect(probe)
                ip = s.getsockname()[0]
        except OSError:
            continue
        if ip not in ("0.0.0.0", "::"):
            return ip
    raise BadInput("tcp://*:0 needs this node's IP address, and none could be found")


def _tcp_uri(ip: str, port: int) -> str:
    return f"tcp://[{ip}]:{port}" if ":" in ip else f"tcp://{ip}:{port}"


def _zmq_error(what: str, endpoint: str, err: Exception) -> BadInput:
    return BadInput(f"{what} {endpoint!r}: {err}")


# ---- frames ------------------------------------------------------------------------------------


def live_frames(topic: bytes, seq: int, payload: bytes) -> list[bytes]:
    return [topic, seq.to_bytes(8, "big"), payload]


def replay_request_frames(start_seq: int) -> list[bytes]:
    """What a DEALER sends to ask for a replay: the ROUTER sees (client_id, b"", start)."""
    return [b"", start_seq.to_bytes(8, "big")]


# ---- decoding ----------------------------------------------------------------------------------


def _build_decoder():
    """A typed msgspec decoder for the wire schema (spec rule 42) and its event converters.

    The structs describe the payload exactly as vLLM's typed decoder reads it: tagged maps
    (``"type"``), required fields without defaults, unknown keys ignored, an array batch whose
    trailing ``data_parallel_rank`` may be missing. Type checks run in C; the decoded structs
    are then turned into explorer.core.events objects (same fields, same order).
    """
    import msgspec

    Hash = int | bytes
    opts = dict(tag_field="type", omit_defaults=True)
    # (name, type) fields are required; (name, type, default) ones may be left out
    stored = msgspec.defstruct(
        "WireBlockStored",
        [
            ("block_hashes", list[Hash]),
            ("parent_block_hash", Hash | None),
            ("token_ids", list[int]),
            ("block_size", int),
            ("lora_id", int | None),
            ("medium", str | None),
            ("lora_name", str | None),
            ("extra_keys", list[tuple | None] | None, None),
            ("group_idx", int | None, None),
            ("kv_cache_spec_kind", str | None, None),
            ("kv_cache_spec_sliding_window", int | None, None),
            ("locality", str | None, None),
            ("ownership", str | None, None),
            ("session_id", str | None, None),
        ],
        tag="BlockStored",
        **opts,
    )
    removed = msgspec.defstruct(
        "WireBlockRemoved",
        [
            ("block_hashes", list[Hash]),
            ("medium", str | None),
            ("group_idx", int | None, None),
            ("locality", str | None, None),
            ("ownership", str | None, None),
        ],
        tag="BlockRemoved",
        **opts,
    )
    all_cleared = msgspec.defstruct("WireAllBlocksCleared", [], tag="AllBlocksCleared", **opts)
    batch = msgspec.defstruct(
        "WireBatch",
        [
            ("ts", float),
            ("events", list[stored | removed | all_cleared]),
            ("data_parallel_rank", int | None, None),
        ],
        array_like=True,
    )

    astuple = msgspec.structs.astuple
    convert = {
        stored: lambda e: BlockStored(*astuple(e)),
        removed: lambda e: BlockRemoved(*astuple(e)),
        all_cleared: lambda e: AllBlocksCleared(),
    }
    return msgspec.msgpack.Decoder(batch), convert, msgspec.DecodeError


@functools.cache
def _decoder():
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
    return KVEventBatch(wire.ts, [convert[type(e)](e) for e in wire.events], wire.data_parallel_rank)


# ---- the state machine -------------------------------------------------------------------------


@dataclass(slots=True)
class AppliedBatch:
    """One batch as applied to an instance, in that instance's sequence order."""

    instance: InstanceKey
    seq: int
    batch: KVEventBatch
    replayed: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "ts": self.batch.ts,
            "events": [event_to_json(e) for e in self.batch.events],
            "data_parallel_rank": self.batch.data_parallel_rank,
        }


@dataclass
class CacheInstance:
    """What one publisher instance holds, rebuilt from its events, and its stream counters."""

    key: InstanceKey
    # The multiset of block hashes: BlockStored adds a copy per hash, BlockRemoved removes
    # one copy, AllBlocksCleared empties it. Duplicates are real (two blocks, same hash).
    hashes: Counter = field(default_factory=Counter)
    by_medium: dict[str | None, Counter] = field(default_factory=dict)
    parents: dict[Any, Any] = field(default_factory=dict)  # hash -> parent hash (last stored)
    block_size: int | None = None
    # stream position
    next_seq: int | None = None  # everything below is applied or given up
    max_live: int = -1  # highest live seq seen
    initial_horizon: int = 0  # seqs below the first live one: a late joiner's replay
    pending: dict[int, tuple[KVEventBatch, bool]] = field(default_factory=dict)
    # counters (the stream's are the sums over instances, restarts included)
    batches: int = 0
    gaps: int = 0
    replayed: int = 0
    lost: int = 0
    unrecovered_initial: int = 0
    restarts: int = 0
    unknown_removals: int = 0
    last_seq: int | None = None
    last_ts: float | None = None

    @property
    def has_hole(self) -> bool:
        return bool(self.pending) and self.next_seq is not None

    def clear_cache(self) -> None:
        self.hashes.clear()
        self.by_medium.clear()
        self.parents.clear()

    def apply(self, batch: KVEventBatch) -> None:
        hashes, parents = self.hashes, self.parents
        get = hashes.get
        for ev in batch.events:
            kind = type(ev)
            if kind is BlockStored:
                parent = ev.parent_block_hash
                medium = self.by_medium.get(ev.medium)
                if medium is None:
                    medium = self.by_medium[ev.medium] = Counter()
                mget = medium.get
                self.block_size = ev.block_size
                for h in ev.block_hashes:
                    hashes[h] = get(h, 0) + 1
                    medium[h] = mget(h, 0) + 1
                    parents[h] = parent
                    parent = h
            elif kind is BlockRemoved:
                medium = self.by_medium.get(ev.medium)
                for h in ev.block_hashes:
                    n = get(h, 0)
                    if n <= 0:
                        self.unknown_removals += 1
                        continue
                    if n == 1:
                        del hashes[h]
                        parents.pop(h, None)
                    else:
                        hashes[h] = n - 1
                    if medium is not None:
                        m = medium.get(h, 0)
                        if m > 1:
                            medium[h] = m - 1
                        elif m == 1:
                            del medium[h]
            else:  # AllBlocksCleared
                self.clear_cache()

    def num_blocks(self) -> int:
        return sum(self.hashes.values())

    def prefixes(self, limit: int = 50) -> list[list[Any]]:
        """Cached prefixes as hash chains (root first), one per leaf, longest first.

        A chain follows parent links while the parent is still held, so a prefix whose first
        blocks were evicted starts at its first block still held.
        """
        held, parents = self.hashes, self.parents
        depth: dict[Any, int] = {}
        for start in held:
            path, h = [], start
            while h is not None and h in held and h not in depth:
                depth[h] = 0  # on the path (guards against a parent cycle)
                path.append(h)
                h = parents.get(h)
            d = depth.get(h, 0) if h is not None and h in held else 0
            for x in reversed(path):
                d += 1
                depth[x] = d
        children = {p for p in parents.values() if p is not None and p in held}
        leaves = heapq.nlargest(limit, (h for h in held if h not in children), key=depth.__getitem__)
        chains = []
        for leaf in leaves:
            chain, h = [], leaf
            while h is not None and h in held and len(chain) < depth[leaf]:
                chain.append(h)
                h = parents.get(h)
            chain.reverse()
            chains.append(chain)
        return chains

    def counters(self) -> dict[str, int]:
        return {
            "batches": self.batches,
            "gaps": self.gaps,
            "replayed": self.replayed,
            "lost": self.lost,
            "restarts": self.restarts,
            "unrecovered_initial": self.unrecovered_initial,
            "unknown_removals": self.unknown_removals,
        }


@dataclass(slots=True)
class _Replay:
    key: InstanceKey
    start: int
    horizon: int  # the request can fill holes below this live seq
    deadline: float
    sent: bool = False


class KVEventStream:
    """Socket-free decoder and state for one subscription: frames in, applied batches out.

    ``feed_live(frames)`` takes what a SUB socket received (three frames), ``feed_replay``
    what a DEALER received from the replay ROUTER (four frames: ``b""``, topic, seq, payload,
    or the end marker). Both return the batches that became applicable, in sequence order per
    instance. With ``replay=True`` a hole in the sequence is held open until a replay fills it;
    `next_replay_request` says which start seq to ask for (one request in flight at a time),
    `tick` gives up on a replay that does not answer within ``replay_timeout`` seconds, and
    `flush` gives up on everything outstanding. ``reset_replay_socket`` turns true when the
    replay socket should be recreated (a timeout or a restart left stale replies behind); the
    socket loop clears it.

    Counters (`summary`): ``batches`` applied; ``gaps``: sequence numbers missing between live
    batches after an instance's first; ``replayed``: batches applied from a replay (a late
    joiner's catch-up included); ``lost``: gap sequence numbers never recovered;
    ``malformed``: frames that were not a well-formed batch; ``restarts``: live seqs that fell
    back to or below the highest one seen (the instance's state is then cleared).
    """

    def __init__(
        self,
        topic: str | bytes = "",
        *,
        replay: bool = False,
        replay_timeout: float = DEFAULT_REPLAY_TIMEOUT,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        max_pending: int = DEFAULT_MAX_PENDING,
    ) -> None:
        self.topic = topic.encode("utf-8") if isinstance(topic, str) else bytes(topic)
        self.replay_enabled = replay
        self.replay_timeout = replay_timeout
        self.max_payload = max_payload
        self.max_pending = max_pending
        self.instances: dict[InstanceKey, CacheInstance] = {}
        self._topics: dict[bytes, str] = {}
        self.malformed = 0
        self.malformed_reasons: Counter = Counter()
        self.last_malformed: str | None = None
        # frame accounting: every frame fed lands in exactly one of these
        self.live_frames = 0
        self.replay_frames = 0
        self.filtered = 0  # topic not subscribed
        self.live_accepted = 0
        self.replay_accepted = 0
        self.replay_ignored = 0  # duplicates, out of range, or no replay running
        self.replay_ends = 0
        # replay bookkeeping
        self.replay_requests = 0
        self.replay_timeouts = 0
        self.reset_replay_socket = False
        self._inflight: _Replay | None = None

    # -- counters --------------------------------------------------------------------------

    def _total(self, name: str) -> int:
        return sum(getattr(i, name) for i in self.instances.values())

    @property
    def batches(self) -> int:
        return self._total("batches")

    @property
    def gaps(self) -> int:
        return self._total("gaps")

    @property
    def replayed(self) -> int:
        return self._total("replayed")

    @property
    def lost(self) -> int:
        return self._total("lost")

    @property
    def restarts(self) -> int:
        return self._total("restarts")

    def summary(self) -> dict[str, int]:
        return {
            "batches": self.batches,
            "gaps": self.gaps,
            "replayed": self.replayed,
            "lost": self.lost,
            "malformed": self.malformed,
            "restarts": self.restarts,
        }

    def frame_accounting(self) -> dict[str, int]:
        return {
            "fed": self.live_frames + self.replay_frames,
            "malformed": self.malformed,
            "filtered": self.filtered,
            "live_accepted": self.live_accepted,
            "replay_accepted": self.replay_accepted,
            "replay_ignored": self.replay_ignored,
            "replay_ends": self.replay_ends,
        }

    @property
    def pending(self) -> int:
        return sum(len(i.pending) for i in self.instances.values())

    @property
    def replay_in_flight(self) -> bool:
        return self._inflight is not None and self._inflight.sent

    @property
    def replay_deadline(self) -> float | None:
        r = self._inflight
        return r.deadline if r is not None and r.sent else None

    # -- input -----------------------------------------------------------------------------

    def _bad(self, reason: str, detail: str = "") -> list[AppliedBatch]:
        self.malformed += 1
        self.malformed_reasons[reason] += 1
        self.last_malformed = f"{reason}: {detail}" if detail else reason
        return []

    @staticmethod
    def _as_frames(frames: Any) -> list[bytes] | None:
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

    def _decode(self, topic: bytes, seq_bytes: bytes, payload: bytes):
        """(seq, key, batch) or a malformed-reason string."""
        if len(seq_bytes) != 8:
            return "seq_size", f"sequence frame of {len(seq_bytes)} bytes, expected 8"
        seq = int.from_bytes(seq_bytes, "big")
        try:
            batch = decode_payload(payload, self.max_payload)
        except ValueError as e:
            return "payload", str(e)[:200]
        name = self._topics.get(topic)
        if name is None:
            name = topic.decode("utf-8", "backslashreplace")
            if len(self._topics) < 1024:
                self._topics[topic] = name
        return seq, (name, batch.data_parallel_rank), batch

    def feed_live(self, frames: Sequence[bytes], now: float | None = None) -> list[AppliedBatch]:
        """One multipart message from the SUB socket."""
        self.live_frames += 1
        fr = self._as_frames(frames)
        if fr is None:
            return self._bad("frame_type", "frames are not bytes")
        if len(fr) != 3:
            return self._bad("frame_count", f"{len(fr)} frames, expected 3")
        topic, seq_bytes, payload = fr
        if not topic.startswith(self.topic):
            self.filtered += 1
            return []
        if seq_bytes == END_SEQ:
            return self._bad("seq_end", "end-of-replay marker on the live stream")
        got = self._decode(topic, seq_bytes, payload)
        if isinstance(got[0], str):
            return self._bad(*got)
        seq, key, batch = got
        self.live_accepted += 1
        return self._on_live(key, seq, batch, time.monotonic() if now is None else now)

    def feed_replay(self, frames: Sequence[bytes], now: float | None = None) -> list[AppliedBatch]:
        """One multipart message from the DEALER socket: (b"", topic, seq, payload)."""
        self.replay_frames += 1
        now = time.monotonic() if now is None else now
        fr = self._as_frames(frames)
        if fr is None:
            return self._bad("replay_frame_type", "frames are not bytes")
        if len(fr) != 4:
            return self._bad("replay_frame_count", f"{len(fr)} frames, expected 4")
        empty, topic, seq_bytes, payload = fr
        if empty != b"":
            return self._bad("replay_delimiter", "first replay frame is not empty")
        if seq_bytes == END_SEQ:
            if topic or payload:
                return self._bad("replay_end", "end marker with a topic or payload")
            self.replay_ends += 1
            return self._end_replay(now, timed_out=False)
        got = self._decode(topic, seq_bytes, payload)
        if isinstance(got[0], str):
            return self._bad(*got)
        seq, key, batch = got
        r = self._inflight
        inst = self.instances.get(key)
        if (
            r is None
            or not r.sent
            or not topic.startswith(self.topic)
            or inst is None
            or inst.next_seq is None
            or not inst.next_seq <= seq < inst.max_live
            or seq in inst.pending
        ):
            self.replay_ignored += 1
            if r is not None and r.sent:
                r.deadline = now + self.replay_timeout
            return []
        self.replay_accepted += 1
        r.deadline = now + self.replay_timeout
        inst.pending[seq] = (batch, True)
        out: list[AppliedBatch] = []
        self._drain(inst, out)
        return out

    def tick(self, now: float | None = None) -> list[AppliedBatch]:
        """Give up on a replay whose deadline passed."""
        now = time.monotonic() if now is None else now
        r = self._inflight
        if r is not None and r.sent and now >= r.deadline:
            self.replay_timeouts += 1
            self.reset_replay_socket = True
            return self._end_replay(now, timed_out=True)
        return []

    def next_replay_request(self, now: float | None = None) -> int | None:
        """The start seq to ask the replay endpoint for now, or None. Marks it in flight."""
        if not self.replay_enabled or self._inflight is not None:
            return None
        for inst in self.instances.values():
            if inst.has_hole:
                now = time.monotonic() if now is None else now
                self._inflight = _Replay(inst.key, inst.next_seq, inst.max_live, now + self.replay_timeout, True)
                self.replay_requests += 1
                return inst.next_seq
        return None

    def replay_send_failed(self, now: float | None = None) -> list[AppliedBatch]:
        """The loop could not send the request: give that hole up as if the replay timed out."""
        if self._inflight is None:
            return []
        self.reset_replay_socket = True
        return self._end_replay(time.monotonic() if now is None else now, timed_out=True)

    def flush(self) -> list[AppliedBatch]:
        """Give up on every hole (lost), apply everything pending: the end of listening."""
        out: list[AppliedBatch] = []
        if self._inflight is not None:
            self._inflight = None
            self.reset_replay_socket = True
        for inst in self.instances.values():
            self._resolve(inst, None, out)
        return out

    # -- internals -------------------------------------------------------------------------

    def _instance(self, key: InstanceKey) -> CacheInstance:
        inst = self.instances.get(key)
        if inst is None:
            inst = self.instances[key] = CacheInstance(key)
        return inst

    def _on_live(self, key: InstanceKey, seq: int, batch: KVEventBatch, now: float) -> list[AppliedBatch]:
        out: list[AppliedBatch] = []
        inst = self._instance(key)
        if inst.next_seq is not None and seq <= inst.max_live:
            # The publisher restarted: whatever of the old incarnation is pending is applied
            # (holes given up), then the instance starts over.
            self._resolve(inst, None, out)
            if self._inflight is not None:
                self._inflight = None
                self.reset_replay_socket = True
            inst.restarts += 1
            inst.clear_cache()
            inst.next_seq = None
            inst.max_live = -1
        if inst.next_seq is None:  # the first batch of this incarnation
            inst.initial_horizon = seq if self.replay_enabled else 0
            inst.next_seq = 0 if self.replay_enabled else seq
        elif seq > inst.max_live + 1:
            inst.gaps += seq - inst.max_live - 1
        inst.max_live = seq
        inst.pending[seq] = (batch, False)
        self._drain(inst, out)
        if len(inst.pending) > self.max_pending:
            if self._inflight is not None and self._inflight.key == key:
                self._inflight = None
                self.reset_replay_socket = True
            self._resolve(inst, None, out)
        return out

    def _apply(self, inst: CacheInstance, seq: int, batch: KVEventBatch, replayed: bool, out: list) -> None:
        inst.apply(batch)
        inst.batches += 1
        if replayed:
            inst.replayed += 1
        inst.last_seq = seq
        inst.last_ts = batch.ts
        out.append(AppliedBatch(inst.key, seq, batch, replayed))

    def _drain(self, inst: CacheInstance, out: list) -> None:
        """Apply the contiguous run from next_seq; without replay, give holes up at once."""
        while True:
            pending = inst.pending
            seq = inst.next_seq
            while seq in pending:
                batch, replayed = pending.pop(seq)
                self._apply(inst, seq, batch, replayed, out)
                seq += 1
            inst.next_seq = seq
            if not pending or self.replay_enabled:
                return
            self._skip_to(inst, min(pending))

    def _skip_to(self, inst: CacheInstance, target: int) -> None:
        """Give up sequence numbers next_seq..target-1 (never received)."""
        start = inst.next_seq
        if target <= start:
            return
        initial = max(0, min(target, inst.initial_horizon) - start)
        inst.unrecovered_initial += initial
        inst.lost += (target - start) - initial
        inst.next_seq = target

    def _resolve(self, inst: CacheInstance, horizon: int | None, out: list) -> None:
        """Give up the holes below ``horizon`` (all holes when None), applying what is there."""
        if inst.next_seq is None:
            return
        while inst.pending:
            first = min(inst.pending)
            if horizon is not None and first >= horizon:
                self._skip_to(inst, horizon)
                break
            self._skip_to(inst, first)
            seq = inst.next_seq
            while seq in inst.pending:
                batch, replayed = inst.pending.pop(seq)
                self._apply(inst, seq, batch, replayed, out)
                seq += 1
            inst.next_seq = seq
        else:
            if horizon is not None:
                self._skip_to(inst, horizon)

    def _end_replay(self, now: float, timed_out: bool) -> list[AppliedBatch]:
        r, self._inflight = self._inflight, None
        out: list[AppliedBatch] = []
        if r is None:  # a stale end marker (counted in replay_ends)
            return out
        inst = self.instances.get(r.key)
        if inst is not None and inst.next_seq is not None:
            self._resolve(inst, min(r.horizon, inst.max_live), out)
            self._drain(inst, out)
        return out


# ---- the socket loop ---------------------------------------------------------------------------


_MONITOR_NAMES = {
    "EVENT_CONNECTED": "connected",
    "EVENT_CONNECT_DELAYED": "connecting",
    "EVENT_CONNECT_RETRIED": "retrying (nothing answers there)",
    "EVENT_LISTENING": "listening",
    "EVENT_BIND_FAILED": "bind failed",
    "EVENT_ACCEPTED": "publisher connected",
    "EVENT_ACCEPT_FAILED": "accept failed",
    "EVENT_CLOSED": "closed",
    "EVENT_DISCONNECTED": "disconnected",
    "EVENT_HANDSHAKE_SUCCEEDED": "connected",
    "EVENT_HANDSHAKE_FAILED_NO_DETAIL": "handshake failed",
    "EVENT_HANDSHAKE_FAILED_PROTOCOL": "handshake failed (not a ZMQ peer?)",
}


class KVEventSubscriber:
    """A SUB socket (plus a DEALER for replays) feeding a `KVEventStream`.

    ``bind=False`` connects to the publisher (which binds, e.g. vLLM with ``tcp://*:5557``);
    ``bind=True`` binds, for publishers that connect (vLLM with ``tcp://HOST:5557``). Call
    `poll` repeatedly; it waits at most ``timeout`` seconds and returns applied batches.
    With ``monitor=True`` the SUB socket's connection events are tracked in `connection`.
    """

    DRAIN = 4096  # messages taken per socket per poll

    def __init__(
        self,
        endpoint: str,
        replay_endpoint: str | None = None,
        *,
        bind: bool = False,
        topic: str = "",
        hwm: int = DEFAULT_HWM,
        replay_timeout: float = DEFAULT_REPLAY_TIMEOUT,
        stream: KVEventStream | None = None,
        monitor: bool = False,
    ) -> None:
        import zmq

        self._zmq = zmq
        check_endpoint(endpoint, "--endpoint")
        if replay_endpoint is not None:
            check_endpoint(replay_endpoint, "--replay-endpoint")
        self.endpoint = endpoint
        self.replay_endpoint = replay_endpoint
        self.bind = bind
        self.stream = stream or KVEventStream(topic, replay=replay_endpoint is not None, replay_timeout=replay_timeout)
        self.connection = "binding" if bind else "connecting"
        self.replay_connection = None if replay_endpoint is None else "idle"
        self.last_frame: float | None = None  # monotonic time of the last frame received
        self.started = time.monotonic()
        self._ctx = zmq.Context()
        self._sub = self._dealer = self._mon = None
        self._poller = zmq.Poller()
        try:
            self._sub = self._ctx.socket(zmq.SUB)
            self._sub.setsockopt(zmq.LINGER, 0)
            self._sub.setsockopt(zmq.RCVHWM, hwm)
            self._sub.setsockopt(zmq.SUBSCRIBE, topic.encode("utf-8"))
            if monitor:
                self._mon = self._sub.get_monitor_socket()
            try:
                if bind:
                    self._sub.bind(endpoint)
                    self.connection = "listening"
                else:
                    self._sub.connect(endpoint)
            except zmq.ZMQError as e:
                raise _zmq_error("--endpoint", endpoint, e) from None
            self._poller.register(self._sub, zmq.POLLIN)
            if self._mon is not None:
                self._poller.register(self._mon, zmq.POLLIN)
            if replay_endpoint is not None:
                self._new_dealer()
        except BaseException:
            self.close()
            raise

    @property
    def bound_endpoint(self) -> str | None:
        if self._sub is None or not self.bind:
            return None
        return self._sub.getsockopt_string(self._zmq.LAST_ENDPOINT)

    def _new_dealer(self) -> None:
        zmq = self._zmq
        if self._dealer is not None:
            self._poller.unregister(self._dealer)
            self._dealer.close(linger=0)
            self._dealer = None
        d = self._ctx.socket(zmq.DEALER)
        d.setsockopt(zmq.LINGER, 0)
        d.setsockopt(zmq.RCVHWM, 2 * (DEFAULT_BUFFER_STEPS + 1))
        try:
            d.connect(self.replay_endpoint)
        except zmq.ZMQError as e:
            d.close(linger=0)
            raise _zmq_error("--replay-endpoint", self.replay_endpoint, e) from None
        self._dealer = d
        self._poller.register(d, zmq.POLLIN)
        self.stream.reset_replay_socket = False

    def _send_replay_requests(self, now: float) -> list[AppliedBatch]:
        if self._dealer is None:
            return []
        out: list[AppliedBatch] = []
        if self.stream.reset_replay_socket and not self.stream.replay_in_flight:
            self._new_dealer()
        start = self.stream.next_replay_request(now)
        if start is not None:
            try:
                self._dealer.send_multipart(replay_request_frames(start), flags=self._zmq.NOBLOCK)
                self.replay_connection = f"replay from seq {start} requested"
            except self._zmq.ZMQError:
                self.replay_connection = "replay request could not be sent"
                out += self.stream.replay_send_failed(now)
        return out

    def _monitor_events(self) -> None:
        from zmq.utils.monitor import recv_monitor_message

        zmq = self._zmq
        while True:
            try:
                msg = recv_monitor_message(self._mon, flags=zmq.NOBLOCK)
            except zmq.Again:
                return
            except Exception:
                return
            ev = msg.get("event")
            name = str(getattr(ev, "name", None) or ev)
            state = _MONITOR_NAMES.get(name if name.startswith("EVENT_") else f"EVENT_{name}")
            if state is not None:
                if state == "connected" and self.bind:
                    state = "publisher connected"
                if state == "disconnected" and self.bind:
                    state = "listening (publisher went away)"
                if state == "connecting" and self.connection == "connected":
                    continue
                self.connection = state

    def poll(self, timeout: float) -> list[AppliedBatch]:
        """Wait up to ``timeout`` seconds for frames; apply them; service replays."""
        zmq = self._zmq
        stream = self.stream
        now = time.monotonic()
        out = self._send_replay_requests(now)
        wait = max(0.0, timeout)
        deadline = stream.replay_deadline
        if deadline is not None:
            wait = min(wait, max(0.0, deadline - now))
        ready = dict(self._poller.poll(int(wait * 1000)))
        if self._sub in ready:
            recv = self._sub.recv_multipart
            for _ in range(self.DRAIN):
                try:
                    frames = recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                out += stream.feed_live(frames)
            self.last_frame = time.monotonic()
        if self._dealer is not None and self._dealer in ready:
            recv = self._dealer.recv_multipart
            for _ in range(self.DRAIN):
                try:
                    frames = recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                out += stream.feed_replay(frames)
                if not stream.replay_in_flight and self.replay_connection:
                    self.replay_connection = "replay answered"
            self.last_frame = time.monotonic()
        if self._mon is not None and self._mon in ready:
            self._monitor_events()
        now = time.monotonic()
        timed_out = stream.replay_timeouts
        out += stream.tick(now)
        if stream.replay_timeouts != timed_out:
            self.replay_connection = "replay endpoint did not answer in time"
        out += self._send_replay_requests(now)
        return out

    def close(self) -> None:
        for name in ("_mon", "_dealer", "_sub"):
            s = getattr(self, name, None)
            if s is not None:
                try:
                    if name == "_sub" and self._mon is not None:
                        with contextlib.suppress(Exception):
                            s.disable_monitor()
                    s.close(linger=0)
                finally:
                    setattr(self, name, None)
        ctx, self._ctx = getattr(self, "_ctx", None), None
        if ctx is not None:
            ctx.term()

    def __enter__(self) -> KVEventSubscriber:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---- the publisher -----------------------------------------------------------------------------


class KVEventPublisher:
    """vLLM's ZMQ publisher, single-threaded: `publish` sends a batch, `serve` answers replays.

    Sequence numbers start at 0 and count batches. The last ``buffer_steps`` payloads are kept
    for replay. ``hwm`` is the PUB socket's high-water mark. Both endpoints are offset by
    ``data_parallel_rank`` (`offset_endpoint_port`), and the batch's ``data_parallel_rank`` is
    filled in when it is None. The replay ROUTER's send high-water mark is
    ``2 * (buffer_steps + 1)`` so a whole buffer can be replayed to a reader that is not yet
    reading (vLLM 0.31.0 left ZMQ's default of 1000 there; 0.33.0 sets this value).
    """

    def __init__(
        self,
        endpoint: str = "tcp://*:5557",
        replay_endpoint: str | None = None,
        *,
        topic: str = "",
        data_parallel_rank: int = 0,
        buffer_steps: int = DEFAULT_BUFFER_STEPS,
        hwm: int = DEFAULT_HWM,
        linger: float = 0.0,
        node_ip_address: str | None = None,
    ) -> None:
        import zmq

        self._zmq = zmq
        if buffer_steps < 0 or hwm < 0:
            raise BadInput("buffer_steps and hwm must be >= 0")
        check_endpoint(endpoint, "--endpoint")
        if replay_endpoint is not None:
            check_endpoint(replay_endpoint, "--replay-endpoint")
        try:
            self.endpoint = offset_endpoint_port(endpoint, data_parallel_rank)
            self.replay_endpoint = offset_endpoint_port(replay_endpoint, data_parallel_rank)
        except ValueError as e:
            raise BadInput(f"endpoint for data parallel rank {data_parallel_rank}: {e}") from None
        self.topic = topic
        self._topic_bytes = topic.encode("utf-8")
        self.data_parallel_rank = data_parallel_rank
        self.buffer_steps = buffer_steps
        self.linger = linger
        self._node_ip = node_ip_address
        from collections import deque

        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=buffer_steps)
        self._seq = 0
        self.published = 0
        self.replay_requests = 0
        self.invalid_replay_requests = 0
        self.replayed_batches = 0
        self._ctx = zmq.Context()
        self._pub = self._replay = None
        try:
            self._pub = self._ctx.socket(zmq.PUB)
            self._pub.set_hwm(hwm)
            try:
                if is_bind_endpoint(self.endpoint):
                    self.endpoint = self._bind(self._pub, self.endpoint)
                else:
                    self._pub.connect(self.endpoint)
            except zmq.ZMQError as e:
                raise _zmq_error("--endpoint", self.endpoint, e) from None
            if self.replay_endpoint is not None:
                self._replay = self._ctx.socket(zmq.ROUTER)
                self._replay.setsockopt(zmq.LINGER, 0)
                self._replay.setsockopt(zmq.SNDHWM, 2 * (buffer_steps + 1))
                try:
                    self.replay_endpoint = self._bind(self._replay, self.replay_endpoint)
                except zmq.ZMQError as e:
                    raise _zmq_error("--replay-endpoint", self.replay_endpoint, e) from None
        except BaseException:
            self.close()
            raise

    def _bind(self, sock, endpoint: str) -> str:
        """Bind; ``tcp://*:0`` binds this node's IP on an OS-chosen port. The bound endpoint."""
        if endpoint != "tcp://*:0":
            sock.bind(endpoint)
            return endpoint
        ip = self._node_ip or node_ip()
        if ":" in ip:
            sock.setsockopt(self._zmq.IPV6, 1)
        sock.bind(_tcp_uri(ip, 0))
        port = sock.getsockopt_string(self._zmq.LAST_ENDPOINT).rsplit(":", 1)[1]
        return _tcp_uri(ip, int(port))

    def last_endpoint(self, which: str = "pub") -> str | None:
        """What ZMQ reports as bound (useful with port 0); None for a connecting PUB."""
        sock = self._pub if which == "pub" else self._replay
        if sock is None:
            return None
        value = sock.getsockopt_string(self._zmq.LAST_ENDPOINT)
        return value or None

    @property
    def next_seq(self) -> int:
        return self._seq

    def publish(self, batch: KVEventBatch) -> int:
        """Encode, send and buffer one batch; returns its sequence number."""
        if batch.data_parallel_rank is None:
            batch = KVEventBatch(batch.ts, batch.events, self.data_parallel_rank)
        return self.publish_payload(encode_batch(batch))

    def publish_payload(self, payload: bytes) -> int:
        """Send and buffer an already encoded payload."""
        if self._pub is None:
            raise RuntimeError("publisher is closed")
        seq = self._seq
        self._seq += 1
        self._pub.send_multipart(live_frames(self._topic_bytes, seq, payload))
        self._buffer.append((seq, payload))
        self.published += 1
        return seq

    def serve(self, timeout: float = 0.0) -> int:
        """Answer the replay requests waiting (waiting up to ``timeout`` s for the first)."""
        if self._replay is None:
            if timeout > 0:
                time.sleep(timeout)
            return 0
        zmq = self._zmq
        served = 0
        wait_ms = int(max(0.0, timeout) * 1000)
        while self._replay.poll(wait_ms, zmq.POLLIN):
            wait_ms = 0
            frames = self._replay.recv_multipart()
            if len(frames) != 3:
                self.invalid_replay_requests += 1
                continue
            client, _, start_bytes = frames
            start = int.from_bytes(start_bytes, "big")
            self.replay_requests += 1
            for seq, payload in list(self._buffer):
                if seq >= start:
                    self._replay.send_multipart([client, b"", self._topic_bytes, seq.to_bytes(8, "big"), payload])
                    self.replayed_batches += 1
            self._replay.send_multipart([client, b"", b"", END_SEQ, b""])
            served += 1
        return served

    def serve_for(self, seconds: float) -> int:
        """Keep answering replay requests for ``seconds``."""
        end = time.monotonic() + max(0.0, seconds)
        served = 0
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return served
            served += self.serve(min(left, 0.05))

    def close(self, linger: float | None = None) -> None:
        linger_ms = int(1000 * (self.linger if linger is None else linger))
        for name in ("_replay", "_pub"):
            s = getattr(self, name, None)
            if s is not None:
                s.close(linger=linger_ms if name == "_pub" else 0)
                setattr(self, name, None)
        ctx, self._ctx = getattr(self, "_ctx", None), None
        if ctx is not None:
            ctx.term()

    def __enter__(self) -> KVEventPublisher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---- command line ------------------------------------------------------------------------------


def scenario_batches(path: str) -> list[list]:
    """The event lists of a scenario's replay, one per step that queued events."""
    from explorer.scenario import load_scenario, replay

    trace = replay(load_scenario(path))
    return [list(step.events) for step in trace.steps if step.events]


def cmd_publish(args) -> int:
    """``publish SCENARIO --endpoint E [--replay-endpoint R] [--topic T] [--wait S] [--hold S]``."""
    batches = scenario_batches(args.scenario)
    pub = KVEventPublisher(args.endpoint, args.replay_endpoint, topic=args.topic, linger=1.0)
    try:
        pub.serve_for(args.wait)
        for events in batches:
            pub.publish(KVEventBatch(time.time(), events))
            pub.serve(0.0)
        pub.serve_for(args.hold)
        result = {
            "batches": pub.published,
            "events": sum(len(b) for b in batches),
            "endpoint": pub.last_endpoint("pub") or pub.endpoint,  # the bound one, for port 0
            "replay_endpoint": pub.last_endpoint("replay") or pub.replay_endpoint,
            "replay_requests": pub.replay_requests,
        }
    finally:
        pub.close()
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


def _human(a: AppliedBatch) -> str:
    kinds = Counter(type(e).__name__ for e in a.batch.events)
    what = ", ".join(f"{k} x{n}" for k, n in kinds.items()) or "no events"
    tag = " (replayed)" if a.replayed else ""
    return f"seq {a.seq} dp {a.batch.data_parallel_rank} ts {a.batch.ts:.6f}: {what}{tag}"


def listen(
    endpoint: str,
    replay_endpoint: str | None = None,
    *,
    bind: bool = False,
    topic: str = "",
    max_batches: int | None = None,
    timeout: float = 10.0,
    on_batch=None,
    on_ready=None,
) -> tuple[KVEventStream, int]:
    """Subscribe until ``max_batches`` batches were applied or ``timeout`` idle seconds passed.

    ``on_batch(AppliedBatch)`` is called for each batch in order (at most ``max_batches``);
    ``on_ready(subscriber)`` once the sockets exist. Returns the stream (counters, instances)
    and the number of batches handed to ``on_batch``.
    """
    sub = KVEventSubscriber(
        endpoint,
        replay_endpoint,
        bind=bind,
        topic=topic,
        replay_timeout=min(DEFAULT_REPLAY_TIMEOUT, max(timeout, 0.05)),
    )
    stream = sub.stream
    done = 0

    def emit(applied: Iterable[AppliedBatch]) -> bool:
        nonlocal done
        for a in applied:
            if max_batches is not None and done >= max_batches:
                return True
            done += 1
            if on_batch is not None:
                on_batch(a)
        return max_batches is not None and done >= max_batches

    try:
        if on_ready is not None:
            on_ready(sub)
        last = time.monotonic()
        full = False
        while not full:
            idle = time.monotonic() - max(last, sub.last_frame or last)
            left = timeout - idle
            if left <= 0:
                break
            full = emit(sub.poll(min(left, 0.1)))
            if sub.last_frame is not None:
                last = max(last, sub.last_frame)
        if not full:
            emit(stream.flush())
    finally:
        sub.close()
    return stream, done


def cmd_listen(args) -> int:
    """``listen --endpoint E [--replay-endpoint R] [--bind] [--topic T] [--max-batches K]
    [--timeout S] [--json]``."""
    out = sys.stdout

    def on_batch(a: AppliedBatch) -> None:
        out.write((json.dumps(to_json_value(a.to_json())) if args.json else _human(a)) + "\n")
        out.flush()

    stream, printed = listen(
        args.endpoint,
        args.replay_endpoint,
        bind=args.bind,
        topic=args.topic,
        max_batches=args.max_batches,
        timeout=args.timeout,
        on_batch=on_batch,
    )
    summary = stream.summary()
    summary["batches"] = printed
    if args.json:
        out.write(json.dumps({"summary": summary}) + "\n")
    else:
        out.write("summary: " + ", ".join(f"{k} {v}" for k, v in summary.items()) + "\n")
    out.flush()
    return 0
