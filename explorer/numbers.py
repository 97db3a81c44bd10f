"""One rule for integers typed by a user anywhere (CLI flags, URL parameters, token specs, fields).

ASCII digits only, with an optional leading minus where negatives make sense. Python's
``str.isdigit()`` accepts "²" and "①", which ``int()`` then refuses with a traceback, and
``int()`` itself accepts "٣" and "３" (other scripts' digits): neither belongs in a token id, a
port or a step number. A length cap keeps a thousand-digit number from costing anything.
"""

from __future__ import annotations

import re

from explorer.core.errors import BadInput

_INT = re.compile(r"-?[0-9]{1,19}")


def parse_int(text: str, what: str, lo: int | None = None, hi: int | None = None) -> int:
    """``text`` as an integer in [lo, hi], or a BadInput naming ``what``."""
    s = text.strip() if isinstance(text, str) else text
    if not isinstance(s, str) or not _INT.fullmatch(s):
        raise BadInput(f"{what}: expected an integer in ASCII digits, got {text!r}")
    v = int(s)
    if lo is not None and v < lo:
        raise BadInput(f"{what}: {v} is below the minimum {lo}")
    if hi is not None and v > hi:
        raise BadInput(f"{what}: {v:,} is above the maximum {hi:,}")
    return v


def is_int(text: str) -> bool:
    """Whether ``text`` is an integer by the rule above (no range check)."""
    return isinstance(text, str) and _INT.fullmatch(text.strip()) is not None


def counted(count: int, word: str, plural: str | None = None) -> str:
    """ "1 block", "3 blocks" (or the given plural), with thousands separators."""
    return f"{count:,} {word if count == 1 else (plural or word + 's')}"
