"""Hostile strings in a real browser: every request the page makes goes to the app's own origin.

The pages are opened with hostile strings in every place a user controls (an uploaded scenario's
title, notes, request ids, LoRA names, salts and image ids and its file name, through a shared
link; hash calculator fields; a live endpoint and topic; a fleet file; URL parameters), the
widgets that show them are opened (select boxes' option lists, expanders, block history), and
every network request the browser makes is recorded. The hostile strings point at
``evil.test`` and ``javascript:`` URLs; a request anywhere but the app's origin (or a data: or
blob: URL the app made) means a string was interpreted as markup. Afterwards the server still
answers and another session sees its own default page.
"""

from __future__ import annotations

import re
import urllib.parse
import urllib.request

import pytest
from playwright.sync_api import expect

from explorer.ui.state import encode_blob
from tests.e2e.conftest import open_tab, shot, wait_idle
from tests.ui.hostile import EVIL, HOSTILE
from tests.ui.test_hostile_pages import UPLOAD_NAME, hostile_scenario

pytestmark = pytest.mark.e2e


@pytest.fixture
def recorded(px_browser, px_app_url):
    """A page, the URLs it requested, and the JavaScript dialogs it opened."""
    ctx = px_browser.new_context(viewport={"width": 1500, "height": 1000})
    ctx.set_default_timeout(90_000)
    urls: list[str] = []
    dialogs: list[str] = []
    # the page loads the test opens carry hostile strings in their address themselves
    ctx.on("request", lambda r: urls.append(r.url) if r.resource_type != "document" else None)
    origin = px_app_url.rstrip("/")
    # nothing leaves the machine: a request elsewhere is recorded above, then refused
    ctx.route(
        "**/*",
        lambda route: route.continue_() if route.request.url.startswith(origin) else route.abort(),
    )
    page = ctx.new_page()
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    try:
        yield page, urls, dialogs
    finally:
        ctx.close()


def _foreign(urls: list[str], origin: str) -> list[str]:
    return [u for u in urls if not (u.startswith(origin) or u.startswith(("data:", "blob:", "about:")))]


_LINKS = """() => [...document.querySelectorAll('a[href], img[src], iframe[src], source[src], video, audio, object, embed')]
  .map(e => e.getAttribute('href') || e.getAttribute('src') || e.tagName)"""


def _no_foreign_links(page, origin: str) -> None:
    """No element on the page links to or loads a hostile URL (a link is not fetched, but it is
    a URL the app did not put there)."""
    bad = [u for u in page.evaluate(_LINKS) if EVIL in u or u.lower().startswith("javascript:")]
    assert not bad, bad


def _open_selectbox(page, key_prefix: str) -> None:
    """Open a select box's list of options (they are drawn only while it is open), then close it.
    Only the open list's options count: the stage's native speed select keeps its own options in
    the page, hidden."""
    options = page.get_by_role("listbox").get_by_role("option")
    box = page.locator(f'[class*="st-key-{key_prefix}"] input').first
    box.wait_for(state="attached")
    if not box.is_visible():
        # Its expander is closed: once (of many runs), on a loaded machine, the playground's was
        # found closed here after the test had opened it; open it again rather than wait for it.
        page.locator(f'details:has([class*="st-key-{key_prefix}"]) > summary').first.click()
    box.click()
    page.wait_for_timeout(300)
    if options.count() == 0:
        page.keyboard.press("ArrowDown")
    expect(options.first).to_be_visible(timeout=30_000)
    page.wait_for_timeout(500)
    page.keyboard.press("Escape")


def test_hostile_strings_on_every_page_load_nothing_from_elsewhere(recorded, px_app_url):
    page, urls, dialogs = recorded
    origin = px_app_url.rstrip("/")
    up = encode_blob({"name": UPLOAD_NAME, "toml": hostile_scenario().decode()})
    page.goto(f"{origin}/?{urllib.parse.urlencode({'up': up, 'step': '3', 'dseed': HOSTILE[3][:200]})}")
    expect(page.locator(".px-now .px-headline")).to_contain_text("Step 3 of 19", timeout=90_000)
    wait_idle(page)
    for _ in range(4):
        page.locator(".px-b-next").first.click()
        wait_idle(page)
    # the stage's own controls step in the browser: Back, the slider, autoplay at another speed
    page.locator(".px-b-back").first.click()
    page.locator(".px-range").first.fill("8")
    expect(page.locator(".px-now .px-headline")).to_contain_text(re.compile(r"^Step 8 of 19"))
    page.locator(".px-speed").first.select_option("2x")
    page.locator(".px-b-play").first.click()
    expect(page.locator(".px-now .px-headline")).to_contain_text(re.compile(r"^Step 1[0-9] of 19"), timeout=30_000)
    page.locator(".px-b-play").first.click()  # pressed again, it stops
    wait_idle(page)
    for sel in (
        ".st-key-px_x_engine details",
        ".st-key-px_x_playground details",
        ".st-key-px_x_files details",
        "details.px-share",
    ):
        details = page.locator(sel).first
        if details.get_attribute("open") is None:
            details.locator("summary").click()
    wait_idle(page)
    _open_selectbox(page, "px_w_lesson__")
    _open_selectbox(page, "px_a_req__")
    page.locator("[data-px-block]").first.click()
    wait_idle(page)
    expect(page.locator(".px-title-main")).to_have_text(HOSTILE[0])  # shown as the text it is
    _no_foreign_links(page, origin)
    shot(page, "hostile-explorer", full=True)

    # URL parameters that the page refuses, each echoed in an error
    for q in ({"lesson": HOSTILE[0]}, {"step": "²", "bs": "①"}, {"algo": HOSTILE[2]}):
        page.goto(f"{origin}/?{urllib.parse.urlencode(q)}")
        expect(page.locator('[data-testid="stAlert"]').first).to_be_visible(timeout=90_000)
        wait_idle(page)
        _no_foreign_links(page, origin)

    page.goto(f"{origin}/hash")
    expect(page.locator("[data-px-hash-table]")).to_be_visible(timeout=90_000)
    page.get_by_text("Extra keys: LoRA, cache_salt, images").click()
    for label, value in (("LoRA name", HOSTILE[0][:64]), ("cache_salt", HOSTILE[2][:64])):
        box = page.get_by_label(label, exact=True)
        box.fill(value)
        box.press("Enter")
        wait_idle(page)
    box = page.get_by_label("Images as ID:OFFSET:LENGTH, comma separated")
    box.fill(f"{HOSTILE[0][:30]}:²:5")
    box.press("Enter")
    expect(page.locator('[data-testid="stAlert"]').first).to_contain_text("ASCII digits", timeout=90_000)
    wait_idle(page)
    _no_foreign_links(page, origin)

    page.goto(f"{origin}/live")
    area = page.locator(".st-key-live_endpoints textarea")
    area.fill(f"ipc://a![p](http://{EVIL}/x.png)")
    page.locator(".st-key-live_topic input").fill(HOSTILE[2][:80])
    page.locator(".st-key-live_connect button").click()
    expect(page.get_by_text(f"ipc://a![p](http://{EVIL}/x.png)").first).to_be_visible(timeout=90_000)
    page.wait_for_timeout(2_500)  # the live view redraws every second
    _no_foreign_links(page, origin)
    page.locator(".st-key-live_stop button").click()
    wait_idle(page)
    area.fill(f"tcp://{EVIL}:5557")
    page.locator(".st-key-live_connect button").click()
    expect(page.locator('[data-testid="stAlert"]').first).to_contain_text("not loopback", timeout=90_000)
    _no_foreign_links(page, origin)

    page.goto(f"{origin}/lessons?lesson={urllib.parse.quote(HOSTILE[0])}")
    expect(page.get_by_text("Open this lesson in the explorer")).to_be_visible(timeout=90_000)
    wait_idle(page)

    assert not dialogs, dialogs
    assert urls, "nothing was recorded"
    assert not _foreign(urls, origin), _foreign(urls, origin)
    # the recorder sees a request elsewhere: one made on purpose
    page.evaluate(
        f"() => {{ const i = new Image(); i.src = 'http://{EVIL}/probe.png'; document.body.appendChild(i); }}"
    )
    page.wait_for_timeout(1_000)
    assert _foreign(urls, origin) == [f"http://{EVIL}/probe.png"], _foreign(urls, origin)
    urls.clear()
    with urllib.request.urlopen(f"{origin}/_stcore/health", timeout=10) as r:
        assert r.status == 200


def test_another_session_is_not_touched_by_a_hostile_one(px_tabs, px_app_url):
    with open_tab(px_tabs, 1400, 900) as page:
        page.goto(f"{px_app_url}/")
        expect(page.locator(".px-now .px-headline")).to_contain_text("Step 0 of 20", timeout=90_000)
        wait_idle(page)
        assert page.locator('[data-testid="stAlert"]').count() == 0
        assert page.locator(".px-title-main").inner_text() == "Two chat turns"
