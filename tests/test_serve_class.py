"""`make class` picks the address another machine reaches this one at, never a loopback one."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "serve_class", Path(__file__).resolve().parents[1] / "scripts" / "serve_class.py"
)
assert _spec is not None and _spec.loader is not None
serve_class = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(serve_class)


def test_the_first_reachable_ipv4_address_is_picked():
    assert serve_class.pick_address(["127.0.0.1", "169.254.3.4", "fd00::2", "0.0.0.0", "10.1.2.3", "10.9.9.9"]) == (
        "10.1.2.3"
    )


def test_no_reachable_address_gives_none():
    assert serve_class.pick_address(["127.0.1.1", "::1", "not-an-address"]) is None
