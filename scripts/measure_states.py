"""Measure what a recorded replay holds and how fast its states are read back.

Not part of CI. Run from the repository root (or with PYTHONPATH at another checkout of the
project, to compare two versions on the same machine, one after the other):

    .venv/bin/python scripts/measure_states.py            # the table, as text
    .venv/bin/python scripts/measure_states.py --json

For each scenario: the bytes the replay holds once it returned (tracemalloc, after a garbage
collection), the bytes held after every state was read back in order as the stage walk reads
them (k - 1 and k for k = 0..n), the peak during the walk, and, in a second run without
tracemalloc, the seconds for the replay and for the walk. Last, the seconds `build_steps` takes
for the stage of each lesson (the page's whole walk, HTML included); the slowest is reported.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path.cwd()
sys.path.insert(0, str(REPO))

from explorer.scenario.engine import replay  # noqa: E402 (after the path it is found on)
from explorer.scenario.parse import load_scenario, parse_scenario_text  # noqa: E402
from explorer.scenario.spec import Scenario  # noqa: E402
from tests.ui import test_budget as budget_scenarios  # noqa: E402 (the scenarios tests/ui/test_budget.py measures)


def _steps(*ops: str) -> list[str]:
    return [f"[[steps]]\n{op}" for op in ops]


def _toml(head: str, steps: list[str]) -> Scenario:
    return parse_scenario_text(head + "\n" + "\n".join(steps) + "\n", "<measure>")


def _from_steps(engine: dict[str, int], steps: list[dict[str, str]]) -> Scenario:
    lines = ["[engine]", *(f"{k} = {v}" for k, v in engine.items())]
    for st in steps:
        lines.append("[[steps]]")
        lines.extend(f'{k} = "{v}"' for k, v in st.items())
    return parse_scenario_text("\n".join(lines) + "\n", "<measure>")


def _parsed(text: str) -> list[Scenario]:
    return [parse_scenario_text(text, "<measure>")]


def long_prompts() -> list[Scenario]:
    """2,000 blocks, 12 requests of 3,000 tokens: arrive, admit, finish each (36 steps)."""
    return _parsed(budget_scenarios.pool_heavy())


def live_and_generated() -> list[Scenario]:
    """2,000 blocks of 1 token, 40 live requests of 800 tokens, one admitted and 300 tokens
    generated (42 steps)."""
    return _parsed(budget_scenarios.requests_heavy())


def engine_steps() -> list[Scenario]:
    """Engine steps: 16 requests, 136 steps."""
    return _parsed(budget_scenarios.engine_steps_heavy())


def hybrid_groups() -> list[Scenario]:
    """Three hybrid groups, 30 steps."""
    return _parsed(budget_scenarios.hybrid_heavy())


def full_pool() -> list[Scenario]:
    """A full 8,000-block pool, 120 steps (scripts/measure_rss.py's heavy scenario)."""
    steps = []
    for i in range(40):
        steps += _steps(f"op='arrive'\nid='R{i}'\nprompt='{i * 100_000}:{i * 100_000 + 10_000}'")
        steps += _steps(f"op='admit'\nid='R{i}'", f"op='finish'\nid='R{i}'")
    return [_toml("title = 'A full pool, every step'\n[engine]\nblock_size = 16\nnum_blocks = 8000", steps)]


def many_live() -> list[Scenario]:
    """200 live requests of 1,024 tokens on 8,000 blocks: 200 arrivals, none admitted (the
    worst case for copies: every step's state shares the whole pool with the one before)."""
    steps = [{"op": "arrive", "id": f"r{i}", "prompt": f"{i * 1024}:{(i + 1) * 1024}"} for i in range(200)]
    return [_from_steps({"num_blocks": 8_000}, steps)]


def many_live_admitted() -> list[Scenario]:
    """200 live requests of 1,024 tokens on 8,000 blocks of 32 tokens, each admitted (400 steps)."""
    steps = []
    for i in range(200):
        steps += _steps(f"op='arrive'\nid='R{i}'\nprompt='{i * 10_000}:{i * 10_000 + 1024}'", f"op='admit'\nid='R{i}'")
    return [_toml("[engine]\nblock_size = 32\nnum_blocks = 8000", steps)]


def lessons() -> list[Scenario]:
    return [load_scenario(p) for p in sorted((REPO / "lessons").glob("*.toml"))]


CASES: dict[str, Callable[[], list[Scenario]]] = {
    "every lesson": lessons,
    "2,000 blocks, 12 requests of 3,000 tokens": long_prompts,
    "2,000 blocks, 40 live requests + 300 generated tokens": live_and_generated,
    "engine steps, 16 requests, 136 steps": engine_steps,
    "three hybrid groups, 30 steps": hybrid_groups,
    "a full 8,000-block pool, 120 steps": full_pool,
    "200 live requests of 1,024 tokens, 8,000 blocks": many_live,
    "the same 200 requests admitted, blocks of 32 (400 steps)": many_live_admitted,
}


def walk(trace: Any) -> None:
    """Every state in order, as the stage reads them (k - 1 and k)."""
    for k in range(len(trace.steps) + 1):
        if k:
            trace.snapshot_at(k - 1)
        trace.snapshot_at(k)


def measure(name: str, make: Callable[[], list[Scenario]]) -> dict[str, Any]:
    scenarios = make()
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    traces = [replay(sc) for sc in scenarios]
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.reset_peak()
    for t in traces:
        walk(t)
    gc.collect()
    after, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del traces
    gc.collect()
    start = time.perf_counter()
    traces = [replay(sc) for sc in scenarios]
    replay_s = time.perf_counter() - start
    start = time.perf_counter()
    for t in traces:
        walk(t)
    walk_s = time.perf_counter() - start
    return {
        "scenario": name,
        "steps": sum(len(t.steps) for t in traces),
        "held_mib": held / 2**20,
        "after_walk_mib": (after - base) / 2**20,
        "walk_peak_mib": (peak - base) / 2**20,
        "replay_s": replay_s,
        "walk_s": walk_s,
    }


def stage_seconds() -> tuple[str, int, float]:
    """The slowest lesson's whole stage build (replay + build_steps)."""
    from explorer.view.stage import build_steps

    worst = ("", 0, 0.0)
    for sc in lessons():
        start = time.perf_counter()
        trace = replay(sc)
        build_steps(trace, len(trace.steps))
        s = time.perf_counter() - start
        if s > worst[2]:
            worst = (sc.source, len(trace.steps), s)
    return worst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = [measure(name, make) for name, make in CASES.items()]
    lesson, steps, seconds = stage_seconds()
    if args.json:
        print(json.dumps({"rows": rows, "slowest_stage": [lesson, steps, seconds]}, indent=1))
        return
    print(f"{'scenario':55} {'steps':>5} {'held':>7} {'walked':>7} {'peak':>7} {'replay':>7} {'walk':>7}")
    for r in rows:
        print(
            f"{r['scenario']:55} {r['steps']:>5} {r['held_mib']:>7.2f} {r['after_walk_mib']:>7.2f} "
            f"{r['walk_peak_mib']:>7.2f} {r['replay_s']:>7.3f} {r['walk_s']:>7.3f}"
        )
    print(f"slowest lesson stage (replay + build_steps): {Path(lesson).name}, {steps} steps, {seconds:.3f} s")


if __name__ == "__main__":
    main()
