"""The trace clock of the ``scheduler`` policy: which engine step a timestamp arrives before.

Every float the clock takes is checked first: a trace timestamp is a finite number of
milliseconds in [0, MAX_TIMESTAMP_MS], a step length one in [MIN_STEP_MS, MAX_STEP_MS]. So a
step index is at most MAX_TIMESTAMP_MS / MIN_STEP_MS = 10^14, below 2^52, where consecutive steps ``k x step_ms`` are distinct floats and `arrival_step`'s
correction loops run at most a step or two (a timestamp of 1e300 would make them spin forever,
one float rounding at a time).
"""

from __future__ import annotations

import math

from explorer.errors import BadInput

MIN_STEP_MS = 1e-3  # a microsecond: vLLM's fastest engine steps take milliseconds
MAX_STEP_MS = 3_600_000.0  # one step an hour
MAX_TIMESTAMP_MS = 1e11  # about 3.2 years of trace time
MAX_STEP_INDEX = 1 << 50  # the clock's steps stay exact floats below this


def check_step_ms(step_ms: object) -> float:
    """``step_ms`` as a float, or BadInput naming the range."""
    if (
        isinstance(step_ms, bool)
        or not isinstance(step_ms, (int, float))
        or not math.isfinite(step_ms)
        or not MIN_STEP_MS <= step_ms <= MAX_STEP_MS
    ):
        raise BadInput(f"step_ms must be a number in [{MIN_STEP_MS:g}, {MAX_STEP_MS:,.0f}] ms, got {step_ms!r}")
    return float(step_ms)


def arrival_step(timestamp: float, step_ms: float) -> int:
    """The first step k with ``timestamp <= k x step_ms``: the step a request arrives before."""
    if not (math.isfinite(timestamp) and timestamp >= 0 and math.isfinite(step_ms) and step_ms > 0):
        raise BadInput(f"a timestamp of {timestamp!r} ms at {step_ms!r} ms a step has no engine step")
    if timestamp / step_ms > MAX_STEP_INDEX:
        raise BadInput(
            f"a timestamp of {timestamp:g} ms is more than {MAX_STEP_INDEX:,} steps of {step_ms:g} ms: "
            "use a longer step or an earlier timestamp"
        )
    k = math.ceil(timestamp / step_ms)
    while k > 0 and (k - 1) * step_ms >= timestamp:
        k -= 1
    while k * step_ms < timestamp:
        k += 1
    return k
