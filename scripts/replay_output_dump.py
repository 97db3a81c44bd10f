"""Dump what the replays of the project's scenarios show, one scenario a line: the replay JSON,
the `run` text form and, with a KV connector, the external-tier and CPU-tier HTML of each step
(where its connector reports are drawn). A change to the ops or the replay records is checked
byte for byte: run before and after, then `cmp`.

    python scripts/replay_output_dump.py OUT [SEEDS]
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from explorer.errors import BadInput  # noqa: E402
from explorer.scenario.cli import render_text  # noqa: E402
from explorer.scenario.engine import replay  # noqa: E402
from explorer.scenario.recorder import StepError  # noqa: E402
from explorer.scenario.spec import Scenario  # noqa: E402
from explorer.scenario.trace import Trace  # noqa: E402
from explorer.viz.cpu_tier_html import cpu_tier_html, jobs_html  # noqa: E402
from explorer.viz.external_tier_html import external_tier_html  # noqa: E402


def scenarios(seeds: int) -> list[tuple[str, Scenario]]:
    sys.path.insert(0, str(ROOT / "scripts"))
    from normalized_dump import scenarios as all_scenarios

    return list(all_scenarios(seeds))


def panels(trace: Trace) -> list[str]:
    connector = trace.scenario.connector
    assert connector is not None
    out = []
    for k, step in enumerate(trace.steps, start=1):
        es = step.engine_step
        if es is None:
            continue
        before, after = trace.snapshot_at(k - 1), trace.snapshot_at(k)
        stored = sum(type(e).__name__ == "BlockStored" for e in step.events)
        out.append(external_tier_html(es.connector, es.external, before, after, stored))
        if connector.kind == "offloading":
            out += [jobs_html(es.connector), cpu_tier_html(es.connector, after, connector.cpu_blocks)]
    return out


def main() -> None:
    path, seeds = Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 20
    kinds: Counter[str] = Counter()
    replayed = refused = 0
    with path.open("w") as f:
        for _, sc in scenarios(seeds):
            try:
                trace = replay(sc, sc.engine.hash_seed or "7")  # a drawn xxhash seed, pinned
            except (BadInput, StepError) as e:  # a scenario the replay refuses: its message
                f.write(json.dumps(str(e)) + "\n")
                refused += 1
                continue
            shown = panels(trace) if sc.connector is not None else []
            f.write(json.dumps([trace.to_json(), render_text(trace), shown]) + "\n")
            reports = [c for s in trace.steps if s.engine_step for c in s.engine_step.connector]
            kinds.update(f"{type(c).__name__}:{c.kind}" for c in reports)
            replayed += 1
    print(f"replayed: {replayed}, refused: {refused}, connector reports: {sum(kinds.values())} {dict(kinds)}")


if __name__ == "__main__":
    main()
