"""ZMQ endpoints as vLLM uses them: checks, data-parallel offsets, and the bind-or-connect rule.

- bind or connect: the PUB socket binds only when the endpoint contains ``*`` or ``::`` or is
  ``ipc://`` / ``inproc://``; otherwise it *connects* (so ``tcp://127.0.0.1:5557`` connects to
  a subscriber that binds). ``tcp://*:0`` binds the node's IP on a port the OS picks.
- data parallel ranks: both endpoints are offset by the rank (`offset_endpoint_port`).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from typing import overload

from explorer.errors import BadInput


@overload
def offset_endpoint_port(endpoint: str, data_parallel_rank: int) -> str: ...
@overload
def offset_endpoint_port(endpoint: None, data_parallel_rank: int) -> None: ...
@overload
def offset_endpoint_port(endpoint: str | None, data_parallel_rank: int) -> str | None: ...


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


# One grammar for every endpoint the explorer opens (docs/design.md, section 7):
#   tcp://HOST:PORT    HOST = * | a dotted IPv4 address | [IPv6 address] | a DNS name or
#                      interface name (letters, digits, '-', '.'); PORT = * | 0..65535 in ASCII
#   ipc://PATH         1..107 bytes of UTF-8 (a Unix socket path), no whitespace or control
#   inproc://NAME      1..256 characters, no whitespace or control
# Refused, among others: an IPv6 zone id (`[::1%lo]`), which swallows what follows it, and
# libzmq's `source;destination` form (`tcp://[::1%lo]:0;127.0.0.3:5701` is read by libzmq as
# source ::1, destination 127.0.0.3): neither fits the grammar.
MAX_ENDPOINT_CHARS = 1024
_HOST_NAME = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?"
)
_PORT = re.compile(r"\*|[0-9]{1,5}")
_FORM = "expected tcp://HOST:PORT, ipc://PATH or inproc://NAME"


def check_endpoint(endpoint: str, what: str) -> str:
    """The endpoint, if it fits the one grammar above; else a one-line BadInput saying why."""
    if not isinstance(endpoint, str) or not endpoint.strip():
        raise BadInput(f"{what}: empty endpoint")
    shown = repr(endpoint) if len(endpoint) <= 80 else repr(endpoint[:77] + "...")
    if len(endpoint) > MAX_ENDPOINT_CHARS:
        raise BadInput(f"{what} {shown}: longer than {MAX_ENDPOINT_CHARS} characters")
    _check_text(endpoint, f"{what} {shown}")
    if any(c.isspace() or not c.isprintable() for c in endpoint):
        raise BadInput(f"{what} {shown}: an endpoint has no spaces or control characters")
    scheme, sep, rest = endpoint.partition("://")
    if not sep or scheme not in ("tcp", "ipc", "inproc"):
        raise BadInput(f"{what} {shown}: {_FORM}")
    if not rest:
        raise BadInput(f"{what} {shown}: nothing after the scheme")
    if scheme == "tcp":
        _check_tcp(rest, f"{what} {shown}")
    elif scheme == "ipc":
        if len(rest.encode("utf-8")) > 107:
            raise BadInput(f"{what} {shown}: an ipc path has at most 107 bytes")
    elif len(rest) > 256:
        raise BadInput(f"{what} {shown}: an inproc name has at most 256 characters")
    return endpoint


MAX_TOPIC_CHARS = 1024


def check_topic(topic: str, what: str = "--topic") -> bytes:
    """A topic as the bytes ZMQ filters on: UTF-8 text of at most MAX_TOPIC_CHARS characters."""
    if not isinstance(topic, str):
        raise BadInput(f"{what}: expected text, got {type(topic).__name__}")
    if len(topic) > MAX_TOPIC_CHARS:
        raise BadInput(f"{what}: longer than {MAX_TOPIC_CHARS} characters")
    try:
        return topic.encode("utf-8")
    except UnicodeEncodeError as e:
        raise BadInput(f"{what}: not valid UTF-8 text (an undecodable byte at character {e.start + 1})") from None


def _check_text(rest: str, where: str) -> None:
    try:
        rest.encode("utf-8")
    except UnicodeEncodeError:
        raise BadInput(f"{where}: not valid UTF-8 text") from None


def _check_tcp(rest: str, where: str) -> None:
    if ";" in rest:
        raise BadInput(f"{where}: a source;destination endpoint is not accepted; give one HOST:PORT")
    host, sep, port = rest.rpartition(":")
    if not sep or not host:
        raise BadInput(f"{where}: expected tcp://HOST:PORT")
    if not _PORT.fullmatch(port) or (port != "*" and int(port) > 65535):
        raise BadInput(f"{where}: port must be * or 0..65535 in ASCII digits")
    if host == "*":
        return
    if host.startswith("[") and host.endswith("]"):
        addr = host[1:-1]
        if "%" in addr:
            raise BadInput(f"{where}: an IPv6 zone id (%...) is not accepted")
        try:
            ipaddress.IPv6Address(addr)
        except ValueError:
            raise BadInput(f"{where}: {host} is not an IPv6 address") from None
        return
    if all(c.isdigit() or c == "." for c in host) and host.isascii():
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise BadInput(f"{where}: {host} is not an IPv4 address") from None
        return
    if not _HOST_NAME.fullmatch(host):
        raise BadInput(f"{where}: {host!r} is not a host: expected *, an IPv4 address, [IPv6] or a host name")


def node_ip() -> str:
    """This node's outward IP, found by routing a UDP socket (no packet is sent)."""
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


def tcp_uri(ip: str, port: int) -> str:
    """A tcp:// endpoint for an IP address, IPv6 in brackets."""
    return f"tcp://[{ip}]:{port}" if ":" in ip else f"tcp://{ip}:{port}"


def endpoint_error(what: str, endpoint: str, err: Exception) -> BadInput:
    """The one-line BadInput for an endpoint ZMQ refused (a port in use, a bad address)."""
    return BadInput(f"{what} {endpoint!r}: {err}")
