"""An engine step that preempts says when the metrics count it (issue "the classroom"): the
PREEMPTED event rides on the request's next output, so vllm:num_preemptions grows then, not in
the step that preempted. Checked against the metrics recorded for the same replay."""

from __future__ import annotations

from pathlib import Path

import pytest

from explorer.metrics.replay import points
from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario
from explorer.view.explain import engine_step

GOLDEN = Path(__file__).resolve().parents[1] / "scenario" / "golden" / "engine_steps"


@pytest.mark.parametrize("name", ["preemption_sync", "preemption_async"])
def test_a_preemption_says_the_counter_grows_with_the_next_output(name):
    trace = replay(load_scenario(GOLDEN / f"{name}.toml"))
    counted = [0] + [p.preemptions for p in points(trace)]  # vllm:num_preemptions after each op
    said = 0
    for k, step in enumerate(trace.steps, 1):
        es = step.engine_step
        if es is None or not es.preemption_reasons:
            continue
        text = engine_step.now(trace, k).text  # the NOW box: what the step did, in words
        for victim, _ in es.preemption_reasons:
            assert f"{victim} was preempted" in text and "vllm:num_preemptions grows when that output arrives" in text
            said += 1
            # the counter grows at the victim's next output (async: the token already in
            # flight, delivered in this very step), and not before it
            j = next(
                i
                for i in range(k, len(trace.steps) + 1)
                if victim in getattr(trace.steps[i - 1].engine_step, "outputs", {})
            )
            assert counted[j] > counted[j - 1] and counted[j - 1] == counted[k - 1], (k, j, counted)
    assert said > 0 and counted[-1] == said  # each counted once, later
