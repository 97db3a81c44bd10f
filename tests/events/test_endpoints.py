"""Endpoint rules: vLLM's bind-or-connect and per-data-parallel-rank port offsets."""

from __future__ import annotations

import pytest

from explorer.errors import BadInput
from explorer.events.endpoints import check_endpoint, is_bind_endpoint, offset_endpoint_port


@pytest.mark.parametrize(
    "endpoint, rank, expected",
    [
        ("tcp://*:5557", 0, "tcp://*:5557"),
        ("tcp://*:5557", 1, "tcp://*:5558"),
        ("tcp://*:5557", 3, "tcp://*:5560"),
        ("tcp://127.0.0.1:5557", 2, "tcp://127.0.0.1:5559"),
        ("tcp://[::1]:6000", 1, "tcp://[::1]:6001"),
        ("tcp://*:0", 5, "tcp://*:0"),  # the OS picks the port
        ("inproc://cache", 0, "inproc://cache"),
        ("inproc://cache", 2, "inproc://cache_dp2"),
        ("ipc:///run/kv", 0, "ipc:///run/kv"),
        (None, 3, None),
        ("", 3, ""),
    ],
)
def test_offset_endpoint_port(endpoint, rank, expected):
    assert offset_endpoint_port(endpoint, rank) == expected


def test_offset_endpoint_port_errors():
    with pytest.raises(ValueError, match="Invalid endpoint: must contain 'inproc' or 'tcp'"):
        offset_endpoint_port("ipc:///run/kv", 1)
    with pytest.raises(ValueError):
        offset_endpoint_port("tcp://host:port", 1)


@pytest.mark.parametrize(
    "endpoint, binds",
    [
        ("tcp://*:5557", True),
        ("tcp://[::]:5557", True),
        ("tcp://::1:5557", True),  # contains "::"
        ("ipc:///run/kv", True),
        ("inproc://kv", True),
        ("tcp://127.0.0.1:5557", False),
        ("tcp://localhost:5557", False),
        ("tcp://10.0.0.2:5557", False),
    ],
)
def test_bind_or_connect(endpoint, binds):
    assert is_bind_endpoint(endpoint) is binds


@pytest.mark.parametrize(
    "endpoint",
    [
        "",
        "  ",
        "127.0.0.1:5557",
        "http://x:1",
        "tcp://",
        "tcp://host",
        "tcp://:5557",
        "tcp://h:99999",
        "tcp://h:x",
        "tcp://h :1",
        "ipc://",
    ],
)
def test_bad_endpoints_are_bad_input(endpoint):
    with pytest.raises(BadInput):
        check_endpoint(endpoint, "--endpoint")


@pytest.mark.parametrize("endpoint", ["tcp://127.0.0.1:5557", "tcp://*:0", "tcp://[::1]:1", "ipc:///x", "inproc://a"])
def test_good_endpoints(endpoint):
    assert check_endpoint(endpoint, "--endpoint") == endpoint
