"""The command line's argument types: each checks its argument where it is read (integers in
ASCII digits, finite and capped seconds, valid UTF-8 text) and answers bad input with one
line (argparse's error, which `explorer.cli.main` prints with exit code 2)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable

from explorer.errors import BadInput
from explorer.numbers import parse_int

MAX_SECONDS = 86_400.0  # --wait, --hold, --timeout: at most a day
MAX_BLOCK_SIZE = 1 << 16  # as in scenarios (explorer/scenario/spec.py)
MAX_MESSAGE = 1000  # characters of an error line


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (exit 2) instead of a usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise BadInput(f"{self.prog}: {message}")


def _int_at_least(lo: int, what: str, hi: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer >= ``lo`` (and <= ``hi``), ASCII digits only."""

    def convert(text: str) -> int:
        try:
            v = parse_int(text, "value")
        except BadInput:
            if hi is not None and text.isascii() and text.strip().isdigit():  # too many digits
                raise argparse.ArgumentTypeError(f"{_shown(text)} is more than the limit {hi:,}") from None
            raise argparse.ArgumentTypeError(f"expected an integer in ASCII digits, got {_shown(text)}") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"expected {what}, got {v}")
        if hi is not None and v > hi:
            raise argparse.ArgumentTypeError(f"{v:,} is more than the limit {hi:,}")
        return v

    return convert


_positive_int = _int_at_least(1, "a positive integer", hi=(1 << 63) - 1)
_nonneg_int = _int_at_least(0, "a non-negative integer", hi=(1 << 63) - 1)
_block_size = _int_at_least(1, "a positive integer", hi=MAX_BLOCK_SIZE)


def _number(hi: float, unit: str, lo: float = 0.0) -> Callable[[str], float]:
    """An argparse type: a finite number in [0, hi] (and 0 or at least ``lo``), written in ASCII."""

    def convert(text: str) -> float:
        try:
            if not text.isascii() or "_" in text:
                raise ValueError(text)
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {_shown(text)}") from None
        if not math.isfinite(v) or v < 0:
            raise argparse.ArgumentTypeError(f"expected a finite non-negative number, got {_shown(text)}")
        if v > hi:
            raise argparse.ArgumentTypeError(f"{v:g} {unit} is more than the limit {hi:g}")
        if 0 < v < lo:
            raise argparse.ArgumentTypeError(f"{v:g} {unit} is less than the smallest {lo:g}")
        return v

    return convert


_seconds = _number(MAX_SECONDS, "seconds")


def _text(text: str) -> str:
    """An argparse type: text that is valid UTF-8 (not lone surrogates from undecodable bytes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise argparse.ArgumentTypeError(
            f"not valid UTF-8 text (an undecodable byte at character {e.start + 1})"
        ) from None
    return text


def _shown(text: str) -> str:
    shown = repr(text)
    return shown if len(shown) <= 60 else shown[:57] + "..."


# explorer/traffic/clock.py's MIN_STEP_MS (not imported here: `hash` stays fast)
MIN_STEP_MS = 1e-3
_step_ms = _number(60_000.0, "ms", lo=MIN_STEP_MS)


def _positive_step_ms(text: str) -> float:
    v = _step_ms(text)
    if v == 0:
        raise argparse.ArgumentTypeError("expected a positive number, got 0")
    return v


def _print_json(obj: object) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
