"""ZMQ endpoints as vLLM uses them: checks, data-parallel offsets, and the bind-or-connect rule.

- bind or connect: the PUB socket binds only when the endpoint contains ``*`` or ``::`` or is
  ``ipc://`` / ``inproc://``; otherwise it *connects* (so ``tcp://127.0.0.1:5557`` connects to
  a subscriber that binds). ``tcp://*:0`` binds the node's IP on a port the OS picks.
- data parallel ranks: both endpoints are offset by the rank (`offset_endpoint_port`).
"""

from __future__ import annotations

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


_SCHEMES = ("tcp://", "ipc://", "inproc://")


def check_endpoint(endpoint: str, what: str) -> str:
    """Reject an endpoint that is obviously not a ZMQ endpoint, with a one-line BadInput."""
    if not isinstance(endpoint, str) or not endpoint.strip():
        raise BadInput(f"{what}: empty endpoint")
    if endpoint != endpoint.strip() or any(c.isspace() for c in endpoint):
        raise BadInput(f"{what} {endpoint!r}: an endpoint has no spaces")
    if not endpoint.startswith(_SCHEMES):
        raise BadInput(f"{what} {endpoint!r}: expected tcp://HOST:PORT, ipc://PATH or inproc://NAME")
    rest = endpoint.split("://", 1)[1]
    if not rest:
        raise BadInput(f"{what} {endpoint!r}: nothing after the scheme")
    if endpoint.startswith("tcp://"):
        host, sep, port = rest.rpartition(":")
        if not sep or not host:
            raise BadInput(f"{what} {endpoint!r}: expected tcp://HOST:PORT")
        if port != "*" and not (port.isdigit() and 0 <= int(port) <= 65535):
            raise BadInput(f"{what} {endpoint!r}: port must be 0..65535")
    return endpoint


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
