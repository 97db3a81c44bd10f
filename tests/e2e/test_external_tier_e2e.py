"""The KV connector lesson (17) in a real browser: step it to the end; the External tier panel
appears exactly where the connector acted, between the lookup and the allocation, and shows the
request waiting for its load, the finished load and the failed one."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario
from tests.e2e.conftest import REPO, shot, wait_idle

pytestmark = pytest.mark.e2e

LESSON = REPO / "lessons" / "18_external_tier.toml"


def test_step_the_connector_lesson_to_the_end(px_page, px_app_url):
    page = px_page
    trace = replay(load_scenario(LESSON))
    n = len(trace.steps)
    page.goto(f"{px_app_url}/?lesson=18_external_tier")
    expect(page.locator(".px-now .px-headline")).to_contain_text(f"Step 0 of {n}", timeout=90_000)
    wait_idle(page)
    seen = set()
    for k in range(1, n + 1):
        page.locator(".st-key-px_b_next button").first.click()
        expect(page.locator(".px-now .px-headline")).to_contain_text(f"Step {k} of {n}", timeout=90_000)
        wait_idle(page)
        es = trace.steps[k - 1].engine_step
        panel = page.locator("[data-px-panel=external]")
        if es is None or not (es.connector or es.external):
            assert panel.count() == 0, k
            continue
        expect(panel).to_have_count(1)
        for attr in ("waiting", "loaded", "failed"):
            ids = page.locator(f"[data-px-xt-{attr}]").evaluate_all(
                f"els => els.map(e => e.dataset.pxXt{attr.capitalize()})"
            )
            seen.update(f"{attr}:{i}" for i in ids)
        if k == 2:
            shot(page, "external-tier-async-load")
    assert {"waiting:A", "loaded:A", "failed:B", "waiting:D", "loaded:D"} <= seen
    expect(page.locator(".st-key-px_b_next button").first).to_be_disabled()
