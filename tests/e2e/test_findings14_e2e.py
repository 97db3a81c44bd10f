"""Issue 14 in a real browser: the blank pool gives A a 0-token hit, an off-script lesson shows no
failed check, and the clipped content of before (metrics code links, the hash map, the router
table, Practice's "What happened so far") wraps at 1024 px and wider."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from explorer.scenario.parse import load_scenario
from tests.e2e.conftest import REPO, open_tab, settle_layout, shot, wait_idle

pytestmark = pytest.mark.e2e

# How far an element or anything inside it reaches past its column (a Streamlit column, or one of
# the stage's own: .px-col, explorer/view/html.py columns) or the main block, in px, and how much
# it scrolls sideways: 0 and 0 when it wraps.
OVERFLOW_JS = """(sel) => [...document.querySelectorAll(sel)].map((el) => {
  const box = el.closest('[data-testid="stColumn"], .px-col') || el.closest('[data-testid="stMainBlockContainer"]');
  const right = box.getBoundingClientRect().right;
  let past = 0, scroll = 0;
  for (const d of [el, ...el.querySelectorAll('*')]) {
    const r = d.getBoundingClientRect();
    if (r.width === 0) continue;
    past = Math.max(past, r.right - right);
    if (getComputedStyle(d).overflowX !== 'visible') scroll = Math.max(scroll, d.scrollWidth - d.clientWidth);
  }
  return [Math.round(past), scroll];
})"""


def _open(page, url: str, expect_text: str) -> None:
    page.goto(url)
    expect(page.locator(".px-now .px-headline")).to_contain_text(expect_text, timeout=90_000)
    wait_idle(page)


def _text(loc) -> str:
    """Text as read: without the word joiners the page puts after colons (explorer/viz/text.py)."""
    return loc.inner_text().replace("\u2060", "")


def test_the_blank_pool_gives_a_a_0_token_hit(px_page, px_app_url):
    page = px_page
    _open(page, f"{px_app_url}/?lesson=blank_pool", "Step 0 of 0")
    side = page.get_by_test_id("stSidebar")
    expect(side).to_contain_text("New steps continue from the start of Blank pool")
    page.locator(".st-key-px_p_kind").get_by_text("Token spec").click()
    page.locator(".st-key-px_p_id input").fill("A")
    page.locator(".st-key-px_p_spec input").fill("0:100")
    side.get_by_role("button", name="Arrive").click()
    expect(page.locator(".px-now .px-headline")).to_contain_text("Step 1 of 1: arrive A", timeout=90_000)
    wait_idle(page)
    page.locator(".st-key-px_b_admit button").first.click()
    expect(page.locator(".px-now .px-headline")).to_contain_text("Step 2 of 2: admit A", timeout=90_000)
    wait_idle(page)
    assert "A hits 0 of its 100 tokens" in page.locator(".px-now").inner_text()
    expect(side).to_contain_text("A is running")
    assert "after step 2 of Blank pool (all from the playground): A is running, 6 blocks cached" in _text(side)
    shot(page, "blank-pool-admit")


def test_start_from_an_empty_pool_button(px_page, px_app_url):
    page = px_page
    _open(page, f"{px_app_url}/?lesson=00_two_chat_turns&step=20", "Step 20 of 20")
    side = page.get_by_test_id("stSidebar")
    details = page.locator(".st-key-px_x_playground details").first
    if details.get_attribute("open") is None:
        details.locator("summary").click()
    expect(side).to_contain_text("A3 is running")
    assert "New steps continue after step 20 of Two chat turns: A3 is running" in _text(side)
    page.locator(".st-key-px_b_empty_pool button").first.click()
    expect(page.locator(".px-now .px-headline")).to_contain_text("Step 0 of 0", timeout=90_000)
    wait_idle(page)
    assert "lesson=blank_pool" in page.url


def test_an_off_script_lesson_shows_no_failed_check(px_page, px_app_url):
    page = px_page
    sc = load_scenario(REPO / "lessons" / "00_two_chat_turns.toml")
    k = next(op.index + 1 for op in sc.ops if op.expect and op.note and "hit_tokens" in op.expect)
    _open(page, f"{px_app_url}/?lesson=00_two_chat_turns&step={k}&bs=8", f"Step {k} of")
    now = page.locator(".px-now")
    expect(now.locator('[data-px-checks="n/a"]')).to_contain_text("not applicable to your settings")
    expect(now.locator('[data-px-offscript="1"]')).to_contain_text("Written for the default settings")
    assert now.locator('[data-px-checks="ok"]').count() == 0
    assert "Lesson check failed" not in page.get_by_test_id("stMain").inner_text()
    shot(page, "off-script-lesson")
    # on script, the same step's checks hold
    _open(page, f"{px_app_url}/?lesson=00_two_chat_turns&step={k}", f"Step {k} of")
    expect(page.locator('.px-now [data-px-checks="ok"]')).to_contain_text("lesson checks hold")


def test_clipped_content_wraps_from_1024_px(px_tabs, px_app_url):
    # each page loaded once at 1024 px, then checked again at 1280 px after a resize: the layout
    # follows the width alone, and a load costs the browser seconds of CPU
    with open_tab(px_tabs, 1024, 900) as page:
        checks = [
            (
                f"{px_app_url}/?lesson=00_two_chat_turns&step=20",
                [".px-refs", ".px-scroll", ".px-col:has(.px-rate)"],  # the metrics column whole
            ),
            (f"{px_app_url}/router", ['[data-testid="stTable"]']),
            (f"{px_app_url}/practice", ['[data-testid="stExpander"]']),
        ]
        for url, selectors in checks:
            page.set_viewport_size({"width": 1024, "height": 900})
            page.goto(url)
            wait_idle(page)
            page.wait_for_timeout(1500)  # late layout (fonts, the router's simulation)
            wait_idle(page)
            for width in (1024, 1280):
                page.set_viewport_size({"width": width, "height": 900})
                settle_layout(page)
                for sel in selectors:
                    found = page.evaluate(OVERFLOW_JS, sel)
                    assert found, f"{url}: no {sel}"
                    bad = [f for f in found if f[0] > 1 or f[1] > 1]
                    assert not bad, f"{url} at {width} px: {sel} overflows by {bad}"
        expander = page.locator('[data-testid="stExpander"]', has_text="What happened so far")
        expect(expander).to_have_count(1)
        shot(page, "practice-wrap-1280")
