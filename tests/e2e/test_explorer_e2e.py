"""The explorer in a real browser: step a lesson to the end against the replay JSON, type a
prompt in the playground, open a shared link, click a block, download the session, and check
that two browser sessions do not see each other's state."""

from __future__ import annotations

import pathlib
import re
import tomllib

import pytest
from playwright.sync_api import expect

from explorer.hashcalc import block_hash_table
from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario, parse_scenario_text
from tests.e2e.conftest import REPO, open_tab, settled_url, shot, wait_idle

pytestmark = pytest.mark.e2e

LESSON = REPO / "lessons" / "00_two_chat_turns.toml"
PANEL_ORDER = ["hashing", "lookup", "allocate", "caching", "free", "eviction"]


def _open(page, url: str, expect_text: str) -> None:
    page.goto(url)
    expect(page.locator(".px-now .px-headline")).to_contain_text(expect_text, timeout=90_000)
    wait_idle(page)


def _headline(page) -> str:
    return page.locator(".px-now .px-headline").inner_text()


STAGE_BUTTONS = {
    "px_b_first": ".px-b-first",
    "px_b_back": ".px-b-back",
    "px_b_next": ".px-b-next",
    "px_b_last": ".px-b-last",
}


def _click(page, key: str, then_text: str, where: str = ".px-now .px-headline") -> None:
    """A click on the stage's button (explorer/ui/static/stage.js) or a Streamlit button, by key."""
    page.locator(STAGE_BUTTONS.get(key, f".st-key-{key} button")).first.click()
    expect(page.locator(where)).to_contain_text(then_text, timeout=90_000)
    wait_idle(page)


def _sidebar_section(page, key: str) -> None:
    """Open a sidebar expander by its key (px_x_engine, px_x_playground, px_x_files)."""
    details = page.locator(f".st-key-{key} details").first
    if details.get_attribute("open") is None:
        details.locator("summary").click()
    expect(details).to_have_attribute("open", "")


def test_step_a_lesson_to_the_end_against_the_replay_json(px_page, px_app_url):
    page = px_page
    js = replay(load_scenario(LESSON)).to_json()
    sc = load_scenario(LESSON)
    steps = js["steps"]
    _open(page, f"{px_app_url}/?lesson=00_two_chat_turns", "Step 0 of 20")
    shot(page, "explorer-step-00")
    for k, s in enumerate(steps, start=1):
        who = f"{s['op']} {s['id']}"
        _click(page, "px_b_next", f"Step {k} of {len(steps)}: {who}")
        now = page.locator(".px-now").inner_text()
        kinds = [e["type"] for e in s["events"]]
        for kind in set(kinds):
            assert f"{kinds.count(kind)} {kind}" in now
        panels = page.locator("[data-px-panel]").evaluate_all("els => els.map(e => e.dataset.pxPanel)")
        assert panels == sorted(panels, key=PANEL_ORDER.index)
        if s["op"] == "admit":
            assert panels[:2] == ["lookup", "allocate"]
            hit = s["hit_tokens"]
            lookup = page.locator(".st-key-px_panel_lookup").inner_text()
            assert f"{hit:,} tokens" in lookup
            if s["new_block_ids"]:
                alloc = page.locator(".st-key-px_panel_allocate").inner_text()
                assert f"get_new_blocks: {len(s['new_block_ids'])} popped from the head" in alloc
        if s["op"] == "finish":
            assert panels == ["free"]
        if "BlockRemoved" in kinds:
            ev = page.locator(".st-key-px_panel_eviction").inner_text()
            assert f"{kinds.count('BlockRemoved')} events this step" in ev
        if sc.ops[k - 1].note:
            expect(page.locator("[data-px-note]")).to_contain_text(sc.ops[k - 1].note[:40])
        if k in (1, 6, 17):
            shot(page, f"explorer-step-{k:02d}")
    final = js["final"]
    assert page.locator("[data-px-free]").get_attribute("data-px-free") == str(len(final["free_queue"]))
    assert page.locator("[data-px-map]").get_attribute("data-px-map") == str(len(final["cached"]))
    queries = page.locator('.px-metric[data-px-stat="queries"] .px-metric-value').first.inner_text().strip()
    assert queries == f"{final['stats']['queries']:,}"
    expect(page.locator(".px-b-next").first).to_be_disabled()
    assert re.search(r"[?&]step=20(&|$)", settled_url(page))


def test_type_a_prompt_in_the_playground(px_page, px_app_url):
    from explorer.tokens import encode_text, tokenizer_available

    page = px_page
    _open(page, f"{px_app_url}/?lesson=00_two_chat_turns&step=20", "Step 20 of 20")
    _sidebar_section(page, "px_x_playground")
    if tokenizer_available():
        text = "You are a helpful assistant. Please summarise the following document in three sentences."
        page.locator(".st-key-px_p_text textarea").fill(text)
        n = len(encode_text(text))
    else:
        page.locator(".st-key-px_p_kind").get_by_text("Token spec").click()
        page.locator(".st-key-px_p_spec input").fill("0:480, 8000:8040")
        n = 520
    # Streamlit sends a text widget's value when it loses focus: let that rerun finish before
    # the click, or on a loaded machine the click's rerun may still read the empty prompt.
    page.keyboard.press("Tab")
    wait_idle(page)
    page.get_by_test_id("stSidebar").get_by_role("button", name="Arrive").click()
    expect(page.locator(".px-now .px-headline")).to_contain_text("Step 21 of 21: arrive P1", timeout=90_000)
    wait_idle(page)
    assert f"arrives with {n:,} tokens" in page.locator(".px-now").inner_text()
    shot(page, "playground-arrive")
    _click(page, "px_b_admit", "Step 22 of 22: admit P1")
    assert "P1" in page.locator("[data-px-request]").last.inner_text()
    _click(page, "px_b_finish", "Step 23 of 23: finish P1")
    assert "step=23" in settled_url(page) and "ed=" in settled_url(page)


def test_a_shared_link_opens_the_same_step(px_tabs, px_page, px_app_url):
    page = px_page
    _open(page, f"{px_app_url}/?lesson=00_two_chat_turns&step=5", "Step 5 of 20")
    _sidebar_section(page, "px_x_engine")
    bs = page.locator('[class*="st-key-px_w_bs__"] input')
    bs.fill("32")
    bs.press("Enter")
    expect(page.locator(".px-title-sub")).to_contain_text("block size 32", timeout=90_000)
    wait_idle(page)
    _click(page, "px_b_next", "Step 6 of 20: admit B1")
    url = settled_url(page)
    assert "bs=32" in url and "step=6" in url
    headline, digest = _headline(page), page.locator(".st-key-px_panel_lookup").inner_text()
    with open_tab(px_tabs) as p2:  # a new tab: a new session, which has only the link
        _open(p2, url, "Step 6 of 20: admit B1")
        assert _headline(p2) == headline
        assert p2.locator(".st-key-px_panel_lookup").inner_text() == digest
        assert "(544 - 1) // 32 = 16" in digest
        shot(p2, "shared-link")


def test_autoplay_steps_to_the_end_and_stops(px_page, px_app_url):
    page = px_page
    _open(page, f"{px_app_url}/?lesson=00_two_chat_turns&step=17", "Step 17 of 20")
    page.locator("select.px-speed").select_option("4x")
    page.locator(".px-b-play").click()
    expect(page.locator(".px-b-play")).to_have_attribute("aria-pressed", "true")
    expect(page.locator(".px-now .px-headline")).to_contain_text("Step 20 of 20", timeout=90_000)
    expect(page.locator(".px-b-play")).to_have_attribute("aria-pressed", "false", timeout=30_000)
    assert "step=20" in settled_url(page)


def test_two_browser_sessions_do_not_share_state(px_browser, px_app_url):
    a_ctx = px_browser.new_context(viewport={"width": 1400, "height": 900})
    b_ctx = px_browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        a, b = a_ctx.new_page(), b_ctx.new_page()
        _open(a, f"{px_app_url}/", "Step 0 of 20")
        _open(b, f"{px_app_url}/", "Step 0 of 20")
        for i in range(1, 4):  # wait for each step: a click during a rerun can land on a stale button
            _click(a, "px_b_next", f"Step {i} of 20")
        expect(a.locator(".px-now .px-headline")).to_contain_text("Step 3 of 20")
        b.reload()
        expect(b.locator(".px-now .px-headline")).to_contain_text("Step 0 of 20", timeout=90_000)
        wait_idle(b)
        _click(b, "px_b_last", "Step 20 of 20")
        a.locator(".px-b-back").first.click()
        expect(a.locator(".px-now .px-headline")).to_contain_text("Step 2 of 20", timeout=90_000)
        wait_idle(a)
        assert "Step 20 of 20" in _headline(b)
    finally:
        a_ctx.close()
        b_ctx.close()


def test_clicking_a_block_shows_its_history(px_page, px_app_url):
    page = px_page
    _open(page, f"{px_app_url}/?lesson=00_two_chat_turns&step=13", "Step 13 of 20: admit B2")
    page.locator('.px-grid [data-px-block="1"]').click()
    expect(page.locator("[data-px-history]")).to_contain_text("taken by B2 as its block 0", timeout=90_000)
    wait_idle(page)
    assert "block=1" in settled_url(page)
    text = page.locator("[data-px-history]").inner_text()
    assert "taken by A1 as its block 0" in text and "got hash" in text
    page.locator(".px-history").scroll_into_view_if_needed()
    shot(page, "block-history")


def test_download_the_session_as_a_scenario(px_browser, px_app_url):
    # an incognito context of its own: in the shared on-disk profile the download event never
    # came once in eight runs (a full run with three workers), not understood yet
    ctx = px_browser.new_context(viewport={"width": 1500, "height": 1000}, accept_downloads=True)
    ctx.set_default_timeout(90_000)
    try:
        page = ctx.new_page()
        _open(page, f"{px_app_url}/?lesson=00_two_chat_turns&step=3", "Step 3 of 20")
        _sidebar_section(page, "px_x_files")
        with page.expect_download() as dl:
            page.get_by_test_id("stSidebar").get_by_text("Download the session as a scenario (TOML)").click()
        text = pathlib.Path(dl.value.path()).read_text(encoding="utf-8")
    finally:
        ctx.close()
    tomllib.loads(text)
    again = replay(parse_scenario_text(text, "session.toml"))
    assert again.to_json() == replay(load_scenario(LESSON)).to_json()


def test_presenter_mode_hides_the_sidebar(px_page, px_app_url):
    page = px_page
    _open(page, f"{px_app_url}/?lesson=00_two_chat_turns&step=6&presenter=1", "Step 6 of 20")
    expect(page.get_by_test_id("stSidebar")).to_be_hidden()
    size = page.locator(".px-now .px-headline").evaluate("e => parseFloat(getComputedStyle(e).fontSize)")
    assert size > 26
    shot(page, "presenter-step-06")
    page.locator(".px-b-full-page").first.click()
    expect(page.get_by_test_id("stSidebar")).to_be_visible(timeout=90_000)
    wait_idle(page)


def test_hash_calculator_page(px_page, px_app_url):
    page = px_page
    page.goto(f"{px_app_url}/hash")
    expect(page.locator("[data-px-hash-table]")).to_be_visible(timeout=90_000)
    wait_idle(page)
    want = block_hash_table(list(range(48)), 16, "sha256", None)
    table = page.locator("[data-px-hash-table]").inner_text()
    for b in want["blocks"]:
        assert b["hash"] in table and str(b["external"]) in table
    shot(page, "hash-calculator")


def test_the_step_slider_moves_the_view_and_follows_next(px_page, px_app_url):
    """The stage's slider (explorer/ui/static/stage.js): a click on its track, an arrow key while
    it has the focus (one step, not two); Next and First move its thumb."""
    page = px_page
    _open(page, f"{px_app_url}/?lesson=00_two_chat_turns&step=3", "Step 3 of 20")
    slider = page.locator("input.px-range")
    assert slider.input_value() == "3" and page.locator(".px-range-label").inner_text() == "Step 3 of 20"
    box = slider.bounding_box()
    assert box is not None
    page.mouse.click(box["x"] + box["width"] * 0.75, box["y"] + box["height"] / 2)
    expect(page.locator(".px-now .px-headline")).to_contain_text("Step 15 of 20", timeout=90_000)
    wait_idle(page)
    assert "step=15" in settled_url(page)
    page.keyboard.press("ArrowRight")  # the slider has the focus: one step, not two
    expect(page.locator(".px-now .px-headline")).to_contain_text("Step 16 of 20", timeout=90_000)
    wait_idle(page)
    assert slider.input_value() == "16"
    _click(page, "px_b_next", "Step 17 of 20")
    assert slider.input_value() == "17" and page.locator(".px-range-label").inner_text() == "Step 17 of 20"
    _click(page, "px_b_first", "Step 0 of 20")
    assert slider.input_value() == "0"


def test_stepping_sends_nothing_to_the_server(px_page, px_app_url):
    """Next, Back, the keyboard, a block click and the slider step in the browser: the
    websocket carries no message from the browser (no script run) while they do."""
    page = px_page
    sent: list[object] = []
    page.on("websocket", lambda ws: ws.on("framesent", lambda payload: sent.append(payload)))
    _open(page, f"{px_app_url}/?lesson=00_two_chat_turns&step=0", "Step 0 of 20")
    page.wait_for_timeout(500)
    before = len(sent)
    for k in range(1, 6):
        _click(page, "px_b_next", f"Step {k} of 20")
    page.keyboard.press("ArrowLeft")
    expect(page.locator(".px-now .px-headline")).to_contain_text("Step 4 of 20")
    page.locator('.px-grid [data-px-block="1"]').click()
    expect(page.locator("[data-px-history]")).to_contain_text("taken by A1 as its block 0")
    page.locator("input.px-range").fill("12")
    expect(page.locator(".px-now .px-headline")).to_contain_text("Step 12 of 20")
    assert "step=12" in settled_url(page) and "block=1" in settled_url(page)
    page.wait_for_timeout(500)
    assert len(sent) == before, sent[before:]
