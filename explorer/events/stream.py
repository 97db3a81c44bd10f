"""KVEventStream: a socket-free state machine from KV event frames to applied batches.

Frames go in (`feed_live`, `feed_replay`), applied batches come out in sequence order per
instance, with counters. It detects gaps, asks for replays (`next_replay_request`), buffers
live batches while a replay runs, treats a sequence number that falls back as a publisher
restart, counts every malformed frame, and keeps per instance (`explorer.events.instance`) the
multiset of block hashes the instance holds. The socket loop around it is
`explorer.events.subscriber`; this module imports neither pyzmq nor (until the first decode)
msgspec, so other pages can reuse the decoding without sockets.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from explorer.core.events import KVEventBatch
from explorer.events.instance import DEFAULT_MAX_HASHES, AppliedBatch, CacheInstance, HashBudget, InstanceKey
from explorer.events.wire import DEFAULT_BUFFER_STEPS, DEFAULT_MAX_PAYLOAD, END_SEQ, as_frames, decode_payload

DEFAULT_REPLAY_TIMEOUT = 2.0
DEFAULT_MAX_PENDING = 200_000
DEFAULT_MAX_INSTANCES = 1024  # (topic, data_parallel_rank) pairs one stream keeps apart
# A publisher numbers its batches 0, 1, 2, ... one per engine step: 2**62 of them would take a
# million steps a second for 146,000 years. A larger sequence number is a malformed frame.
MAX_SEQ = 1 << 62


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
    ``malformed``: frames that were not a well-formed batch (a sequence number of 2**62 or
    more among them, and a frame of a new instance once ``max_instances`` are known); ``restarts``: live seqs that fell back to or below the highest one seen,
    or jumped more than ``max_jump`` past it (the instance's state is then cleared, and the
    jump is also counted in the instance's ``seq_jumps``).

    Sequence numbers are checked against what a publisher can produce, so that no garbage
    frame can poison the counters: a jump beyond the publisher's replay buffer (``max_jump``,
    vLLM's default ``buffer_steps``) cannot be repaired by a replay, so the instance starts
    over there instead of counting up to 2**62 gaps; a late joiner asks for, and counts as not
    recovered, at most ``max_jump`` batches before its first.
    """

    def __init__(
        self,
        topic: str | bytes = "",
        *,
        replay: bool = False,
        replay_timeout: float = DEFAULT_REPLAY_TIMEOUT,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        max_pending: int = DEFAULT_MAX_PENDING,
        max_jump: int = DEFAULT_BUFFER_STEPS,
        max_instances: int = DEFAULT_MAX_INSTANCES,
        max_hashes: int = DEFAULT_MAX_HASHES,
    ) -> None:
        self.topic = topic.encode("utf-8") if isinstance(topic, str) else bytes(topic)
        self.replay_enabled = replay
        self.replay_timeout = replay_timeout
        self.max_payload = max_payload
        self.max_pending = max_pending
        self.max_jump = max(1, max_jump)
        self.max_instances = max_instances
        self.instances: dict[InstanceKey, CacheInstance] = {}
        self.hash_budget = HashBudget(max_hashes)  # shared by the instances
        self._topics: dict[bytes, str] = {}
        self.malformed = 0
        self.malformed_reasons: Counter[str] = Counter()
        self.last_malformed: str | None = None
        self.first_malformed: dict[str, str] = {}  # reason -> its first frame's text (a fixed set of reasons)
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
        self.first_malformed.setdefault(reason, self.last_malformed)
        return []

    def _decode(self, topic: bytes, seq_bytes: bytes, payload: bytes) -> tuple[int, InstanceKey, KVEventBatch] | None:
        """(seq, key, batch), or None for a malformed frame (counted)."""
        if len(seq_bytes) != 8:
            self._bad("seq_size", f"sequence frame of {len(seq_bytes)} bytes, expected 8")
            return None
        seq = int.from_bytes(seq_bytes, "big")
        if seq >= MAX_SEQ:
            self._bad("seq_range", f"sequence number {seq:,} is beyond what a publisher reaches (2**62)")
            return None
        try:
            batch = decode_payload(payload, self.max_payload)
        except ValueError as e:
            self._bad("payload", str(e)[:200])
            return None
        name = self._topics.get(topic)
        if name is None:
            name = topic.decode("utf-8", "backslashreplace")
            if len(self._topics) < 1024:
                self._topics[topic] = name
        return seq, (name, batch.data_parallel_rank), batch

    def feed_live(self, frames: Sequence[bytes], now: float | None = None) -> list[AppliedBatch]:
        """One multipart message from the SUB socket."""
        self.live_frames += 1
        fr = as_frames(frames)
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
        if got is None:
            return []
        seq, key, batch = got
        if key not in self.instances and len(self.instances) >= self.max_instances:
            return self._bad("instances", f"more than {self.max_instances} (topic, rank) instances")
        self.live_accepted += 1
        return self._on_live(key, seq, batch, time.monotonic() if now is None else now)

    def feed_replay(self, frames: Sequence[bytes], now: float | None = None) -> list[AppliedBatch]:
        """One multipart message from the DEALER socket: (b"", topic, seq, payload)."""
        self.replay_frames += 1
        now = time.monotonic() if now is None else now
        fr = as_frames(frames)
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
        if got is None:
            return []
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
            start = inst.next_seq
            if start is not None and inst.pending:  # a hole: batches wait for lower seqs
                now = time.monotonic() if now is None else now
                self._inflight = _Replay(inst.key, start, inst.max_live, now + self.replay_timeout, True)
                self.replay_requests += 1
                return start
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
            inst.resolve(None, out)
        return out

    # -- internals -------------------------------------------------------------------------

    def _instance(self, key: InstanceKey) -> CacheInstance:
        inst = self.instances.get(key)
        if inst is None:
            inst = self.instances[key] = CacheInstance(key, budget=self.hash_budget)
        return inst

    def _on_live(self, key: InstanceKey, seq: int, batch: KVEventBatch, now: float) -> list[AppliedBatch]:
        out: list[AppliedBatch] = []
        inst = self._instance(key)
        jumped = inst.next_seq is not None and seq > inst.max_live + 1 + self.max_jump
        if inst.next_seq is not None and (seq <= inst.max_live or jumped):
            # The publisher restarted (or the stream jumped further than any replay reaches):
            # whatever of the old incarnation is pending is applied (holes given up), then the
            # instance starts over.
            inst.resolve(None, out)
            if self._inflight is not None:
                self._inflight = None
                self.reset_replay_socket = True
            inst.start_over()
            if jumped:
                inst.seq_jumps += 1
        if inst.next_seq is None:  # the first batch of this incarnation
            # A late joiner replays what the publisher can still hold: at most max_jump batches.
            first = max(0, seq - self.max_jump)
            inst.initial_horizon = seq if self.replay_enabled else 0
            inst.next_seq = first if self.replay_enabled else seq
        elif seq > inst.max_live + 1:
            inst.gaps += seq - inst.max_live - 1
        inst.max_live = seq
        inst.pending[seq] = (batch, False)
        self._drain(inst, out)
        if len(inst.pending) > self.max_pending:
            if self._inflight is not None and self._inflight.key == key:
                self._inflight = None
                self.reset_replay_socket = True
            inst.resolve(None, out)
        return out

    def _drain(self, inst: CacheInstance, out: list[AppliedBatch]) -> None:
        """Apply the contiguous run from next_seq; without replay, give holes up at once."""
        inst.apply_ready(out)
        if not self.replay_enabled:
            inst.resolve(None, out)

    def _end_replay(self, now: float, timed_out: bool) -> list[AppliedBatch]:
        r, self._inflight = self._inflight, None
        out: list[AppliedBatch] = []
        if r is None:  # a stale end marker (counted in replay_ends)
            return out
        inst = self.instances.get(r.key)
        if inst is not None and inst.next_seq is not None:
            inst.resolve(min(r.horizon, inst.max_live), out)
            self._drain(inst, out)
        return out
