"""An engine-step lesson in a real browser: step lesson 14 to the end, and at every `step` the
batch panel shows the step's scheduled tokens, the budget, who was preempted and who finished,
as the replay JSON records them."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario
from tests.e2e.conftest import REPO, shot, wait_idle

pytestmark = pytest.mark.e2e

LESSON = REPO / "lessons" / "14_engine_step.toml"


def test_step_the_engine_step_lesson_to_the_end(px_page, px_app_url):
    page = px_page
    sc = load_scenario(LESSON)
    budget = sc.sched.max_num_batched_tokens
    steps = replay(sc).to_json()["steps"]
    page.goto(f"{px_app_url}/?lesson=14_engine_step")
    expect(page.locator(".px-now .px-headline")).to_contain_text(f"Step 0 of {len(steps)}", timeout=90_000)
    wait_idle(page)
    for k, s in enumerate(steps, start=1):
        page.locator(".px-b-next").first.click()
        expect(page.locator(".px-now .px-headline")).to_contain_text(f"Step {k} of {len(steps)}", timeout=90_000)
        wait_idle(page)
        if s["op"] != "step":
            assert page.locator("[data-px-panel=batch]").count() == 0
            continue
        used = sum(s["scheduled"].values())
        assert page.locator("[data-px-budget]").get_attribute("data-px-budget") == f"{used}/{budget}"
        shown = page.locator("[data-px-sched]").evaluate_all("els => els.map(e => e.dataset.pxSched)")
        assert shown == [f"{rid}:{n}" for rid, n in s["scheduled"].items()]
        preempted = page.locator("[data-px-preempted]").evaluate_all("els => els.map(e => e.dataset.pxPreempted)")
        assert preempted == s["preempted"]
        finished = page.locator("[data-px-finished]").evaluate_all("els => els.map(e => e.dataset.pxFinished)")
        assert finished == s["finished"]
        if s["preempted"]:
            assert "found no room" in page.locator(".st-key-px_panel_batch").inner_text()
            shot(page, "engine-step-preemption")
    expect(page.locator(".px-b-next").first).to_be_disabled()
