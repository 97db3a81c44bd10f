"""What the miss reasons and the bounds cost a trace replay, measured in one run (design section 14)."""

from __future__ import annotations

import time
from typing import Any

from explorer.traffic.bounds import bound_belady
from explorer.traffic.hashing import prepare
from explorer.traffic.sequential import replay_vllm
from explorer.traffic.trace import load_trace, shipped_trace_path


def run_reasons_bench(limit: int, sizes: tuple[int, ...], repeat: int) -> dict[str, Any]:
    """The shipped trace's first ``limit`` requests at each size: the vLLM replay without and
    with the reasons (best of ``repeat``, interleaved), and Belady beside them."""
    prep = prepare(load_trace(shipped_trace_path(), limit=limit), 16, False, False, None)
    plain = reasons = belady = 0.0
    for size in sizes:
        best = {False: float("inf"), True: float("inf")}
        for _ in range(repeat):
            for flag in (False, True):
                t0 = time.perf_counter()
                replay_vllm(prep, size, reasons=flag)
                best[flag] = min(best[flag], time.perf_counter() - t0)
        t0 = time.perf_counter()
        bound_belady(prep, size)
        belady += time.perf_counter() - t0
        plain, reasons = plain + best[False], reasons + best[True]
    return {
        "requests": limit,
        "sizes": list(sizes),
        "replay_s": round(plain, 4),
        "replay_with_reasons_s": round(reasons, 4),
        "reasons_ratio": round(reasons / plain, 3) if plain else None,
        "belady_s": round(belady, 4),
    }
