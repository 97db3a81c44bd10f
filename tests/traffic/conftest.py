"""Fixtures of the trace replay tests: a synthetic trace with heavy prefix sharing (built once
per test module)."""

from __future__ import annotations

import pytest

from tests.traffic.helpers import synthetic_lines, trace_of


@pytest.fixture(scope="module")
def shared():
    return trace_of(synthetic_lines(60))
