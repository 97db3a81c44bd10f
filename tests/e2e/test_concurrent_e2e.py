"""Several browser sessions stepping the explorer at once, and a lesson picked while the browser
lags behind the server.

The stage steps in the browser (explorer/ui/static/stage.js), so sessions stepping at once never
wait on the server and never disturb each other: every session ends exactly on the step its
clicks asked for. The lesson picker still runs the page: a browser that lags behind the
server's answer to a pick (here its websocket holds back the server's messages) must not bring
the old lesson's settings back.
"""

from __future__ import annotations

import re
import time
import urllib.parse
import urllib.request

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import settled_url, wait_idle

pytestmark = pytest.mark.e2e

CONTEXTS = 6
ROUNDS = 3
BURST = 3  # clicks on Next per session per round, while its browser lags
START = {"lesson": "04_touch_then_allocate", "bs": "8", "nb": "12", "algo": "sha256_cbor", "step": "0"}
STEPS = 14


class Lag:
    """A page whose websocket can hold back what the server sends (the browser falls behind)."""

    def __init__(self, page) -> None:
        self.page = page
        self.holding = False
        self.held: list = []
        self.route = None
        page.route_web_socket(re.compile(r".*/_stcore/stream"), self._connect)

    def _connect(self, ws) -> None:
        server = ws.connect_to_server()
        self.route = ws
        ws.on_message(lambda m: server.send(m))
        server.on_message(self._from_server)

    def _from_server(self, message) -> None:
        if self.holding:
            self.held.append(message)
        elif self.route is not None:
            self.route.send(message)

    def hold(self) -> None:
        self.holding = True

    def release(self) -> None:
        self.holding = False
        for m in self.held:
            assert self.route is not None
            self.route.send(m)
        self.held.clear()


def _query(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in urllib.parse.parse_qs(urllib.parse.urlparse(url).query).items()}


def _settle(page) -> tuple[int, dict[str, str]]:
    """Wait until the page is idle and its headline stays put: (its step, its address)."""
    return _settle_all([page])[0]


def _settle_all(pages) -> list[tuple[int, dict[str, str]]]:
    """`_settle` for several pages at once: each idle, then every headline unchanged over four
    looks a quarter of a second apart (one wait for all of them, not one per page)."""
    for page in pages:
        wait_idle(page)
    last: list[str | None] = [None] * len(pages)
    same, deadline = 0, time.time() + 90
    while same < 4 and time.time() < deadline:
        pages[0].wait_for_timeout(250)
        texts = [page.locator(".px-now .px-headline").inner_text() for page in pages]
        same = same + 1 if texts == last else 0
        last = list(texts)
    assert all(text is not None for text in last)
    return [(int(str(text).split()[1]), _query(settled_url(page))) for text, page in zip(last, pages)]


def _next(page) -> None:
    page.locator(".px-b-next").first.click(no_wait_after=True)


def test_sessions_stepping_at_once_while_lagging_keep_their_view(px_browser, px_app_url):
    contexts = [px_browser.new_context(viewport={"width": 1300, "height": 900}) for _ in range(CONTEXTS)]
    try:
        pages = [c.new_page() for c in contexts]
        for c in contexts:
            c.set_default_timeout(90_000)
        for p in pages:
            p.goto(f"{px_app_url}/?{urllib.parse.urlencode(START)}")
        for p in pages:
            expect(p.locator(".px-now .px-headline")).to_contain_text(f"Step 0 of {STEPS}", timeout=90_000)
            wait_idle(p)
        steps = [0] * CONTEXTS
        for r in range(ROUNDS):
            for _ in range(BURST):
                for p in pages:
                    _next(p)
            for i, (step, q) in enumerate(_settle_all(pages)):
                for key in ("lesson", "bs", "nb", "algo"):
                    assert q.get(key) == START[key], (r, i, q)
                assert q.get("step") == str(step), (r, i, q, step)
                assert step == steps[i] + BURST, (r, i, steps[i], step)  # every click is one step
                steps[i] = step
        for p in pages:
            assert p.locator('[data-testid="stException"]').count() == 0
        with urllib.request.urlopen(f"{px_app_url}/_stcore/health", timeout=10) as resp:
            assert resp.status == 200
    finally:
        for c in contexts:
            c.close()


def test_a_new_lesson_is_not_undone_by_the_old_lessons_settings(px_page, px_app_url):
    """The lesson picker changes every engine setting; clicks sent before the browser shows the
    new settings carry the old lesson's, and must not bring them back."""
    page = px_page
    lag = Lag(page)
    page.goto(f"{px_app_url}/?{urllib.parse.urlencode(START)}")
    expect(page.locator(".px-now .px-headline")).to_contain_text(f"Step 0 of {STEPS}", timeout=90_000)
    wait_idle(page)
    _next(page)
    step, _ = _settle(page)
    assert step == 1
    page.locator('[class*="st-key-px_w_lesson__"]').click()
    lag.hold()  # the server's answer to the pick waits
    page.get_by_role("option", name="Two chat turns", exact=True).click()  # the picker shows titles
    page.wait_for_timeout(600)
    _next(page)
    page.wait_for_timeout(600)
    _next(page)
    page.wait_for_timeout(600)
    lag.release()
    step, q = _settle(page)
    assert q.get("lesson") == "00_two_chat_turns" and not {"bs", "nb", "algo"} & set(q), q
    assert step == 0 and q.get("step") == "0", (step, q)  # the new lesson opens before its step 1
    assert (
        "Step" in page.locator(".px-now .px-headline").inner_text()
        and "of 20" in page.locator(".px-now .px-headline").inner_text()
    )
