"""The server's waits read from the environment: a good value is used, anything else is ignored."""

from __future__ import annotations

import pytest

from explorer.ui.timings import (
    ABANDON_DEFAULT_S,
    ABANDON_ENV,
    TRIM_DEFAULT_S,
    TRIM_ENV,
    abandon_s,
    trim_after_s,
)


def test_unset_gives_the_defaults():
    assert abandon_s({}) == ABANDON_DEFAULT_S == 30.0
    assert trim_after_s({}) == TRIM_DEFAULT_S == (2.0, 10.0, 30.0)


def test_a_good_value_is_used():
    assert abandon_s({ABANDON_ENV: "5"}) == 5.0
    assert trim_after_s({TRIM_ENV: "12, 1,4"}) == (1.0, 4.0, 12.0)  # ascending


@pytest.mark.parametrize("raw", ["", "soon", "0", "-3", "nan", "inf", "1e9", "1,,2", "1,x", ",".join(["1"] * 9)])
def test_anything_else_leaves_the_default(raw):
    assert abandon_s({ABANDON_ENV: raw}) == ABANDON_DEFAULT_S
    assert trim_after_s({TRIM_ENV: raw}) == TRIM_DEFAULT_S
