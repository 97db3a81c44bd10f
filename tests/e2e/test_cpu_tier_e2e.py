"""The offloading lesson (19_cpu_offloading) in a real browser: step it to the end; the External
tier panel draws the CPU tier where the connector acted, with A's store, B's load from the CPU
and C's store evicting the tier's least recently used chunks."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario
from tests.e2e.conftest import REPO, shot, wait_idle

pytestmark = pytest.mark.e2e

LESSON = REPO / "lessons" / "19_cpu_offloading.toml"


def test_step_the_offloading_lesson_to_the_end(px_page, px_app_url):
    page = px_page
    trace = replay(load_scenario(LESSON))
    n = len(trace.steps)
    page.goto(f"{px_app_url}/?lesson=19_cpu_offloading")
    expect(page.locator(".px-now .px-headline")).to_contain_text(f"Step 0 of {n}", timeout=90_000)
    wait_idle(page)
    seen = set()
    for k in range(1, n + 1):
        page.locator(".st-key-px_b_next button").first.click()
        expect(page.locator(".px-now .px-headline")).to_contain_text(f"Step {k} of {n}", timeout=90_000)
        wait_idle(page)
        for attr, key in (("cpu-store", "pxCpuStore"), ("cpu-load", "pxCpuLoad")):
            ids = page.locator(f"[data-px-{attr}]").evaluate_all(f"els => els.map(e => e.dataset.{key})")
            seen.update(f"{attr}:{i}" for i in ids)
        if page.locator("[data-px-cpu-tier]").count():
            seen.add(f"tier:{k}")
        if k == 8:
            shot(page, "cpu-tier-load-from-cpu")
    assert {"cpu-store:A", "cpu-store:X", "cpu-load:B", "cpu-store:C", "tier:8", "tier:12"} <= seen
    expect(page.locator(".st-key-px_b_next button").first).to_be_disabled()
