"""The stage's whole walk built on the server (explorer.view.stage.build_steps): prints a table.

Issue 23's target: a 40-step lesson's whole walk in under 1 s. Measured on the default lesson,
a 40-step chat scenario (generated here: each turn arrives with the history so far, is admitted,
generates and finishes), and a 2,000-block pool. The replay itself is not timed (it is cached
before the walk is built). Medians of ``--runs``; the machine is shared: read the spread.

Run:  .venv/bin/python scripts/bench_stage.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from explorer.scenario.engine import replay  # noqa: E402
from explorer.scenario.parse import load_scenario, parse_scenario_text  # noqa: E402
from explorer.view.stage import build_steps, snippets  # noqa: E402


def chat_40() -> str:
    """Ten chat turns of four steps each: every turn's prompt is the last one plus 200 tokens."""
    out = ['title = "forty steps"\n[engine]\nnum_blocks = 400\n']
    for t in range(10):
        rid = f"T{t}"
        out.append(f'[[steps]]\nop = "arrive"\nid = "{rid}"\nprompt = "0:{400 + 200 * t}"\n')
        out.append(f'[[steps]]\nop = "admit"\nid = "{rid}"\n')
        out.append(f'[[steps]]\nop = "generate"\nid = "{rid}"\ntokens = "{9000 + t * 10}:{9008 + t * 10}"\n')
        out.append(f'[[steps]]\nop = "finish"\nid = "{rid}"\n')
    return "".join(out)


def big_pool() -> str:
    steps = "".join(
        f'[[steps]]\nop = "arrive"\nid = "R{i}"\nprompt = "0:{1000 + 500 * i}"\n[[steps]]\nop = "admit"\nid = "R{i}"\n'
        for i in range(6)
    )
    return 'title = "big pool"\n[engine]\nnum_blocks = 2000\n' + steps


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    cases = [
        ("default lesson (00_two_chat_turns)", load_scenario(ROOT / "lessons" / "00_two_chat_turns.toml")),
        ("40-step chat", parse_scenario_text(chat_40(), "forty.toml")),
        ("2,000-block pool", parse_scenario_text(big_pool(), "big.toml")),
    ]
    print(f"{os.cpu_count()} CPUs, load average at the start {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("| scenario | steps | full page median ms (min .. max) | presenter median ms | sent KiB |")
    print("|---|---|---|---|---|")
    for name, sc in cases:
        trace = replay(sc)
        texts = snippets(trace)
        full, pres = [], []
        for _ in range(args.runs):
            t = time.perf_counter()
            walk = build_steps(trace, len(sc.ops), texts=texts)
            full.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            build_steps(trace, len(sc.ops), presenter=True, texts=texts)
            pres.append((time.perf_counter() - t) * 1000)
        size = len(json.dumps(walk.to_data())) // 1024
        print(
            f"| {name} | {len(trace.steps)} | {statistics.median(full):,.0f} ({min(full):,.0f} .. {max(full):,.0f}) "
            f"| {statistics.median(pres):,.0f} | {size:,} |"
        )
    print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
