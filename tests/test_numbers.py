"""explorer/numbers.py: the one rule for typed integers, and the one plural helper."""

from __future__ import annotations

import pytest

from explorer.errors import BadInput
from explorer.numbers import counted, is_int, parse_int


@pytest.mark.parametrize(
    "n,word,plural,want",
    [
        (1, "token", None, "1 token"),
        (2, "token", None, "2 tokens"),
        (0, "token", None, "0 tokens"),
        (-1, "token", None, "-1 tokens"),
        (1_184, "token", None, "1,184 tokens"),
        (1, "block hash", "block hashes", "1 block hash"),
        (3, "block hash", "block hashes", "3 block hashes"),
        (0, "pass", "passes", "0 passes"),
        (2, "child", "children", "2 children"),
        (1, "child", "children", "1 child"),
    ],
)
def test_counted_says_the_count_and_the_noun_in_the_right_number(n, word, plural, want):
    assert counted(n, word, plural) == want


def test_parse_int_takes_ascii_digits_only():
    assert parse_int(" 42 ", "port", lo=1) == 42
    assert is_int("-3") and not is_int("²") and not is_int("٣")
    with pytest.raises(BadInput, match="port: expected an integer"):
        parse_int("３", "port")
    with pytest.raises(BadInput, match="below the minimum 1"):
        parse_int("0", "port", lo=1)
