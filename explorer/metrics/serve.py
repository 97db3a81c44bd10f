"""``metrics --serve``: the exposition at http://127.0.0.1:PORT/metrics while the replay runs.

One step op every ``pace`` seconds (other ops at once), after serving the initial exposition
(every counter at 0) for one pace, so that a scraper sees the counters start at zero, as it
sees a freshly started vLLM. After the last op the final exposition stays up until Ctrl-C,
which ends the command cleanly (exit 0), as SIGTERM does. Loopback only: the address is fixed, never a
user's. Only ``GET /metrics`` answers; every other path is 404, every other method 405.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from explorer.errors import BadInput
from explorer.metrics.http_server import MetricsHTTPServer
from explorer.metrics.replay import MetricsRecorder
from explorer.scenario.trace import Trace

HOST = "127.0.0.1"


class Exposition:
    """The text the server hands out, replaced whole after each op."""

    def __init__(self, text: str) -> None:
        self._lock = threading.Lock()
        self._body = text.encode("utf-8")

    def set(self, text: str) -> None:
        body = text.encode("utf-8")
        with self._lock:
            self._body = body

    def get(self) -> bytes:
        with self._lock:
            return self._body


def make_server(port: int, exposition: Exposition) -> MetricsHTTPServer:
    """The server for ``exposition`` on HOST:``port``, not yet started; BadInput when the port is taken."""
    try:
        return MetricsHTTPServer(HOST, port, exposition.get, CONTENT_TYPE_PLAIN_0_0_4)  # what generate_latest writes
    except OSError as exc:
        raise BadInput(f"--serve {port}: cannot listen on {HOST}:{port} ({exc.strerror or exc})") from None


def serve(
    trace: Trace,
    port: int,
    pace: float,
    sleep: Callable[[float], None] = time.sleep,
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
    stop: threading.Event | None = None,
) -> int:
    """Replay ``trace``'s metrics in real time on ``port`` until Ctrl-C or SIGTERM (or ``stop``
    is set, from another thread)."""
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        _stop_on_signals(stop)
    rec = MetricsRecorder.for_scenario(trace.scenario, pace)
    exposition = Exposition(rec.exposition())
    server = make_server(port, exposition)
    server.start()
    try:
        log(f"serving http://{HOST}:{server.server_address[1]}/metrics")
        sleep(pace)
        steps = [s for s in trace.steps if s.op.op == "step"]
        done = 0
        for step in trace.steps:
            if stop.is_set():
                break
            p = rec.feed(step)
            exposition.set(rec.exposition())
            if step.op.op == "step":
                done += 1
                log(f"step {done}/{len(steps)} (op {step.index + 1}): queries {p.queries}, hits {p.hits}")
                sleep(pace)
        log(f"replay done: {rec.log().text}")
        log("serving the final exposition; Ctrl-C ends")
        while not stop.is_set():
            sleep(min(pace, 0.5))
    except KeyboardInterrupt:
        log("stopped")
    finally:
        server.close()
    return 0


def _stop_on_signals(stop: threading.Event) -> None:
    """The first Ctrl-C or SIGTERM interrupts the replay (even where the parent ignored SIGINT,
    as for a background job); later ones are ignored, so that a second Ctrl-C while the server
    closes still ends the command with exit 0."""

    def first(signum: int, frame: object) -> None:
        if stop.is_set():
            return
        stop.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, first)
    signal.signal(signal.SIGTERM, first)
