"""The explorer's stage in a real browser: presenter mode fits one step on one 16:9 screen with
every control label whole, the control bar never cuts a label from 1024 to 1920 px, Next keeps
the stage where it is, and the Router and Trace replay pages keep their last result (and their
settings) across a visit to another page."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import open_tab, server_log, settle_layout, shot, wait_idle

pytestmark = pytest.mark.e2e

LESSON = "00_two_chat_turns"
CONTROLS = ".px-stage-bar"  # the stage component's control bar (explorer/ui/static/stage.js)
# Each control bar button: (its label's overflow, its own box's) and its text.
BUTTONS_JS = """() => Array.from(document.querySelectorAll('.px-stage-bar button:not([hidden])')).map(b => {
  const label = b.querySelector('[data-testid="stMarkdownContainer"]') || b;
  return {text: b.innerText.trim(), sw: b.scrollWidth, cw: b.clientWidth, lsw: label.scrollWidth, lcw: label.clientWidth};
})"""
BOX_JS = """s => { const e = document.querySelector(s); if (!e) return null;
  const r = e.getBoundingClientRect(); return {top: r.top, bottom: r.bottom, height: r.height}; }"""


# The NOW box's text set at another size: the text above the panels reflows after the draw.
NOW_TEXT_SIZE_JS = "size => { document.querySelector('.px-pres-now .px-now-text').style.fontSize = size; }"


def _open(page, url: str) -> None:
    page.goto(url)
    page.locator(".px-now").first.wait_for(timeout=90_000)
    wait_idle(page)


def _now_step(page) -> str:
    return page.locator(".px-now").first.get_attribute("data-px-now")


def _next(page, to: int) -> None:
    page.locator(".px-b-next").first.click()
    expect(page.locator(".px-now").first).to_have_attribute("data-px-now", str(to), timeout=90_000)
    wait_idle(page)


def _assert_labels_whole(page) -> list[str]:
    buttons = page.evaluate(BUTTONS_JS)
    assert buttons, "no control bar buttons"
    for b in buttons:
        assert b["sw"] <= b["cw"] + 1 and b["lsw"] <= b["lcw"] + 1, f"a cut control label: {b}"
    texts = [b["text"] for b in buttons]
    assert any(t.startswith("Next") for t in texts), texts
    return texts


@pytest.mark.parametrize("size", [(1280, 720), (1920, 1080)], ids=["1280x720", "1920x1080"])
def test_presenter_fits_one_step_on_one_screen(px_tabs, px_app_url, size):
    w, h = size
    with open_tab(px_tabs, w, h) as page:
        _open(page, f"{px_app_url}/?lesson={LESSON}&step=6&presenter=1")
        expect(page.get_by_test_id("stSidebar")).to_be_hidden()
        texts = _assert_labels_whole(page)
        assert "Full page" in " ".join(texts)  # the full page is one click away
        for reflow in ("", "1.1rem", "0.7rem"):
            # Text above the panels reflowing after the stage drew (on a busy machine the web
            # fonts arrive late and the NOW box wraps anew) must not push them off the screen,
            # nor leave the screen's foot empty.
            if reflow:
                page.evaluate(NOW_TEXT_SIZE_JS, reflow)
            settle_layout(page)
            stage = page.evaluate(BOX_JS, ".px-stage-body")
            assert stage["bottom"] <= h + 1, f"the stage runs past the screen: {stage} at {size}, {reflow}"
            assert stage["bottom"] >= h - 12, f"the panels leave the screen's foot empty: {stage} at {size}, {reflow}"
        for sel in (
            ".px-now",
            "[data-px-panel]",
            '[data-px-pres="metrics"]',
            '[data-px-pres="changed"]',
            '[data-px-pres="free"]',
        ):
            box = page.evaluate(BOX_JS, sel)
            assert box is not None and box["height"] > 0 and box["top"] < h - 20, f"{sel} is not on the screen: {box}"
        # readable from the back of a room: the step's headline and the block chips grow with the screen
        head = page.locator(".px-now .px-headline").evaluate("e => parseFloat(getComputedStyle(e).fontSize)")
        chip = page.locator('[data-px-pres="changed"] .px-blk').first.evaluate(
            "e => parseFloat(getComputedStyle(e).fontSize)"
        )
        assert head >= 0.03 * h and chip >= 0.019 * h, (head, chip)
        assert page.locator('[data-px-pres="changed"]').get_attribute("data-px-changed") == "34"
        shot(page, f"presenter-{w}x{h}")
        page.locator(".px-b-full-page").first.click()
        expect(page.get_by_test_id("stSidebar")).to_be_visible(timeout=90_000)
        wait_idle(page)
        assert "presenter" not in page.url


@pytest.mark.parametrize("presenter", ["", "&presenter=1"], ids=["full-page", "presenter"])
def test_the_control_bar_never_cuts_a_label(px_tabs, px_app_url, presenter):
    # one load, then the window resized through the widths: the layout follows the width alone
    # (the presenter lessons' walk does the same), and each load costs the browser seconds of CPU
    with open_tab(px_tabs, 1024, 900) as page:
        _open(page, f"{px_app_url}/?lesson={LESSON}&step=3{presenter}")
        for width in (1024, 1280, 1600, 1920):
            page.set_viewport_size({"width": width, "height": 900})
            settle_layout(page)
            wait_idle(page)
            texts = _assert_labels_whole(page)
            assert "Next" in [t.split()[0] for t in texts if t], (width, texts)
        # no Deploy button and no developer menu (client.toolbarMode = "minimal")
        assert page.get_by_test_id("stAppDeployButton").count() == 0
        assert page.get_by_text("Deploy", exact=True).count() == 0


@pytest.mark.parametrize("presenter", [True, False], ids=["presenter", "full-page"])
def test_next_keeps_the_stage_in_place(px_tabs, px_app_url, presenter):
    with open_tab(px_tabs, 1280, 720) as page:
        _open(page, f"{px_app_url}/?lesson={LESSON}&step=4" + ("&presenter=1" if presenter else ""))
        if not presenter:  # the stage's top in mid screen: anything above it changing height would move it
            page.locator(CONTROLS).scroll_into_view_if_needed()
            page.mouse.wheel(0, 120)
            page.wait_for_timeout(300)
        tops = [page.evaluate(BOX_JS, CONTROLS)["top"]]
        for k in (5, 6, 7):
            _next(page, k)
            tops.append(page.evaluate(BOX_JS, CONTROLS)["top"])
        assert max(tops) - min(tops) <= 1, f"the stage moved: {tops}"


def _nav(page, label: str) -> None:
    page.get_by_test_id("stSidebarNav").get_by_role("link", name=label, exact=True).click()


def test_router_keeps_its_last_result_and_settings(px_page, px_app_url):
    page = px_page
    page.goto(f"{px_app_url}/router")
    page.locator(".st-key-router_fig_hit").wait_for(timeout=180_000)
    wait_idle(page)
    box = page.get_by_role("spinbutton", name="Requests")
    box.fill("150")
    box.press("Enter")
    done = page.get_by_text("150 requests (", exact=False)
    expect(done.first).to_be_visible(timeout=180_000)
    wait_idle(page)
    caption = done.first.inner_text()
    assert "simulated in" in caption
    _nav(page, "Explorer")
    page.locator(".px-now").first.wait_for()
    wait_idle(page)
    _nav(page, "Router")
    expect(page.get_by_role("spinbutton", name="Requests")).to_have_value("150", timeout=90_000)
    page.locator(".st-key-router_fig_hit").wait_for()
    wait_idle(page)
    # the same result object: its own simulation time is shown unchanged (a new run measures anew)
    assert page.get_by_text("150 requests (", exact=False).first.inner_text() == caption


def test_trace_replay_keeps_its_last_result_and_settings(px_page, px_app_url):
    page = px_page
    page.goto(f"{px_app_url}/replay")
    page.get_by_role("button", name="Run replay").wait_for(timeout=90_000)
    wait_idle(page)
    box = page.get_by_role("spinbutton", name="Requests to replay (0 = all)")
    box.fill("40")
    box.press("Enter")
    wait_idle(page)
    page.get_by_role("button", name="Run replay").click()
    page.locator(".st-key-replay_fig_size").wait_for(timeout=180_000)
    wait_idle(page)
    summary = page.get_by_text("40 requests,", exact=False).first.inner_text()
    _nav(page, "Lessons")
    page.get_by_role("heading", name="Lessons").wait_for()
    wait_idle(page)
    _nav(page, "Trace replay")
    page.locator(".st-key-replay_fig_size").wait_for(timeout=90_000)
    wait_idle(page)
    expect(page.get_by_role("spinbutton", name="Requests to replay (0 = all)")).to_have_value("40")
    assert page.get_by_text("40 requests,", exact=False).first.inner_text() == summary
    # the kept values went back through session state without Streamlit's logged stack trace
    # (.streamlit/config.toml, global.disableWidgetStateDuplicationWarning)
    assert "created with a default value" not in server_log().read_text(errors="replace")


def test_the_explorer_comes_back_at_the_step_the_browser_was_on(px_page, px_app_url):
    # The browser steps without telling the server; a visit to another page mounts the stage
    # again, and it must not fall back to the step the server last moved it to (0 here).
    page = px_page
    _open(page, f"{px_app_url}/?lesson={LESSON}")
    assert _now_step(page) == "0"
    for k in (1, 2, 3):
        _next(page, k)
    _nav(page, "Lessons")
    page.get_by_role("heading", name="Lessons").wait_for()
    wait_idle(page)
    _nav(page, "Explorer")
    page.locator(".px-now").first.wait_for(timeout=90_000)
    wait_idle(page)
    expect(page.locator(".px-now").first).to_have_attribute("data-px-now", "3", timeout=30_000)
    expect(page).to_have_url(re.compile(r"[?&]step=3(&|$)"), timeout=30_000)
