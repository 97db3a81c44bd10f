"""KVEventSubscriber: a SUB socket (plus a replay DEALER) feeding a `KVEventStream`.

The stream does the decoding, ordering and counting; this is the thin socket loop around it.
Frames and the replay protocol: `explorer.events.wire`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import zmq
from zmq.utils.monitor import recv_monitor_message

from explorer.events.endpoints import check_endpoint, check_topic, endpoint_error
from explorer.events.instance import AppliedBatch
from explorer.events.stream import DEFAULT_REPLAY_TIMEOUT, KVEventStream
from explorer.events.wire import DEFAULT_BUFFER_STEPS, replay_request_frames

Socket = zmq.Socket[bytes]

# Messages the SUB socket queues before it stops reading from the publisher. A PUB keeps what a
# subscriber cannot take yet in its own queue (vLLM's hwm, 100,000 by default) and drops only
# past that, so a short queue here loses nothing; it bounds what a flood of large frames can
# make this process hold to RCVHWM x the frame size (128 x 1 MB of junk: 128 MB).
RCVHWM = 128

# ZMQ socket monitor events, as the connection state the live page shows.
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
    # ... and bytes: each message is decoded as it is taken, so what one poll holds is its
    # applied batches, from at most this many payload bytes (plus the one message over it).
    DRAIN_BYTES = 8 << 20

    def __init__(
        self,
        endpoint: str,
        replay_endpoint: str | None = None,
        *,
        bind: bool = False,
        topic: str = "",
        hwm: int = RCVHWM,
        replay_timeout: float = DEFAULT_REPLAY_TIMEOUT,
        stream: KVEventStream | None = None,
        monitor: bool = False,
    ) -> None:
        check_endpoint(endpoint, "--endpoint")
        if replay_endpoint is not None:
            check_endpoint(replay_endpoint, "--replay-endpoint")
        topic_bytes = check_topic(topic)
        self.endpoint = endpoint
        self.replay_endpoint = replay_endpoint
        self.bind = bind
        self.stream = stream or KVEventStream(topic, replay=replay_endpoint is not None, replay_timeout=replay_timeout)
        self.connection = "binding" if bind else "connecting"
        self.replay_connection = None if replay_endpoint is None else "idle"
        self.last_frame: float | None = None  # monotonic time of the last frame received
        self.started = time.monotonic()
        self._ctx: zmq.Context[Socket] | None = zmq.Context()
        self._sub: Socket | None = None
        self._dealer: Socket | None = None
        self._mon: Socket | None = None
        self._poller = zmq.Poller()
        # A frame larger than any payload the stream accepts makes libzmq drop the connection
        # before the frame is buffered (the publisher reconnects; its batches since are gaps).
        self._max_msg = self.stream.max_payload + 1024
        try:
            sub = self._sub = self._ctx.socket(zmq.SUB)
            sub.setsockopt(zmq.LINGER, 0)
            sub.setsockopt(zmq.MAXMSGSIZE, self._max_msg)
            sub.setsockopt(zmq.RCVHWM, hwm)
            sub.setsockopt(zmq.SUBSCRIBE, topic_bytes)
            if monitor:
                self._mon = sub.get_monitor_socket()
            try:
                if bind:
                    sub.bind(endpoint)
                    self.connection = "listening"
                else:
                    sub.connect(endpoint)
            except zmq.ZMQError as e:
                raise endpoint_error("--endpoint", endpoint, e) from None
            self._poller.register(sub, zmq.POLLIN)
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
        return self._sub.getsockopt_string(zmq.LAST_ENDPOINT)

    def _new_dealer(self) -> None:
        """(Re)create the replay socket, so that stale replies of an abandoned replay are dropped."""
        endpoint = self.replay_endpoint
        if self._ctx is None or endpoint is None:
            raise RuntimeError("subscriber is closed or has no replay endpoint")
        if self._dealer is not None:
            self._poller.unregister(self._dealer)
            self._dealer.close(linger=0)
            self._dealer = None
        d = self._ctx.socket(zmq.DEALER)
        d.setsockopt(zmq.LINGER, 0)
        d.setsockopt(zmq.MAXMSGSIZE, self._max_msg)
        d.setsockopt(zmq.RCVHWM, 2 * (DEFAULT_BUFFER_STEPS + 1))
        try:
            d.connect(endpoint)
        except zmq.ZMQError as e:
            d.close(linger=0)
            raise endpoint_error("--replay-endpoint", endpoint, e) from None
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
                self._dealer.send_multipart(replay_request_frames(start), flags=zmq.NOBLOCK)
                self.replay_connection = f"replay from seq {start} requested"
            except zmq.ZMQError:
                self.replay_connection = "replay request could not be sent"
                out += self.stream.replay_send_failed(now)
        return out

    def _monitor_events(self, mon: Socket) -> None:
        while True:
            try:
                msg = recv_monitor_message(mon, flags=zmq.NOBLOCK)
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

    def _drain(self, sock: Socket) -> Iterator[list[bytes]]:
        """The messages waiting on a socket, one at a time (the caller decodes each before the
        next is taken), at most DRAIN of them or DRAIN_BYTES of frames; the rest wait for the
        next poll."""
        size = 0
        for _ in range(self.DRAIN):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            size += sum(len(f) for f in frames)
            yield frames
            del frames
            if size >= self.DRAIN_BYTES:
                return

    def poll(self, timeout: float) -> list[AppliedBatch]:
        """Wait up to ``timeout`` seconds for frames; apply them; service replays."""
        stream, sub = self.stream, self._sub
        if sub is None:
            raise RuntimeError("subscriber is closed")
        now = time.monotonic()
        out = self._send_replay_requests(now)
        wait = max(0.0, timeout)
        deadline = stream.replay_deadline
        if deadline is not None:
            wait = min(wait, max(0.0, deadline - now))
        ready = dict(self._poller.poll(int(wait * 1000)))
        if sub in ready:
            for frames in self._drain(sub):
                out += stream.feed_live(frames)
            self.last_frame = time.monotonic()
        if self._dealer is not None and self._dealer in ready:
            for frames in self._drain(self._dealer):
                out += stream.feed_replay(frames)
                if not stream.replay_in_flight and self.replay_connection:
                    self.replay_connection = "replay answered"
            self.last_frame = time.monotonic()
        if self._mon is not None and self._mon in ready:
            self._monitor_events(self._mon)
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

    def __exit__(self, *exc: object) -> None:
        self.close()
