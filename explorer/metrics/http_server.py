"""The one-page HTTP server behind ``metrics --serve``: one thread, a selector, every size capped.

A thread per connection (the standard library's ThreadingHTTPServer, and prometheus_client's
own ``start_http_server``, which builds on it) lets a few hundred idle sockets exhaust the
process's threads, and its blocking reads hold a slow or half-sent request forever. Here one
thread multiplexes every connection with non-blocking sockets:

- at most MAX_CONNECTIONS are open at once; past that the listening socket is not read, so new
  connections wait in the kernel's accept queue (BACKLOG) instead of failing;
- a request head must arrive whole (at most MAX_HEAD bytes) within HEAD_TIMEOUT_S of the
  connection being accepted, and the answer must be taken within WRITE_TIMEOUT_S; a connection
  past either deadline is closed;
- one request per connection (``Connection: close``), as Prometheus is happy with;
- a peer that resets, or any socket error, closes that connection silently.

Only ``GET /metrics`` (any query) answers 200; other paths are 404, other methods (HEAD and
OPTIONS included) 405 with ``Allow: GET``, a head that is not HTTP 400, an oversized one 431.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

MAX_CONNECTIONS = 512  # well below the default 1,024 open files
BACKLOG = 4096  # the kernel clamps it to net.core.somaxconn
MAX_HEAD = 8192
HEAD_TIMEOUT_S = 5.0
WRITE_TIMEOUT_S = 10.0
LINGER_S = 1.0  # after the answer, what the peer still sends is read (and dropped) this long
_TICK_S = 0.25  # how often the loop looks at the stop flag and the deadlines

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
}


@dataclass(slots=True)
class _Conn:
    sock: socket.socket
    deadline: float
    head: bytearray = field(default_factory=bytearray)
    out: memoryview | None = None
    closing: bool = False  # answered; reading what the peer still sends until it closes


def response(status: int, body: bytes, content_type: str, extra: tuple[tuple[str, str], ...] = ()) -> bytes:
    head = [f"HTTP/1.1 {status} {_REASONS[status]}", f"Content-Type: {content_type}", f"Content-Length: {len(body)}"]
    head += [f"{k}: {v}" for k, v in extra] + ["Connection: close", "", ""]
    return "\r\n".join(head).encode("ascii") + body


def _error(status: int) -> bytes:
    extra = (("Allow", "GET"),) if status == 405 else ()
    return response(status, f"{status} {_REASONS[status]}\n".encode(), "text/plain; charset=utf-8", extra)


def answer(head: bytes, metrics: Callable[[], bytes], content_type: str) -> bytes:
    """The whole response to a request head (the bytes up to the blank line)."""
    line = head.split(b"\n", 1)[0].rstrip(b"\r")
    parts = line.split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/") or not parts[0].isalpha() or not parts[1]:
        return _error(400)
    method, target = parts[0], parts[1]
    if method != b"GET":
        return _error(405)
    if target.split(b"?", 1)[0] != b"/metrics":
        return _error(404)
    return response(200, metrics(), content_type)


class MetricsHTTPServer:
    """Serves ``metrics()`` at ``http://HOST:PORT/metrics`` from a thread of its own.

    ``start()`` binds (OSError when the port is taken) and starts the loop; ``close()`` stops it
    and closes every socket.
    """

    def __init__(self, host: str, port: int, metrics: Callable[[], bytes], content_type: str) -> None:
        self._metrics = metrics
        self._content_type = content_type
        self._listener = socket.create_server((host, port), backlog=BACKLOG)
        self._listener.setblocking(False)
        self.server_address: tuple[str, int] = self._listener.getsockname()[:2]
        self._sel = selectors.DefaultSelector()
        self._conns: dict[int, _Conn] = {}
        self._accepting = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.dropped = 0  # connections closed at a deadline or on a socket error

    def start(self) -> None:
        self._set_accepting(True)
        self._thread = threading.Thread(target=self._loop, name="metrics-http", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        for fd in list(self._conns):
            self._drop(fd, counted=False)
        if self._accepting:
            self._sel.unregister(self._listener)
        self._sel.close()
        self._listener.close()

    # -- the loop --------------------------------------------------------------------------

    def _set_accepting(self, on: bool) -> None:
        if on and not self._accepting:
            self._sel.register(self._listener, selectors.EVENT_READ)
        elif not on and self._accepting:
            self._sel.unregister(self._listener)
        self._accepting = on

    def _loop(self) -> None:
        while not self._stop.is_set():
            for key, events in self._sel.select(_TICK_S):
                if key.fileobj is self._listener:
                    self._accept()
                elif events & selectors.EVENT_READ:
                    self._read(key.fd)
                elif events & selectors.EVENT_WRITE:
                    self._write(key.fd)
            now = time.monotonic()
            for fd, c in [(fd, c) for fd, c in self._conns.items() if c.deadline <= now]:
                self._drop(fd, counted=not c.closing)
            self._set_accepting(len(self._conns) < MAX_CONNECTIONS)

    def _accept(self) -> None:
        while len(self._conns) < MAX_CONNECTIONS:
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of files, or the peer gave up before the accept: try later
                return
            sock.setblocking(False)
            self._conns[sock.fileno()] = _Conn(sock, time.monotonic() + HEAD_TIMEOUT_S)
            self._sel.register(sock, selectors.EVENT_READ)

    def _read(self, fd: int) -> None:
        c = self._conns.get(fd)
        if c is None:
            return
        try:
            data = c.sock.recv(65536 if c.closing else MAX_HEAD + 1 - len(c.head))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(fd, counted=not c.closing)
            return
        if not data or c.closing:  # the peer closed (before a whole head, or after the answer)
            if not data:
                self._drop(fd, counted=False)
            return
        c.head += data
        end = c.head.find(b"\r\n\r\n")
        if end < 0:
            end = c.head.find(b"\n\n")
        if end >= 0:
            out = answer(bytes(c.head[:end]), self._metrics, self._content_type)
        elif len(c.head) > MAX_HEAD:
            out = _error(431)
        else:
            return
        c.out = memoryview(out)
        c.deadline = time.monotonic() + WRITE_TIMEOUT_S
        self._sel.modify(c.sock, selectors.EVENT_WRITE)
        self._write(fd)

    def _write(self, fd: int) -> None:
        c = self._conns.get(fd)
        if c is None or c.out is None:
            return
        try:
            sent = c.sock.send(c.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(fd)
            return
        c.out = c.out[sent:]
        if not c.out:
            # Half-close and read the rest: closing with unread input would reset the
            # connection, and the peer could lose the answer (a 431 to an oversized head, say).
            c.out, c.closing, c.deadline = None, True, time.monotonic() + LINGER_S
            try:
                c.sock.shutdown(socket.SHUT_WR)
            except OSError:
                self._drop(fd, counted=False)
                return
            self._sel.modify(c.sock, selectors.EVENT_READ)

    def _drop(self, fd: int, counted: bool = True) -> None:
        c = self._conns.pop(fd, None)
        if c is None:
            return
        if counted:
            self.dropped += 1
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(c.sock)
        c.sock.close()
