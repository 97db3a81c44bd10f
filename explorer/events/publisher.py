"""KVEventPublisher: vLLM's ZMQ publisher (a PUB socket plus a replay ROUTER), single-threaded.

`publish` sends and buffers a batch, `serve` answers replay requests. Frames and the replay
protocol: `explorer.events.wire`; bind or connect: `explorer.events.endpoints`.
"""

from __future__ import annotations

import time
from collections import deque

import zmq

from explorer.core.events import KVEventBatch, encode_batch
from explorer.errors import BadInput
from explorer.events.endpoints import (
    check_endpoint,
    check_topic,
    endpoint_error,
    is_bind_endpoint,
    node_ip,
    offset_endpoint_port,
    tcp_uri,
)
from explorer.events.wire import DEFAULT_BUFFER_STEPS, END_SEQ, live_frames

# vLLM's KVEventsConfig default (its buffer_steps default is wire.DEFAULT_BUFFER_STEPS).
DEFAULT_HWM = 100_000

Socket = zmq.Socket[bytes]


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
        self._topic_bytes = check_topic(topic)
        self.data_parallel_rank = data_parallel_rank
        self.buffer_steps = buffer_steps
        self.linger = linger
        self._node_ip = node_ip_address
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=buffer_steps)
        self._seq = 0
        self.published = 0
        self.replay_requests = 0
        self.invalid_replay_requests = 0
        self._ctx: zmq.Context[Socket] | None = zmq.Context()
        self._pub: Socket | None = None
        self._replay: Socket | None = None
        try:
            pub = self._pub = self._ctx.socket(zmq.PUB)
            pub.set_hwm(hwm)
            try:
                if is_bind_endpoint(self.endpoint):
                    self.endpoint = self._bind(pub, self.endpoint)
                else:
                    pub.connect(self.endpoint)
            except zmq.ZMQError as e:
                raise endpoint_error("--endpoint", self.endpoint, e) from None
            if self.replay_endpoint is not None:
                replay = self._replay = self._ctx.socket(zmq.ROUTER)
                replay.setsockopt(zmq.LINGER, 0)
                replay.setsockopt(zmq.SNDHWM, 2 * (buffer_steps + 1))
                try:
                    self.replay_endpoint = self._bind(replay, self.replay_endpoint)
                except zmq.ZMQError as e:
                    raise endpoint_error("--replay-endpoint", self.replay_endpoint, e) from None
        except BaseException:
            self.close()
            raise

    def _bind(self, sock: Socket, endpoint: str) -> str:
        """Bind; ``tcp://*:0`` binds this node's IP on an OS-chosen port. The bound endpoint."""
        if endpoint != "tcp://*:0":
            sock.bind(endpoint)
            return endpoint
        ip = self._node_ip or node_ip()
        if ":" in ip:
            sock.setsockopt(zmq.IPV6, 1)
        sock.bind(tcp_uri(ip, 0))
        port = sock.getsockopt_string(zmq.LAST_ENDPOINT).rsplit(":", 1)[1]
        return tcp_uri(ip, int(port))

    def last_endpoint(self, which: str = "pub") -> str | None:
        """What ZMQ reports as bound (useful with port 0); None for a connecting PUB."""
        sock = self._pub if which == "pub" else self._replay
        if sock is None:
            return None
        value = sock.getsockopt_string(zmq.LAST_ENDPOINT)
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
        replay = self._replay
        if replay is None:
            if timeout > 0:
                time.sleep(timeout)
            return 0
        served = 0
        wait_ms = int(max(0.0, timeout) * 1000)
        while replay.poll(wait_ms, zmq.POLLIN):
            wait_ms = 0
            frames = replay.recv_multipart()
            if len(frames) != 3:
                self.invalid_replay_requests += 1
                continue
            client, _, start_bytes = frames
            start = int.from_bytes(start_bytes, "big")
            self.replay_requests += 1
            for seq, payload in list(self._buffer):
                if seq >= start:
                    replay.send_multipart([client, b"", self._topic_bytes, seq.to_bytes(8, "big"), payload])
            replay.send_multipart([client, b"", b"", END_SEQ, b""])
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

    def __exit__(self, *exc: object) -> None:
        self.close()
