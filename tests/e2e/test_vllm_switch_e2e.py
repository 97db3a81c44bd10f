"""The vLLM release switch in a real browser (design section 15): the Explorer shows the release
it replays under, the user switches it, and the next steps replay under the chosen one."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import settled_url, shot, wait_idle

pytestmark = pytest.mark.e2e

LESSON = "20_what_changed_in_033"


SWITCH = '[class*="st-key-px_vllm_release"] [role="radio"]'


def _active(page) -> str:
    return page.locator(f'{SWITCH}[aria-checked="true"]').first.inner_text().strip()


def test_the_explorer_switches_between_0_31_and_0_33(px_page, px_app_url):
    page = px_page
    page.goto(f"{px_app_url}/?lesson={LESSON}")
    expect(page.locator(".px-now .px-headline")).to_contain_text("Step 0 of", timeout=90_000)
    wait_idle(page)
    assert _active(page) == "0.31.0"
    page.locator(SWITCH, has_text="0.33.0").first.click()
    # The server has replayed under 0.33.0 once the link carries it (the page writes it after
    # drawing the stage); the idle flag alone can be read before that run begins.
    expect(page).to_have_url(re.compile(r"[?&]vllm=0\.33\.0(&|$)"), timeout=90_000)
    wait_idle(page)
    expect(page.locator(f'{SWITCH}[aria-checked="true"]').first).to_have_text("0.33.0", timeout=90_000)
    shot(page, "vllm-switch-033")
    # The view keeps the release: the next step replays under 0.33.0 too.
    page.locator(".px-b-next").first.click()  # the stage component's Next
    expect(page.locator(".px-now .px-headline")).to_contain_text("Step 1 of", timeout=90_000)
    wait_idle(page)
    assert _active(page) == "0.33.0"
    # The link carries the release: opened in a fresh tab, it replays under 0.33.0 at once.
    expect(page).to_have_url(re.compile(r"[?&]vllm=0\.33\.0(&|$)"), timeout=30_000)
    shared = settled_url(page)
    fresh = page.context.new_page()
    try:
        fresh.goto(shared)
        expect(fresh.locator(".px-now .px-headline")).to_contain_text("Step 1 of", timeout=90_000)
        wait_idle(fresh)
        assert _active(fresh) == "0.33.0"
    finally:
        fresh.close()
