"""Reading one scenario value: typed checks whose errors name the file, the step and the field."""

from __future__ import annotations

import datetime
from typing import Any

from explorer.errors import BadInput


class Ctx:
    """Error messages that name the file, the step and the field."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, msg: str) -> BadInput:
        return BadInput(f"{self.source}: {where}: {msg}")


def show(value: Any) -> str:
    """A value for a message: its repr, cut short (a TOML date or time by its ISO form)."""
    if isinstance(value, (datetime.date, datetime.time)):  # datetime.datetime is a date
        return f"the TOML date/time {value.isoformat()}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def read_int(ctx: Ctx, where: str, value: Any, lo: int, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ctx.fail(where, f"expected an integer, got {show(value)}")
    if value < lo or (hi is not None and value > hi):
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ctx.fail(where, f"{value} is out of range: expected an integer {rng}")
    return value


def read_bool(ctx: Ctx, where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ctx.fail(where, f"expected true or false, got {show(value)}")
    return value


def read_str(ctx: Ctx, where: str, value: Any, allow_empty: bool = True) -> str:
    if not isinstance(value, str):
        raise ctx.fail(where, f"expected a string, got {show(value)}")
    if not allow_empty and not value:
        raise ctx.fail(where, "must not be empty")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate: no TOML file, hash or event can hold it
        raise ctx.fail(where, f"not valid Unicode text (a lone surrogate at character {e.start})") from None
    return value
