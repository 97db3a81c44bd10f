"""The live events page's machinery, without Streamlit: endpoint lines, the allow-list, snapshots.

Which hosts: only loopback (127.0.0.0/8, ``localhost``, ``::1``) and ``ipc://`` paths, unless
the app was started with an allow-list, either ``EXPLORER_LIVE_ALLOW_HOSTS=host1,host2`` in the
environment or ``streamlit run app.py -- --live-allow-hosts host1,host2``. The list names hosts
exactly as typed in endpoints; ``*`` in the list allows binding on every interface.

Sockets live in one background thread per browser session (a `LiveSession`, which the page keeps
in st.session_state under ``SESSION``), never in module state. The thread polls with short
timeouts, publishes an immutable snapshot under a lock, and stops by itself when the page has
not been drawn for ``IDLE_STOP_S`` seconds (a closed tab), closing its sockets.
"""

from __future__ import annotations

import heapq
import ipaddress
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from explorer.errors import BadInput
from explorer.events.endpoints import check_endpoint
from explorer.events.instance import AppliedBatch, CacheInstance
from explorer.numbers import is_int

if TYPE_CHECKING:
    from explorer.events.subscriber import KVEventSubscriber

SESSION = "live_session"  # the st.session_state key of the browser session's LiveSession

ALLOW_ENV = "EXPLORER_LIVE_ALLOW_HOSTS"
ALLOW_FLAG = "--live-allow-hosts"
MAX_ENDPOINTS = 8
SNAPSHOT_EVERY_S = 0.25
IDLE_STOP_S = 120.0
RECENT = 20
MAX_HASH_ROWS = 200
MAX_PREFIX_ROWS = 50


# ---- endpoints and the allow-list ----------------------------------------------------------------


def allowed_hosts(environ: Mapping[str, str] | None = None, argv: Sequence[str] | None = None) -> frozenset[str]:
    """Hosts beyond loopback that the app was started to allow (env var or CLI flag)."""
    environ = os.environ if environ is None else environ
    argv = sys.argv if argv is None else argv
    items: list[str] = []
    items += environ.get(ALLOW_ENV, "").split(",")
    for i, arg in enumerate(argv):
        if arg == ALLOW_FLAG and i + 1 < len(argv):
            items += argv[i + 1].split(",")
        elif arg.startswith(ALLOW_FLAG + "="):
            items += arg.split("=", 1)[1].split(",")
    return frozenset(h.strip().lower().strip("[]") for h in items if h.strip())


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    if "%" in host:  # an IPv6 scope id can swallow the rest of an endpoint (libzmq's source;destination)
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def endpoint_host(endpoint: str) -> str | None:
    """The host of a tcp:// endpoint, lowercase and without brackets; None for ipc/inproc."""
    if not endpoint.startswith("tcp://"):
        return None
    host = endpoint[len("tcp://") :].rpartition(":")[0]
    return host.lower().strip("[]")


def check_host(endpoint: str, allow: frozenset[str], what: str) -> None:
    """Reject an endpoint that is not loopback or ipc and not in the allow-list (BadInput)."""
    port = endpoint.rpartition(":")[2] if endpoint.startswith("tcp://") else "*"
    if port != "*" and not (is_int(port) and port.strip() == port and not port.startswith("-")):
        raise BadInput(f"{what} {endpoint!r}: the port must be * or a number in ASCII digits 0-65535")
    check_endpoint(endpoint, what)
    if endpoint.startswith("inproc://"):
        raise BadInput(f"{what} {endpoint!r}: inproc endpoints exist only inside one process")
    host = endpoint_host(endpoint)
    if host is None or _is_loopback(host):
        return
    if host in ("*", "0.0.0.0", "::"):
        if "*" in allow:
            return
        raise BadInput(
            f"{what} {endpoint!r}: listening on every interface needs '*' in the allow-list "
            f"({ALLOW_ENV} or {ALLOW_FLAG} when starting the app)"
        )
    if host not in allow:
        raise BadInput(
            f"{what} {endpoint!r}: host {host!r} is not loopback; start the app with "
            f"{ALLOW_ENV}={host} (or {ALLOW_FLAG} {host}) to allow it"
        )


@dataclass(frozen=True)
class EndpointSpec:
    endpoint: str
    replay_endpoint: str | None = None


def parse_endpoints(text: str, allow: frozenset[str]) -> list[EndpointSpec]:
    """One ``ENDPOINT [REPLAY_ENDPOINT]`` per line; blank lines and ``#`` comments skipped."""
    specs = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) > 2:
            raise BadInput(f"line {n}: expected ENDPOINT [REPLAY_ENDPOINT], got {len(parts)} words")
        check_host(parts[0], allow, f"line {n}: endpoint")
        replay = parts[1] if len(parts) == 2 else None
        if replay is not None:
            check_host(replay, allow, f"line {n}: replay endpoint")
        specs.append(EndpointSpec(parts[0], replay))
    if not specs:
        raise BadInput("no endpoint given")
    if len(specs) > MAX_ENDPOINTS:
        raise BadInput(f"{len(specs)} endpoints: at most {MAX_ENDPOINTS}")
    seen = set()
    for s in specs:
        if s.endpoint in seen:
            raise BadInput(f"endpoint {s.endpoint} is listed twice")
        seen.add(s.endpoint)
    return specs


# ---- snapshots: what the page draws ---------------------------------------------------------------


def fmt_hash(h: Any) -> str:
    return h.hex() if isinstance(h, bytes) else str(h)


@dataclass(frozen=True)
class InstanceSnap:
    topic: str
    rank: int | None
    blocks: int
    distinct: int
    duplicates: int
    block_size: int | None
    counters: dict[str, int]
    hashes: list[tuple[str, int]]  # (hash, copies), most copies first, capped
    prefixes: list[tuple[int, str, str]]  # (blocks, first hash, last hash), longest first
    by_medium: dict[str, int]


@dataclass(frozen=True)
class EndpointSnap:
    endpoint: str
    replay_endpoint: str | None
    connection: str
    replay_status: str | None
    error: str | None
    summary: dict[str, int]
    instances: list[InstanceSnap]
    recent: list[dict[str, Any]]
    last_frame_age: float | None
    running_for: float
    malformed_reasons: dict[str, int]
    last_malformed: str | None
    pending: int


def _instance_snap(inst: CacheInstance) -> InstanceSnap:
    hashes = inst.hashes
    top = heapq.nlargest(MAX_HASH_ROWS, hashes.items(), key=lambda kv: kv[1])
    chains = inst.prefixes(MAX_PREFIX_ROWS)
    blocks = sum(hashes.values())
    return InstanceSnap(
        topic=inst.key[0],
        rank=inst.key[1],
        blocks=blocks,
        distinct=len(hashes),
        duplicates=blocks - len(hashes),
        block_size=inst.block_size,
        counters=inst.counters(),
        hashes=[(fmt_hash(h), n) for h, n in top],
        prefixes=[(len(c), fmt_hash(c[0]), fmt_hash(c[-1])) for c in chains if c],
        by_medium={str(m): sum(c.values()) for m, c in inst.by_medium.items() if c},
    )


def _recent_row(a: AppliedBatch) -> dict[str, Any]:
    """One row of the "Recent batches" table."""
    return {
        "seq": a.seq,
        "instance": f"{a.instance[0] or '(no topic)'} / dp {a.instance[1]}",
        "events": ", ".join(type(ev).__name__ for ev in a.batch.events[:6])
        + (" ..." if len(a.batch.events) > 6 else ""),
        "replayed": a.replayed,
        "ts": a.batch.ts,
    }


class _Endpoint:
    """One endpoint's subscriber and its recent batches; touched only by the worker thread."""

    def __init__(self, spec: EndpointSpec, bind: bool, topic: str) -> None:
        self.spec = spec
        self.bind = bind
        self.topic = topic
        self.sub: KVEventSubscriber | None = None
        self.error: str | None = None
        self.recent: deque[dict[str, Any]] = deque(maxlen=RECENT)
        self.started = time.monotonic()

    def open(self) -> None:
        from explorer.events.subscriber import KVEventSubscriber  # pyzmq only once connecting

        try:
            self.sub = KVEventSubscriber(
                self.spec.endpoint, self.spec.replay_endpoint, bind=self.bind, topic=self.topic, monitor=True
            )
        except BadInput as e:
            self.error = str(e)

    def snap(self) -> EndpointSnap:
        now = time.monotonic()
        sub = self.sub
        if sub is None:
            return EndpointSnap(
                self.spec.endpoint,
                self.spec.replay_endpoint,
                "not open",
                None,
                self.error,
                {},
                [],
                [],
                None,
                now - self.started,
                {},
                None,
                0,
            )
        s = sub.stream
        return EndpointSnap(
            endpoint=self.spec.endpoint,
            replay_endpoint=self.spec.replay_endpoint,
            connection=sub.connection,
            replay_status=sub.replay_connection,
            error=self.error,
            summary=s.summary(),
            instances=[_instance_snap(i) for i in s.instances.values()],
            recent=list(self.recent),
            last_frame_age=None if sub.last_frame is None else now - sub.last_frame,
            running_for=now - self.started,
            malformed_reasons=dict(s.malformed_reasons),
            last_malformed=s.last_malformed,
            pending=s.pending,
        )

    def close(self) -> None:
        if self.sub is not None:
            self.sub.close()
            self.sub = None


class LiveSession:
    """The sockets of one browser session, run by one daemon thread."""

    def __init__(self, specs: list[EndpointSpec], bind: bool, topic: str) -> None:
        self.specs = specs
        self.bind = bind
        self.topic = topic
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._snapshot: list[EndpointSnap] = []
        self._seen = time.monotonic()
        self.stopped_reason: str | None = None
        self._thread = threading.Thread(target=self._run, name="live-events", daemon=True)

    def start(self) -> LiveSession:
        self._thread.start()
        return self

    def touch(self) -> None:
        """The page was drawn: keep running."""
        self._seen = time.monotonic()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def snapshot(self) -> list[EndpointSnap]:
        with self._lock:
            return self._snapshot

    def stop(self, timeout: float = 3.0) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _publish(self, eps: list[_Endpoint]) -> None:
        snaps = [e.snap() for e in eps]
        with self._lock:
            self._snapshot = snaps

    def _run(self) -> None:
        eps = [_Endpoint(s, self.bind, self.topic) for s in self.specs]
        try:
            for e in eps:
                e.open()
            self._publish(eps)
            live = [(e, e.sub) for e in eps if e.sub is not None]
            last_snap = 0.0
            changed = False
            while not self._stop.is_set():
                if time.monotonic() - self._seen > IDLE_STOP_S:
                    self.stopped_reason = f"stopped: the page was not open for {IDLE_STOP_S:.0f} s"
                    break
                if not live:
                    self._stop.wait(0.2)
                else:
                    wait = 0.05 if len(live) == 1 else 0.01
                    for e, sub in live:
                        applied = sub.poll(wait)
                        changed = changed or bool(applied)
                        for a in applied:
                            e.recent.appendleft(_recent_row(a))
                now = time.monotonic()
                if now - last_snap >= (SNAPSHOT_EVERY_S if changed else 1.0):
                    self._publish(eps)
                    last_snap = now
                    changed = False
        except Exception as err:  # a bug must not leave sockets open; show it instead
            self.stopped_reason = f"stopped by an error: {type(err).__name__}: {err}"
        finally:
            try:
                self._publish(eps)
            finally:
                for e in eps:
                    e.close()
