"""Endpoint rules: vLLM's bind-or-connect, per-data-parallel-rank port offsets, the one grammar."""

from __future__ import annotations

import re

import pytest

from explorer.errors import BadInput
from explorer.events.endpoints import check_endpoint, check_topic, is_bind_endpoint, offset_endpoint_port


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


# ---- the one strict grammar (issue 13) ------------------------------------------------------


@pytest.mark.parametrize(
    "endpoint, words",
    [
        ("tcp://[::1%lo]:0;127.0.0.3:5701", "source;destination"),  # libzmq: source ::1, destination 127.0.0.3
        ("tcp://127.0.0.1:0;127.0.0.3:5701", "source;destination"),
        ("tcp://[::1%lo]:5701", "zone id"),
        ("tcp://[fe80::1%eth0]:5701", "zone id"),
        ("tcp://[::1]]:5701", "not an IPv6 address"),
        ("tcp://[nonsense]:5701", "not an IPv6 address"),
        ("tcp://999.1.1.1:5701", "not an IPv4 address"),
        ("tcp://1.2.3:5701", "not an IPv4 address"),
        ("tcp://127.0.0.1:²", "ASCII digits"),
        ("tcp://127.0.0.1:٥٥٥٧", "ASCII digits"),
        ("tcp://127.0.0.1:５５５７", "ASCII digits"),
        ("tcp://127.0.0.1:65536", "0..65535"),
        ("tcp://127.0.0.1:-1", "0..65535"),
        ("tcp://a![p](http://127.0.0.1:8799/x.png):1", "is not a host"),
        ("tcp://h_ost:1", "is not a host"),
        ("tcp://-h:1", "is not a host"),
        ("tcp://" + "a" * 64 + ":1", "is not a host"),
        ("tcp://h\x00:1", "control"),
        ("tcp://h\t:1", "no spaces"),
        ("udp://h:1", "expected tcp://"),
        ("ipc://" + "a" * 108, "107 bytes"),
        ("inproc://" + "a" * 257, "256 characters"),
        ("ipc://\udcff", "UTF-8"),
        ("tcp://" + "a." * 600 + ":1", "longer than"),
    ],
)
def test_the_strict_grammar_refuses(endpoint, words):
    with pytest.raises(BadInput, match=re.escape(words)) as e:
        check_endpoint(endpoint, "--endpoint")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "endpoint",
    [
        "tcp://localhost:5557",
        "tcp://kv-1.example.com:5557",
        "tcp://eth0:5557",  # an interface name, as libzmq binds it
        "tcp://[::]:5557",
        "tcp://[2001:db8::1]:65535",
        "tcp://*:*",
        "tcp://10.0.0.2:0",
        "ipc://@abstract-name",
        "ipc:///tmp/kv.sock",
        "inproc://kv_dp1",
    ],
)
def test_the_strict_grammar_accepts(endpoint):
    assert check_endpoint(endpoint, "--endpoint") == endpoint


def test_topics_are_utf8_and_short():
    assert check_topic("kv") == b"kv"
    with pytest.raises(BadInput, match="UTF-8"):
        check_topic("\udcff")
    with pytest.raises(BadInput, match="longer than"):
        check_topic("t" * 1025)
