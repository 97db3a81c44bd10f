"""Server time to render one step of the explorer page (not a unit test; prints medians).

Targets (issue #4): the default lesson under 150 ms per step at the median; a step of a
2,000-block scenario with ~32k-token prompts under 1 s. Issue #15: a 40-step engine-step
scenario with 8 requests (async scheduler, chunked prefill, a shared prefix) under 150 ms.

The page runs under Streamlit's AppTest; the time measured is the script run itself (the
`render()` call on the server), read from inside the app, so the test harness's polling is
not counted. Run:  .venv/bin/python scripts/bench_ui_server.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BIG_SCENARIO = """
title = "Bench: 2,000 blocks, 32k-token prompts"
[engine]
block_size = 16
num_blocks = 2000

[[steps]]
op = "arrive"
id = "A"
prompt = "0:24000"

[[steps]]
op = "admit"
id = "A"

[[steps]]
op = "generate"
id = "A"
tokens = "200000:200064"

[[steps]]
op = "finish"
id = "A"

[[steps]]
op = "arrive"
id = "B"
prompt = "0:16000, 300000:315744"

[[steps]]
op = "admit"
id = "B"

[[steps]]
op = "finish"
id = "B"

[[steps]]
op = "arrive"
id = "C"
prompt = "0:16000, 300000:315744"

[[steps]]
op = "admit"
id = "C"
"""


def engine_step_scenario(requests: int = 8, steps: int = 40) -> str:
    """An engine-step scenario: ``requests`` requests sharing a 256-token prefix arrive two at a
    time between engine steps (budget 256, async), ``steps`` steps in all."""
    lines = [
        'title = "Bench: 40 engine steps, 8 requests"',
        "[engine]",
        "block_size = 16",
        "num_blocks = 300",
        'scheduler = "async"',
        "max_num_batched_tokens = 256",
        "max_num_seqs = 8",
    ]
    arrivals = {i * 4: (2 * i, 2 * i + 1) for i in range(requests // 2)}
    for k in range(steps):
        for r in arrivals.get(k, ()):
            lines += [
                "[[steps]]",
                'op = "arrive"',
                f'id = "R{r}"',
                f'prompt = "0:256, {10_000 + r * 1_000}:{10_000 + r * 1_000 + 100 + 40 * r}"',
                f'output = "{90_000 + r * 100}:{90_000 + r * 100 + 12 + r}"',
            ]
        lines += ["[[steps]]", 'op = "step"']
    return "\n".join(lines) + "\n"


def _app() -> None:
    import time as _t

    import streamlit as _st

    from explorer.ui.pages import explorer as explorer_page  # the __main__ guard: importing draws nothing

    t0 = _t.perf_counter()
    explorer_page.render()
    _st.session_state["bench_ms"] = (_t.perf_counter() - t0) * 1000


def _make(view=None):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_app, default_timeout=120)
    if view is not None:
        at.session_state["px_view"] = view
    return at


def _goto(at, k: int):
    """Step k, as the slider's callback sets it (AppTest cannot drive the slider component)."""
    at.session_state["px_view"] = at.session_state["px_view"].with_(step=k)
    return at.run()


def _steps(at, ks, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        for k in ks:
            _goto(at, k)
            if at.exception:
                raise SystemExit(f"page raised: {at.exception[0].message}")
            out.append(at.session_state["bench_ms"])
    return out


def _report(name: str, times: list[float], first: float, target_ms: float) -> bool:
    med = statistics.median(times)
    p90 = sorted(times)[int(0.9 * (len(times) - 1))]
    ok = med < target_ms
    print(
        f"{name}: first load (replay + render) {first:.0f} ms; per step over {len(times)} renders: "
        f"median {med:.1f} ms, p90 {p90:.1f} ms, max {max(times):.1f} ms; target {target_ms:.0f} ms -> "
        f"{'OK' if ok else 'TOO SLOW'} (median/target = {med / target_ms:.2f})"
    )
    return ok


def _bench(view, name: str, target_ms: float, repeat: int) -> bool:
    """Open the page on ``view`` (None: the default lesson), step through it ``repeat`` times
    and report against ``target_ms``; ``name`` may name the step count as ``{n}``."""
    t = time.perf_counter()
    at = _make(view).run()
    first = (time.perf_counter() - t) * 1000
    if at.exception:
        raise SystemExit(f"page raised: {at.exception[0].message}")
    n = int(at.session_state["px_n_steps"])
    return _report(name.format(n=n), _steps(at, range(1, n + 1), repeat), first, target_ms)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    from explorer.ui.state import ViewState

    big = ViewState(lesson=None, upload=("bench_big.toml", BIG_SCENARIO.encode()), step=0)
    eng = ViewState(lesson=None, upload=("bench_engine_steps.toml", engine_step_scenario().encode()), step=0)
    oks = [
        _bench(None, "default lesson ({n} steps, 300 blocks)", 150, args.repeat),
        _bench(big, "2,000 blocks, prompts of 24,000 and 31,744 tokens ({n} steps)", 1000, args.repeat),
        _bench(eng, "engine steps: 8 requests, 40 steps ({n} ops, async, budget 256)", 150, args.repeat),
    ]
    return 0 if all(oks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
