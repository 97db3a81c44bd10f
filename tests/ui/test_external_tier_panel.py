"""The External tier panel (design section 10) on the connector lesson: every step renders, and
the panel shows what the step's connector reports say (the offer after the local hit, the
request waiting for its load and its blocks, the promotion, the failed load and its evictions)."""

from __future__ import annotations

from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario
from explorer.viz.external_tier_html import external_tier_html
from tests.ui.helpers import ROOT, all_html, step_through_lesson

LESSON = "18_external_tier"


def _trace():
    return replay(load_scenario(ROOT / "lessons" / f"{LESSON}.toml"))


def test_every_step_of_the_connector_lesson_renders_with_the_panel_where_the_connector_acted():
    drawn = {k: all_html(at) for k, _, at in step_through_lesson(LESSON)}
    assert 'data-px-panel="external"' in drawn[2] and 'data-px-xt-lookup="A"' in drawn[2]
    assert 'data-px-xt-waiting="A"' in drawn[2]  # holding its blocks, unhashed
    assert 'data-px-xt-loaded="A"' in drawn[3] and 'data-px-xt-waiting="A"' not in drawn[3]
    assert 'data-px-xt-failed="B"' in drawn[5] and "lost their hashes" in drawn[5]
    assert 'data-px-panel="external"' not in drawn[1]  # an arrive: no connector work
    # between the lookup and the allocation
    html = drawn[2]
    assert html.index('data-px-panel="external"') < html.index('data-px-panel="allocate"')


def test_the_panel_body_follows_the_reports_not_the_scenario():
    trace = _trace()
    step = trace.steps[1]
    before, after = trace.snapshot_at(1), trace.snapshot_at(2)
    html = external_tier_html(step.engine_step.connector, step.engine_step.external, before, after, 0)
    assert "offers <b>64 tokens</b> after it (async" in html and "external queries 100, hits 64" in html
    assert external_tier_html((), None, before, before, 0) == ""
