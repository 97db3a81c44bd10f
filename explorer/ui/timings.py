"""The server's waits that an operator (or a test) may shorten or lengthen from the environment.

Two waits are about the browser leaving, not about the work: how long a closed tab's trace
replay job lives on (the tab may come back after a network blip), and when the memory of an
ended session is handed back again (a script run of that session may still be finishing). The
defaults suit a classroom; the browser tests set short ones so that they wait seconds, not
half a minute, for what they check. A value that is not a number in range is ignored (the
default holds) rather than refused: the server still starts.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

ABANDON_ENV = "EXPLORER_ABANDON_S"  # seconds a job whose browser session is gone lives on
TRIM_ENV = "EXPLORER_TRIM_AFTER_S"  # comma-separated seconds: when an ended session's memory is handed back again

ABANDON_DEFAULT_S = 30.0
TRIM_DEFAULT_S = (2.0, 10.0, 30.0)
MAX_WAIT_S = 3600.0
MAX_TRIMS = 8


def _seconds(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and 0 < value <= MAX_WAIT_S else None


def abandon_s(environ: Mapping[str, str] = os.environ) -> float:
    """Seconds a replay job lives on once its browser session is gone."""
    value = _seconds(environ.get(ABANDON_ENV, ""))
    return ABANDON_DEFAULT_S if value is None else value


def trim_after_s(environ: Mapping[str, str] = os.environ) -> tuple[float, ...]:
    """Seconds after a session's end at which its memory is handed back again, ascending."""
    raw = environ.get(TRIM_ENV, "")
    parts = raw.split(",") if raw else []
    values = [_seconds(p.strip()) for p in parts]
    if not values or len(values) > MAX_TRIMS or any(v is None for v in values):
        return TRIM_DEFAULT_S
    return tuple(sorted(v for v in values if v is not None))
