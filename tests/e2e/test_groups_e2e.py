"""The sliding-window lesson in a real browser: step lesson 16 to the end; every step draws a
block-table row per group (null blocks counted), and each admission's lookup shows each group's
own hit and the reconciled hit, as the replay JSON records them."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario
from tests.e2e.conftest import REPO, shot, wait_idle

pytestmark = pytest.mark.e2e

LESSON = REPO / "lessons" / "16_sliding_window.toml"


def test_step_the_sliding_window_lesson_to_the_end(px_page, px_app_url):
    page = px_page
    trace = replay(load_scenario(LESSON))
    steps = trace.to_json()["steps"]
    page.goto(f"{px_app_url}/?lesson=16_sliding_window")
    expect(page.locator(".px-now .px-headline")).to_contain_text(f"Step 0 of {len(steps)}", timeout=90_000)
    wait_idle(page)
    for k, s in enumerate(steps, start=1):
        page.locator(".px-b-next").first.click()
        expect(page.locator(".px-now .px-headline")).to_contain_text(f"Step {k} of {len(steps)}", timeout=90_000)
        wait_idle(page)
        rows = page.locator("[data-px-group-row]").evaluate_all("els => els.map(e => e.dataset.pxGroupRow)")
        want = [
            f"{r.request_id}:{g}:{ids.count(0)}"
            for r in trace.snapshot_at(k).requests
            for g, ids in enumerate(r.block_ids_by_group)
        ]
        assert rows == want, k
        if s["op"] == "admit":
            hits = page.locator("[data-px-group-hit]").evaluate_all("els => els.map(e => e.dataset.pxGroupHit)")
            assert hits == [f"{g}:{h}" for g, h in enumerate(s["group_hit_tokens"])], k
            reconciled = page.locator("[data-px-reconciled]").get_attribute("data-px-reconciled")
            assert reconciled == str(s["hit_tokens"]), k
        if k == 6:
            shot(page, "groups_lesson_c")
            panel = page.locator(".st-key-px_panel_groups")
            panel.scroll_into_view_if_needed()
            panel.screenshot(path=str(shot(page, "groups_lesson_c").with_name("groups_lesson_c_panel.png")))
            tables = page.locator("[data-px-group-request]").first
            tables.scroll_into_view_if_needed()
            tables.screenshot(path=str(shot(page, "groups_lesson_c").with_name("groups_lesson_c_tables.png")))
