"""Every count a panel sentence states equals what the replay recorded, checked against the
snapshots on both sides of the step (not against the fields the sentence was built from).

Random scenarios at both levels and with every feature: manager-level ops (plain, hybrid,
EAGLE), engine steps under both schedulers (plain, hybrid, EAGLE, a KV connector, CPU
offloading). The free queue's accounting gives the blocks a step popped: what left the queue,
plus what was freed back to it, minus the hit blocks touched out of it.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from explorer.scenario.engine import replay
from explorer.scenario.parse import parse_scenario_dict
from explorer.scenario.randgen import random_scenario
from explorer.scenario.trace import Trace
from explorer.view.explain import engine_step, step
from explorer.view.explain.records import Panel
from tests.conformance.engine_step_scenarios import (
    random_connector_raw_scenario,
    random_offloading_raw_scenario,
    random_raw_scenario,
    under_both_schedulers,
)
from tests.conformance.spec_scenarios import random_spec_engine_steps, random_spec_manager


def _popped(trace: Trace, k: int) -> int:
    s = trace.steps[k - 1]
    before, after = trace.snapshot_at(k - 1), trace.snapshot_at(k)
    # Every free back to the queue counts, a block's second one too: in one step a block can be
    # freed below a window, popped again and freed again (blocks freed below a window are
    # reported as skipped as well, not freed twice).
    freed = sum(1 for f in s.freed if f.to != "held")
    return before.num_free_blocks - after.num_free_blocks + freed - len(s.touched_from_free)


def _newly_hashed(trace: Trace, k: int) -> int:
    before, after = trace.snapshot_at(k - 1), trace.snapshot_at(k)
    return sum(1 for b, a in zip(before.blocks, after.blocks, strict=True) if a[1] is not None and a[1] != b[1])


def _text(p: Panel) -> str:
    return p.text if isinstance(p.text, str) else " ".join(p.text)


def _ints(pattern: str, text: str) -> list[int]:
    return [int(m.group(1).replace(",", "")) for m in re.finditer(pattern, text)]


def _check(trace: Trace) -> int:
    """Check every step's panels; returns how many stated counts were compared."""
    engine = trace.scenario.sched is not None
    checked = 0
    for k in range(1, len(trace.steps) + 1):
        s = trace.steps[k - 1]
        for p in (engine_step if engine else step).panels(trace, k):
            t = _text(p)
            if p.key == "allocate":
                said = _ints(r"([\d,]+) new blocks?\.", t) if engine else _ints(r"pop ([\d,]+) blocks?", t)
                if said:
                    assert sum(said) == _popped(trace, k), (k, t)
                    checked += 1
                m = re.search(r"touch\(\) took ([\d,]+) hit blocks? \(([\d,]+) from the free queue\)", t)
                if m:
                    assert (int(m.group(1)), int(m.group(2))) == (len(s.touched), len(s.touched_from_free)), (k, t)
                    checked += 1
            if p.key == "caching" and s.engine_step is None:
                # Manager level: one op, so the blocks that got a hash are the snapshot's new hashes.
                said = _ints(r"([\d,]+) blocks? got (?:their|its) hash", t) or _ints(r"caches? ([\d,]+) blocks?", t)
                if said:
                    assert said[0] == _newly_hashed(trace, k), (k, t)
                    checked += 1
            if p.key == "lookup" and s.lookup is not None and not s.lookup.skipped:
                said = _ints(r"the walk hit ([\d,]+) tokens", t) or _ints(r"hits? ([\d,]+) of its", t)
                if said:
                    assert said[0] == s.lookup.hit_tokens <= s.lookup.num_tokens, (k, t)
                    checked += 1
    return checked


def _manager(seed: int, profile: str) -> Trace:
    return replay(parse_scenario_dict(random_scenario(seed, 60, profile=profile), f"<{profile} {seed}>"))


def _engine(raw: dict, both: bool = True) -> list[Trace]:
    raws = under_both_schedulers(raw) if both else [raw]
    return [replay(parse_scenario_dict(r, "<random engine steps>")) for r in raws]


CASES = (
    [pytest.param(lambda s=s: [_manager(s, "mixed")], id=f"manager-{s}") for s in range(8)]
    + [pytest.param(lambda s=s: [_manager(s, "hybrid")], id=f"manager-hybrid-{s}") for s in range(6)]
    + [
        pytest.param(lambda s=s: [replay(parse_scenario_dict(random_spec_manager(s), "<eagle>"))], id=f"eagle-{s}")
        for s in range(3)
    ]
    + [pytest.param(lambda s=s: _engine(random_raw_scenario(s)), id=f"engine-{s}") for s in range(6)]
    + [
        pytest.param(lambda s=s: _engine(random_raw_scenario(s, hybrid=True)), id=f"engine-hybrid-{s}")
        for s in range(4)
    ]
    # drafts run under the sync scheduler only (design section 9)
    + [pytest.param(lambda s=s: _engine(random_spec_engine_steps(s), False), id=f"engine-eagle-{s}") for s in range(4)]
    + [
        pytest.param(lambda s=s: _engine(random_connector_raw_scenario(s), False), id=f"connector-{s}")
        for s in range(1, 5)  # seed 0 draws a scenario that asks the played model past its outputs
    ]
    + [
        pytest.param(lambda s=s: _engine(random_offloading_raw_scenario(s), False), id=f"offloading-{s}")
        for s in range(3)
    ]
)


@pytest.mark.parametrize("make", CASES)
def test_panel_sentences_state_the_recorded_counts(make: Callable[[], list[Trace]]) -> None:
    assert sum(_check(t) for t in make()) > 0
