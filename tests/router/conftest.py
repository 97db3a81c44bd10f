"""Fixtures of the router tests: the small fleet's stream, and its healthy prefix-aware run
(module-scoped: each is built once per test module)."""

from __future__ import annotations

import pytest

from explorer.router.results import PolicyRun
from explorer.router.stream import RequestStream, build_stream
from tests.router.helpers import SMALL, run


@pytest.fixture(scope="module")
def stream() -> RequestStream:
    return build_stream(SMALL)


@pytest.fixture(scope="module")
def healthy(stream) -> PolicyRun:
    return run(SMALL, stream)
