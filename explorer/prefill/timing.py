"""Wall time of a GPU or CPU call, the way the measurement needs it.

On CUDA, kernels run asynchronously: a host clock would time the launch, not the work. CUDA
events recorded around the call and a synchronize give the device time. On a CPU the call is
synchronous and ``time.perf_counter`` (monotonic, high resolution) is the right clock.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def time_ms(fn: Callable[[], object], device: torch.device) -> float:
    """Milliseconds one call of ``fn`` takes on ``device``."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # start from an idle GPU: nothing earlier is counted
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize(device)
        return start.elapsed_time(end)
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def time_pair(
    a: Callable[[], object],
    b: Callable[[], object],
    device: torch.device,
    warmup: int,
    repeats: int,
    on_run: Callable[[int], None] | None = None,
) -> tuple[list[float], list[float]]:
    """Run times of ``a`` and ``b``, interleaved a, b, a, b ... after ``warmup`` untimed pairs.

    Interleaving matters on a shared machine: a burst of load from elsewhere then slows both
    sides alike instead of landing on one of them. ``on_run(i)`` is told after each timed pair.
    """
    for _ in range(warmup):
        a()
        b()
    ta, tb = [], []
    for i in range(repeats):
        ta.append(time_ms(a, device))
        tb.append(time_ms(b, device))
        if on_run is not None:
            on_run(i)
    return ta, tb


def median(xs: list[float]) -> float:
    return statistics.median(xs)
