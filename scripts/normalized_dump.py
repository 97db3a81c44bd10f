"""Dump `Scenario.normalized()` of every scenario the project holds or generates, one JSON line
each, so a change to the op model can be checked byte for byte (the normalized form keys the
disk cache of vLLM's answers): run before and after, then `cmp` the two files.

    python scripts/normalized_dump.py OUT [SEEDS]
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from explorer.scenario.parse import parse_scenario_bytes, parse_scenario_dict  # noqa: E402
from explorer.scenario.randgen import random_scenario  # noqa: E402
from explorer.scenario.randgen_profiles import PROFILES  # noqa: E402
from explorer.scenario.spec import Scenario  # noqa: E402


def _generators() -> list[tuple[str, Callable[[int], dict[str, Any]]]]:
    from tests.conformance import engine_step_scenarios as es
    from tests.conformance import fidelity_scenarios as fs
    from tests.conformance import spec_scenarios as ss

    gens: list[tuple[str, Callable[[int], dict[str, Any]]]] = [
        (f"randgen:{p}", lambda s, p=p: random_scenario(s, 40, profile=p)) for p in PROFILES if p != "bench"
    ]
    gens += [
        ("engine_steps", es.random_raw_scenario),
        ("engine_steps:hybrid", lambda s: es.random_raw_scenario(s, hybrid=True)),
        ("engine_steps:connector", es.random_connector_raw_scenario),
        ("engine_steps:offloading", es.random_offloading_raw_scenario),
        ("spec:engine_steps", ss.random_spec_engine_steps),
        ("spec:engine_steps:async", lambda s: ss.random_spec_engine_steps(s, scheduler="async")),
        ("spec:manager", ss.random_spec_manager),
        ("spec:manager:hybrid", lambda s: ss.random_spec_manager(s, hybrid=True)),
        ("spec:connector", ss.random_connector_spec_raw_scenario),
        ("spec:offloading", ss.random_offloading_spec_raw_scenario),
        ("fidelity:tight_spec", fs.random_tight_spec_raw_scenario),
        ("fidelity:offloading_reuse", fs.random_offloading_reuse_raw_scenario),
        ("fidelity:length_capped", fs.random_length_capped_raw_scenario),
        ("fidelity:spec_threshold", fs.random_spec_threshold_raw_scenario),
    ]
    return gens


def scenarios(seeds: int) -> Iterator[tuple[str, Scenario]]:
    files = sorted(ROOT.glob("lessons/*.toml")) + sorted(ROOT.glob("tests/scenario/golden/**/*.toml"))
    for path in files:  # named relative to the checkout, so two checkouts' dumps compare
        yield "file", parse_scenario_bytes(path.read_bytes(), str(path.relative_to(ROOT)))
    for name, gen in _generators():
        for seed in range(seeds):
            yield name, parse_scenario_dict(gen(seed), f"<{name}:{seed}>")


def main() -> None:
    out, seeds = Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 200
    counts: Counter[str] = Counter()
    ops: Counter[str] = Counter()
    with out.open("w") as f:
        for name, sc in scenarios(seeds):
            for seed in (sc.engine.hash_seed or None, "7"):
                f.write(json.dumps(sc.normalized(seed), sort_keys=False) + "\n")
            counts[name] += 1
            ops.update(op.op for op in sc.ops)
    for name, n in counts.items():
        print(f"{name}: {n}")
    print(f"scenarios: {sum(counts.values())}, ops: {sum(ops.values())} {dict(ops)}")


if __name__ == "__main__":
    main()
