"""Every count a panel sentence states equals what the replay recorded, checked against the
snapshots on both sides of the step where they hold the number (not against the fields the
sentence was built from), and against the step's own records where only they do.

Random scenarios at both levels and with every feature: manager-level ops (plain, hybrid,
EAGLE), engine steps under both schedulers (plain, hybrid, EAGLE, a KV connector, CPU
offloading, a batch of 70 requests). The texts are the ones the stage draws: the NOW line, the
phase panels, the metrics line, the External tier and CPU tier panels, and the batch, KV cache
groups and speculative-decoding boxes (their HTML, tags stripped). The checks live in
sentence_checks, sentence_engine and sentence_stage, one name per sentence template; every name there
must be compared at least once over these scenarios, so a template the random scenarios stop
drawing (or a pattern that stops matching its sentence) fails here instead of passing unchecked.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest

from explorer.scenario.engine import replay
from explorer.scenario.parse import parse_scenario_dict
from explorer.scenario.randgen import random_scenario
from explorer.scenario.trace import Trace
from explorer.view.explain import engine_step, step
from explorer.view.explain.records import Panel
from tests.conformance.spec_scenarios import random_spec_engine_steps, random_spec_manager
from tests.ui.sentence_checks import Checks, N, check_manager_panels, check_manager_step, check_summaries
from tests.ui.sentence_engine import check_engine_now, check_engine_panels, check_external
from tests.ui.sentence_stage import check_stage_boxes
from vllm_drivers.engine_step_scenarios import (
    random_connector_raw_scenario,
    random_offloading_raw_scenario,
    random_raw_scenario,
    under_both_schedulers,
)


def _texts(panels: list[Panel]) -> dict[str, str]:
    return {p.key: p.text for p in panels}


def _check_metrics(c: Checks, trace: Trace, k: int) -> None:
    t = step.metrics_sentence(trace, k)
    st, snap = trace.snapshot_at(k).stats, trace.snapshot_at(k)
    pat = (
        N
        + r" admitted requests?, "
        + N
        + r" query tokens, "
        + N
        + r" hit tokens: hit rate ([\d.]+)%; window of the last "
        + N
        + r" requests?"
    )
    for r, q, h, rate, w in c.each(pat, t):
        c.eq(
            "metrics: requests, queries, hits, rate, window",
            (r, q, h, w),
            (st["requests"], st["queries"], st["hits"], snap.window_requests),
            t,
        )
        c.eq("metrics: requests, queries, hits, rate, window", float(rate), round(100 * h / q, 1) if q else 0.0, t)


def _check(trace: Trace) -> Counter[str]:
    """Check every step's texts; the comparisons made, per template."""
    c = Checks()
    engine = trace.scenario.sched is not None
    t = step.now(trace, 0).text  # before step 1 (an engine-step scenario draws the same line)
    for n, m in c.each(r"An empty pool of " + N + r" blocks of \d+ tokens: .*? so " + N + " blocks wait", t):
        c.eq(
            "now: before step 1, pool of N blocks, M free",
            (n, m),
            (len(trace.initial.blocks), trace.initial.num_free_blocks),
            t,
        )
    for k in range(1, len(trace.steps) + 1):
        op = trace.steps[k - 1].op.op
        drawn = engine and op in ("step", "abort")
        panels = (engine_step if drawn else step).panels(trace, k)
        if not engine:
            check_manager_step(c, trace, k, step.now(trace, k).text, _texts(panels))
        elif drawn:
            check_engine_now(c, trace, k, engine_step.now(trace, k).text)
            check_engine_panels(c, trace, k, _texts(panels))
            check_external(c, trace, k)
        else:  # an arrive or reset: the stage draws the manager-level panels under the engine's NOW line
            check_engine_now(c, trace, k, engine_step.now(trace, k).text)
            check_manager_panels(c, trace, k, _texts(panels), k)
        check_summaries(c, trace, k, {p.key: p.summary for p in panels})
        check_stage_boxes(c, trace, k, _texts(panels).get("caching", ""))
        _check_metrics(c, trace, k)
    return c.count


def _manager(seed: int, profile: str) -> list[Trace]:
    return [replay(parse_scenario_dict(random_scenario(seed, 60, profile=profile), f"<{profile} {seed}>"))]


def _engine(raw: dict, both: bool = True) -> list[Trace]:
    raws = under_both_schedulers(raw) if both else [raw]
    return [replay(parse_scenario_dict(r, "<random engine steps>")) for r in raws]


def _wide(seed: int) -> dict:
    """A batch wider than the panel draws (over 64 requests, over 40 KV events in a step): 70
    short requests, some sharing a prefix, arriving at once."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(1000) for _ in range(8)] for _ in range(3)]
    steps: list[dict] = []
    for i in range(70):
        head = rng.choice(prefixes)[: rng.choice((0, 4, 8))]
        tail = [1000 + rng.randrange(1000) for _ in range(rng.randint(1, 12))]
        out = [2000 + rng.randrange(1000) for _ in range(rng.randint(1, 4))]
        steps.append({"op": "arrive", "id": f"W{i}", "prompt": head + tail, "output": out})
    steps += [{"op": "step"} for _ in range(rng.randint(4, 7))]
    engine = {"block_size": 4, "hash_algo": "sha256", "hash_seed": "", "events": True, "scheduler": "sync"}
    engine |= {"max_num_batched_tokens": 2048, "max_num_seqs": 80, "num_blocks": 640}
    return {"title": f"a wide batch (seed {seed})", "engine": engine, "steps": steps}


CASES: dict[str, Callable[[], list[Trace]]] = {
    **{f"manager-{s}": (lambda s=s: _manager(s, "mixed")) for s in range(8)},
    **{f"manager-hybrid-{s}": (lambda s=s: _manager(s, "hybrid")) for s in range(6)},
    **{f"eagle-{s}": (lambda s=s: [replay(parse_scenario_dict(random_spec_manager(s), "<eagle>"))]) for s in range(3)},
    **{f"engine-{s}": (lambda s=s: _engine(random_raw_scenario(s))) for s in range(6)},
    **{f"engine-hybrid-{s}": (lambda s=s: _engine(random_raw_scenario(s, hybrid=True))) for s in range(4)},
    # drafts run under the sync scheduler only (design section 9)
    **{f"engine-eagle-{s}": (lambda s=s: _engine(random_spec_engine_steps(s), False)) for s in range(4)},
    # seed 0 draws a scenario that asks the played model past its outputs
    # 11 and 39 draw a load that reports invalid blocks
    **{
        f"connector-{s}": (lambda s=s: _engine(random_connector_raw_scenario(s), False)) for s in (*range(1, 9), 11, 39)
    },
    **{f"wide-{s}": (lambda s=s: _engine(_wide(s))) for s in range(2)},
    **{f"offloading-{s}": (lambda s=s: _engine(random_offloading_raw_scenario(s), False)) for s in range(6)},
}


@cache
def _counts(case: str) -> Counter[str]:
    total: Counter[str] = Counter()
    for t in CASES[case]():
        total += _check(t)
    return total


@pytest.mark.parametrize("case", CASES)
def test_panel_sentences_state_the_recorded_counts(case: str) -> None:
    assert sum(_counts(case).values()) > 0


def _templates() -> set[str]:
    """Every template name the checks compare under (a free split adds its two record checks)."""
    names: set[str] = set()
    for f in ("sentence_checks.py", "sentence_engine.py", "sentence_stage.py", "test_sentences.py"):
        src = (Path(__file__).parent / f).read_text()
        names |= set(re.findall(r'\.(?:eq|events)\(\s*"([^"]+)"', src))
        for name in re.findall(r'\.free_split\(\s*"([^"]+)"', src):
            names |= {name, f"{name} (queue)", f"{name} (front)"}
    return names


def test_every_count_template_is_compared_on_the_random_scenarios() -> None:
    total: Counter[str] = Counter()
    for case in CASES:
        total += _counts(case)
    templates = _templates()
    assert len(templates) > 60
    never = sorted(t for t in templates if total[t] == 0)
    assert never == [], never
