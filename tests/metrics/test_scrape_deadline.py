"""The live page's /metrics scrape ends at its deadline however slowly a server answers: a real
server on 127.0.0.1 that trickles its head or its body one byte at a time, each byte well inside
the per-read timeout. The bound checked is generous (a guard that the deadline is for the whole
exchange, not a speed test)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from explorer.errors import BadInput
from explorer.metrics.scrape import fetch

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n\r\n"


@pytest.fixture
def trickler(request) -> Iterator[str]:
    """A server sending HEAD (at once, or a byte at a time) then a body a byte every 0.2 s."""
    slow_head = request.param
    srv = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.recv(65536)
            try:
                if slow_head:
                    for b in HEAD:
                        conn.sendall(bytes([b]))
                        if stop.wait(0.2):
                            return
                else:
                    conn.sendall(HEAD)
                while not stop.wait(0.2):
                    conn.sendall(b"#")
            except OSError:
                return

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}/metrics"
    finally:
        stop.set()
        srv.close()
        t.join(timeout=10)


@pytest.mark.parametrize("trickler", [False, True], ids=["slow-body", "slow-head"], indirect=True)
def test_a_trickling_server_is_cut_at_the_whole_deadline(trickler):
    start = time.monotonic()
    with pytest.raises(BadInput, match="no whole answer within 1 s") as e:
        fetch(trickler, timeout=1.0)
    held = time.monotonic() - start
    assert "\n" not in str(e.value)
    assert held < 10.0, held  # per-read timeouts would hold it for the whole trickle (20 s and more)
