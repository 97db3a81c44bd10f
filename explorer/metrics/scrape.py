"""Read a running vLLM's ``/metrics``: the prefix-cache counters, summed over engines.

The URL follows the live events page's rule: ``http://HOST:PORT[/path]`` with a loopback host
(127.0.0.0/8, ``localhost``, ``::1``) or one the app was started to allow. Every size has a
cap: the body (MAX_BODY bytes), its lines (MAX_LINES) and the wait (TIMEOUT_S, for the whole
exchange). Anything a
hostile or broken server answers (no answer, a redirect, a status other than 200, bytes that are
not UTF-8 text, a body over the cap, text prometheus_client's parser cannot read, no
vllm:prefix_cache_* samples, a value that is not a counter's) is one `BadInput` line saying what
was wrong.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import math
import socket
import threading
import urllib.parse
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from explorer.errors import BadInput
from explorer.numbers import is_int

MAX_BODY = 8 << 20  # vLLM's /metrics is tens of KB
MAX_LINES = 200_000
MAX_URL = 2000
TIMEOUT_S = 3.0
COUNTERS = {
    "vllm:prefix_cache_queries_total": "queries",
    "vllm:prefix_cache_hits_total": "hits",
    "vllm:external_prefix_cache_queries_total": "external_queries",
    "vllm:external_prefix_cache_hits_total": "external_hits",
    "vllm:prompt_tokens_total": "prompt_tokens",
    "vllm:prompt_tokens_cached_total": "prompt_tokens_cached",
}


@dataclass(frozen=True)
class Scraped:
    """One scrape: each counter summed over its label sets (engines, models)."""

    queries: float
    hits: float
    external_queries: float
    external_hits: float
    prompt_tokens: float
    prompt_tokens_cached: float
    samples: int  # vllm:* sample lines read


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(url: str, allow: frozenset[str]) -> str:
    """The URL to scrape (``/metrics`` when no path is given), or BadInput."""
    if len(url) > MAX_URL or not url.isascii() or not url.isprintable() or " " in url:
        raise BadInput(f"metrics URL: expected an http:// URL of printable ASCII up to {MAX_URL} characters")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.netloc or parts.username or parts.password:
        raise BadInput(f"metrics URL {url!r}: expected http://HOST:PORT/metrics (no user, no https)")
    host = (parts.hostname or "").lower()
    try:
        port_text = parts.netloc.rpartition(":")[2] if ":" in parts.netloc.rpartition("]")[2] else ""
        if port_text and not (is_int(port_text) and 0 < int(port_text) < 65536):
            raise ValueError
        _ = parts.port
    except ValueError:
        raise BadInput(f"metrics URL {url!r}: the port must be a number in ASCII digits 1-65535") from None
    if not _loopback(host) and host not in allow:
        raise BadInput(
            f"metrics URL {url!r}: host {host!r} is not loopback; start the app with "
            f"EXPLORER_LIVE_ALLOW_HOSTS={host} to allow it"
        )
    return urllib.parse.urlunsplit(("http", parts.netloc, parts.path or "/metrics", parts.query, ""))


def fetch(url: str, timeout: float = TIMEOUT_S) -> str:
    """GET the URL (already checked), at most MAX_BODY bytes, as text, all within ``timeout``
    seconds: the deadline is for the whole exchange (connect, head, body), not for each read, so
    a server that trickles a byte at a time cannot hold the caller (the live page's once-a-second
    fragment) past it. At the deadline a timer shuts the socket down under the blocked read."""
    parts = urllib.parse.urlsplit(url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port or 80, timeout=timeout)
    expired = threading.Event()

    def cut() -> None:
        expired.set()
        sock = conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(timeout, cut)
    timer.daemon = True
    timer.start()
    try:
        conn.request("GET", path, headers={"Accept": "text/plain"})
        r = conn.getresponse()
        if 300 <= r.status < 400:
            raise BadInput(f"the server answered a redirect ({r.status}); give the /metrics URL itself")
        if r.status != 200:
            raise BadInput(f"the server answered HTTP {r.status}, not 200")
        body = r.read(MAX_BODY + 1)
        if expired.is_set():
            raise TimeoutError("timed out")
    except (http.client.HTTPException, OSError, ValueError) as exc:
        reason = f"no whole answer within {timeout:g} s" if expired.is_set() else getattr(exc, "reason", exc)
        raise BadInput(f"could not read {url}: {reason}") from None
    finally:
        timer.cancel()
        conn.close()
    if len(body) > MAX_BODY:
        raise BadInput(f"the answer is over {MAX_BODY >> 20} MiB: not a vLLM /metrics page")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput("the answer is not UTF-8 text: not a Prometheus exposition") from None


def parse_counters(text: str) -> Scraped:
    """The prefix-cache counters of an exposition, each summed over its label sets. The text is
    read by prometheus_client's own parser, so the format's escapes, quoted braces in label
    values, timestamps and comments read as any Prometheus client reads them."""
    if text.count("\n") + (not text.endswith("\n")) > MAX_LINES:
        raise BadInput(f"the answer has more than {MAX_LINES:,} lines: not a vLLM /metrics page")
    sums = dict.fromkeys(COUNTERS.values(), 0.0)
    found: set[str] = set()
    samples = 0
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if not sample.name.startswith("vllm:"):
                    continue
                samples += 1
                key = COUNTERS.get(sample.name)
                if key is None:
                    continue
                if not math.isfinite(sample.value) or sample.value < 0:
                    raise BadInput(f"{sample.name} = {sample.value!r} is not a counter value")
                sums[key] += sample.value
                found.add(key)
    except BadInput:
        raise
    except ValueError as exc:  # the parser's one error type for text it cannot read
        raise BadInput(
            f"the answer is not a Prometheus text exposition ({str(exc)[:200]}): is this vLLM's /metrics?"
        ) from None
    if not {"queries", "hits"} <= found:
        raise BadInput("no vllm:prefix_cache_queries_total / _hits_total samples: is this vLLM's /metrics?")
    return Scraped(**sums, samples=samples)


def scrape(url: str, allow: frozenset[str]) -> Scraped:
    return parse_counters(fetch(check_url(url, allow)))
