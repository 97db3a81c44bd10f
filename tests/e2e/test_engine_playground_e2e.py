"""The engine-step playground in a real browser (issue 24 item 5): on an engine-step lesson the
user switches the scheduler to async and raises the token budget, arrives a request and steps;
the replay follows each change at once, and the shared link opens the same view in a fresh page."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from explorer.scenario.parse import load_scenario
from tests.e2e.conftest import REPO, open_tab, settled_url, shot, wait_idle

pytestmark = pytest.mark.e2e

LESSON = "14_engine_step"
NOW = ".px-now"
HEADLINE = ".px-now .px-headline"
ASYNC = "No update_from_output ran in this call"


def _sidebar_section(page: Page, key: str) -> None:
    details = page.locator(f".st-key-{key} details").first
    if details.get_attribute("open") is None:
        details.locator("summary").click()
    expect(details).to_have_attribute("open", "")


def _now(page: Page) -> str:
    return " ".join(page.locator(NOW).inner_text().split())


def test_edit_an_engine_step_scenario_and_share_it(px_tabs: BrowserContext, px_page: Page, px_app_url: str) -> None:
    n = len(load_scenario(REPO / "lessons" / f"{LESSON}.toml").ops)
    page = px_page
    page.goto(f"{px_app_url}/?lesson={LESSON}&step=2")
    expect(page.locator(HEADLINE)).to_contain_text(f"Step 2 of {n}: engine step: A 64", timeout=90_000)
    wait_idle(page)
    assert "of the 64-token budget" in _now(page) and ASYNC not in _now(page)

    _sidebar_section(page, "px_x_engine")
    page.locator('[class*="st-key-px_w_sched__"]').get_by_text("async", exact=True).click()
    expect(page.locator(NOW)).to_contain_text(ASYNC, timeout=90_000)  # the batch queue defers the update
    wait_idle(page)
    budget = page.locator('[class*="st-key-px_w_mnbt__"] input')
    budget.fill("256")
    budget.press("Enter")
    expect(page.locator(NOW)).to_contain_text("of the 256-token budget", timeout=90_000)
    wait_idle(page)
    expect(page.locator(HEADLINE)).to_contain_text("Step 2 of", timeout=30_000)
    assert "engine step: A 108" in page.locator(HEADLINE).inner_text()  # the whole prompt in one step now

    _sidebar_section(page, "px_x_playground")
    page.locator(".st-key-px_e_id input").fill("Z")
    page.locator(".st-key-px_e_prompt input").fill("0:48")
    page.locator(".st-key-px_e_output input").fill("9000:9003")
    page.get_by_test_id("stSidebar").get_by_role("button", name="Arrive").click()
    expect(page.locator(HEADLINE)).to_contain_text(": arrive Z", timeout=90_000)
    wait_idle(page)
    m = re.search(r"Step (\d+) of (\d+)", page.locator(HEADLINE).inner_text())
    assert m is not None and m.group(1) == m.group(2)
    k = int(m.group(1))
    page.locator(".st-key-px_b_step button").click()
    expect(page.locator(HEADLINE)).to_contain_text(f"Step {k + 1} of {k + 1}: engine step", timeout=90_000)
    wait_idle(page)
    expect(page.locator(HEADLINE)).to_contain_text("Z ", timeout=30_000)  # the new request is scheduled
    shot(page, "engine-playground")

    expect(page).to_have_url(re.compile(r"[?&]sched=async(&|$)"), timeout=30_000)
    expect(page).to_have_url(re.compile(r"[?&]mnbt=256(&|$)"), timeout=30_000)
    expect(page).to_have_url(re.compile(rf"[?&]step={k + 1}(&|$)"), timeout=30_000)
    shared, headline, now = settled_url(page), page.locator(HEADLINE).inner_text(), _now(page)
    assert "ed=" in shared
    with open_tab(px_tabs) as fresh:  # a new tab: a new session, which has only the link
        fresh.goto(shared)
        expect(fresh.locator(HEADLINE)).to_contain_text(f"Step {k + 1} of {k + 1}", timeout=90_000)
        wait_idle(fresh)
        assert fresh.locator(HEADLINE).inner_text() == headline
        assert _now(fresh) == now
        assert not fresh.get_by_test_id("stAlert").count()  # no message: the link was whole
