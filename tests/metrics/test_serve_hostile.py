"""`metrics --serve` against hostile clients on 127.0.0.1: idle sockets, half-sent requests,
resets, other methods, 2,000 requests at once, a second Ctrl-C. The server is the real command
in a child process; every wait is a guard against a hang, not a speed test."""

from __future__ import annotations

import selectors
import signal
import socket
import struct
import time
import urllib.request
from collections.abc import Iterator

import pytest

from explorer.metrics.http_server import HEAD_TIMEOUT_S
from tests.metrics.helpers import LESSON, sample, start_server, wait_for_line

GUARD_S = 120.0
MEMORY = 512 << 20  # the server's address space: a thread per connection (8 MiB of stack each) runs out


@pytest.fixture(scope="module")
def server() -> Iterator[int]:
    proc, port = start_server(LESSON, 0.01, MEMORY)
    try:
        wait_for_line(proc, "serving the final exposition")
        yield port
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "Traceback" not in err, err[-3000:]


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=GUARD_S) as r:
        return r.read().decode()


def raw(port: int, request: bytes) -> bytes:
    """Send ``request``, read the answer until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=GUARD_S) as s:
        s.sendall(request)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_400_idle_sockets_do_not_stop_scrapes(server):
    idle = [socket.create_connection(("127.0.0.1", server), timeout=GUARD_S) for _ in range(400)]
    try:
        for _ in range(5):
            assert sample(scrape(server), "vllm:prefix_cache_hits_total") == 96
    finally:
        for s in idle:
            s.close()


def test_a_half_sent_request_is_dropped_at_the_head_deadline(server):
    with socket.create_connection(("127.0.0.1", server), timeout=GUARD_S) as s:
        s.sendall(b"GET /metr")
        start = time.monotonic()
        assert s.recv(100) == b""  # closed by the server, no answer
        held = time.monotonic() - start
    assert held < HEAD_TIMEOUT_S + 30, held
    assert sample(scrape(server), "vllm:prefix_cache_hits_total") == 96


def test_a_slow_request_is_dropped_even_while_it_trickles(server):
    with socket.create_connection(("127.0.0.1", server), timeout=GUARD_S) as s:
        start = time.monotonic()
        closed = False
        while time.monotonic() - start < HEAD_TIMEOUT_S + 30:
            try:
                s.sendall(b"X")
            except OSError:
                closed = True
                break
            time.sleep(0.2)
        assert closed, "a request sent a byte at a time was held past its deadline"


def test_resets_print_no_traceback_and_the_server_keeps_answering(server):
    linger0 = struct.pack("ii", 1, 0)  # close() sends RST
    for request in (b"", b"GET /metrics HTTP/1.1\r\n", b"GET /metrics HTTP/1.1\r\n\r\n"):
        for _ in range(20):
            s = socket.create_connection(("127.0.0.1", server), timeout=GUARD_S)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger0)
            if request:
                s.sendall(request)
            s.close()
    assert sample(scrape(server), "vllm:prefix_cache_hits_total") == 96  # the fixture checks stderr


@pytest.mark.parametrize("method", ["HEAD", "OPTIONS", "POST", "PUT", "DELETE", "PATCH", "BREW"])
def test_other_methods_are_405(server, method):
    answer = raw(server, f"{method} /metrics HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert answer.split(b" ", 2)[1] == b"405", answer[:200]
    assert b"\r\nAllow: GET\r\n" in answer


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /other HTTP/1.1\r\n\r\n", b"404"),
        (b"GET /metrics?x=1 HTTP/1.0\r\n\r\n", b"200"),
        (b"\x16\x03\x01\x02\x00\r\n\r\n", b"400"),  # a TLS hello, say
        (b"GET /metrics HTTP/1.1\r\n" + b"X: " + b"y" * 20_000 + b"\r\n\r\n", b"431"),
    ],
)
def test_other_requests(server, request_bytes, status):
    assert raw(server, request_bytes).split(b" ", 2)[1] == status


def test_2000_concurrent_requests_are_all_answered(server):
    """2,000 connections opened at once, each sending its GET: every one gets its 200."""
    sel = selectors.DefaultSelector()
    got: dict[socket.socket, bytearray] = {}
    for _ in range(2000):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", server))
        sel.register(s, selectors.EVENT_WRITE)
        got[s] = bytearray()
    done = 0
    end = time.monotonic() + GUARD_S
    try:
        while done < len(got) and time.monotonic() < end:
            for key, ev in sel.select(1.0):
                s = key.fileobj
                assert isinstance(s, socket.socket)
                if ev & selectors.EVENT_WRITE:
                    s.send(b"GET /metrics HTTP/1.1\r\n\r\n")
                    sel.modify(s, selectors.EVENT_READ)
                    continue
                try:
                    chunk = s.recv(65536)
                except ConnectionError:
                    chunk = b""
                got[s] += chunk
                if not chunk:
                    sel.unregister(s)
                    done += 1
    finally:
        for s in got:
            s.close()
        sel.close()
    ok = sum(bytes(b).startswith(b"HTTP/1.1 200 ") and b"vllm:prefix_cache_hits_total" in b for b in got.values())
    assert ok == 2000, f"{ok} of 2,000 answered"


def test_a_second_ctrl_c_still_exits_0():
    proc, port = start_server(LESSON, 0.01, MEMORY)
    try:
        wait_for_line(proc, "serving the final exposition")
        idle = [socket.create_connection(("127.0.0.1", port), timeout=GUARD_S) for _ in range(50)]
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        for s in idle:
            s.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, (proc.returncode, err[-2000:])
    assert "Traceback" not in err and "stopped" in err
