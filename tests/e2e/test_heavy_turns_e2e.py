"""Heavy actions take turns across browser sessions, in a real browser against `streamlit run`:
a whole-trace replay runs in one tab; a second tab's replay waits ("Waiting for 1 other"), a
third's waits behind both and closes, a Router run waits behind the two left, and each waiter
gets its own result once the turns before it end (the first cancelled, the second finished)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import new_tab, wait_idle

pytestmark = pytest.mark.e2e

LONG = 240_000  # guards for a loaded 2-core machine, not speed limits


def _tab(tabs, url: str):
    page = new_tab(tabs, 1400, 1000, LONG)
    page.goto(url)
    return page


def _fill(page, label: str, value: str, role: str = "textbox") -> None:
    field = page.get_by_role(role, name=label)  # type: ignore[arg-type]
    field.fill(value)
    field.press("Enter")
    wait_idle(page)


def _replay(tabs, url: str, limit: int, sizes: str):
    page = _tab(tabs, f"{url}/replay")
    page.get_by_role("button", name="Run replay").wait_for()
    wait_idle(page)
    _fill(page, "Requests to replay (0 = all)", str(limit), "spinbutton")
    _fill(page, "Cache sizes (blocks)", sizes)
    page.get_by_role("button", name="Run replay").click()
    expect(page.get_by_role("button", name="Cancel")).to_be_visible(timeout=LONG)
    return page


def _waiting(n: int, what: str) -> str:
    return f"Waiting for {n} other{'s' if n != 1 else ''} to finish: one heavy action (here a {what})"


def test_replays_and_a_router_run_take_turns_across_tabs(px_tabs, px_app_url):
    tabs = []
    try:
        first = _replay(px_tabs, px_app_url, 0, "1000")  # the whole shipped trace: minutes
        tabs.append(first)
        expect(first.get_by_text("Waiting for", exact=False)).to_have_count(0, timeout=LONG)
        second = _replay(px_tabs, px_app_url, 20, "1000")
        tabs.append(second)
        expect(second.get_by_text(_waiting(1, "trace replay"))).to_be_visible(timeout=LONG)
        third = _replay(px_tabs, px_app_url, 20, "2000")
        expect(third.get_by_text(_waiting(2, "trace replay"))).to_be_visible(timeout=LONG)
        third.close()  # a waiter's tab closes: it leaves the queue
        router = _tab(px_tabs, f"{px_app_url}/router")
        tabs.append(router)
        # the replay running and the one waiting go first, not the closed tab's
        expect(router.get_by_text(_waiting(2, "fleet run"))).to_be_visible(timeout=LONG)
        expect(second.get_by_text(_waiting(1, "trace replay"))).to_be_visible(timeout=LONG)

        first.get_by_role("button", name="Cancel").click()  # the first gives its turn back
        expect(first.get_by_text("Replay cancelled.")).to_be_visible(timeout=LONG)
        # the second replay runs to its own result; meanwhile the router run waits for it alone
        expect(second.get_by_text("20 requests,", exact=False)).to_be_visible(timeout=LONG)
        expect(second.get_by_text("Waiting for", exact=False)).to_have_count(0, timeout=LONG)
        # the second finished by itself: the router run follows
        router.locator(".st-key-router_available").wait_for()
        expect(router.get_by_text("Waiting for", exact=False)).to_have_count(0, timeout=LONG)
    finally:
        for page in tabs:
            page.close()
