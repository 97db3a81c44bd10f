"""A 200,000-character image id through the real server: a shared link and an upload.

A scenario whose image id is 200,000 characters packs into a link of a few hundred characters
(the id compresses to almost nothing). Before labels counted in the session budget, opening
that link took the server from 171 MB to 1.7 GB and an upload of it to 2 GB. Here both go
through `streamlit run` and chromium, against a server of this module's own so that its
resident size (VmRSS of /proc/PID/status) is these sessions' alone: each is refused with one
message naming the file and the id, no traceback, the server's resident size stays within
one session's budget (design section 13: 384 MiB) above idle, and another session still opens
the default lesson and steps. The sizes and the time of a Next after the refusal are printed.
"""

from __future__ import annotations

import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import expect

from explorer.ui.budget import SESSION_BUDGET
from explorer.ui.state import ViewState, to_query
from tests.e2e.conftest import open_tab, serve_app_process, wait_idle

pytestmark = pytest.mark.e2e

NAME = "big.toml"
LONG_ID = "c" * 200_000
# A request whose image covers all of its 80 blocks, then the same tokens without it: within
# every scenario cap but the length of one image id (16,000,000 extra-key characters over the
# blocks: the cap is 16,777,216), and the file within the web app's upload cap of 256 KiB.
SCENARIO = f"""title = "One long image id"
[engine]
block_size = 16
num_blocks = 256
[[steps]]
op = "arrive"
id = "image"
prompt = "0:1280"
mm = [{{ id = "{LONG_ID}", offset = 0, length = 1280 }}]
[[steps]]
op = "admit"
id = "image"
[[steps]]
op = "finish"
id = "image"
[[steps]]
op = "arrive"
id = "plain"
prompt = "0:1280"
[[steps]]
op = "admit"
id = "plain"
"""
REFUSAL = "image id #1: 200,000 characters"
DEFAULT_TITLE, DEFAULT_STEPS = "Two chat turns", 20
HEADLINE = ".px-now .px-headline"
MIB = 1 << 20


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


class PeakRss:
    """The highest resident size of process ``pid`` while the block runs (read every 50 ms)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak = pid, 0.0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while True:
            self.peak = max(self.peak, rss_mib(self.pid))
            if self._done.wait(0.05):
                return

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mib(self.pid))


@pytest.fixture(scope="module")
def server(px_tabs) -> Iterator[tuple[str, int, float]]:
    """(URL, pid, idle MiB) of a server of this module's own; idle is read after one ordinary
    session opened the default lesson and left (so the pages' imports are loaded)."""
    with serve_app_process("e2e-streamlit-long-label.log") as (url, proc):
        with open_tab(px_tabs) as page:
            page.goto(f"{url}/")
            expect(page.locator(HEADLINE)).to_contain_text(f"Step 0 of {DEFAULT_STEPS}", timeout=90_000)
            wait_idle(page)
        time.sleep(3)  # the session's release and its first trim
        yield url, proc.pid, rss_mib(proc.pid)


def _one_refusal(page) -> str:
    """The page's one message, once it is idle (without the word joiners drawn after its
    colons); no exception element, no traceback."""
    alerts = page.locator('[data-testid="stAlert"]')
    expect(alerts.first).to_be_visible(timeout=90_000)
    wait_idle(page)
    assert page.locator('[data-testid="stException"]').count() == 0
    assert "Traceback" not in page.locator("body").inner_text()
    texts = alerts.all_inner_texts()
    assert len(texts) == 1, texts
    return texts[0].replace("\u2060", "")


def _timed_next(page, to: int) -> float:
    """Seconds from a press of Next to step ``to`` of the default lesson drawn and idle."""
    t0 = time.perf_counter()
    page.locator(".px-b-next").first.click()
    expect(page.locator(HEADLINE)).to_contain_text(f"Step {to} of {DEFAULT_STEPS}", timeout=90_000)
    wait_idle(page)
    return time.perf_counter() - t0


def _on_default_lesson(page) -> None:
    expect(page.locator(HEADLINE)).to_contain_text(f"Step 0 of {DEFAULT_STEPS}", timeout=90_000)
    assert page.locator(".px-title-main").inner_text() == DEFAULT_TITLE


def _still_serving(px_tabs, url: str) -> None:
    """Another session opens the default lesson, with no message, and steps through three steps."""
    with urllib.request.urlopen(f"{url}/_stcore/health", timeout=10) as r:
        assert r.status == 200
    with open_tab(px_tabs) as page:
        page.goto(f"{url}/")
        _on_default_lesson(page)
        wait_idle(page)
        assert page.locator('[data-testid="stAlert"]').count() == 0
        for k in (1, 2, 3):
            _timed_next(page, k)


def _report(what: str, pid: int, idle: float, peak: PeakRss, next_s: float) -> None:
    after = rss_mib(pid)
    print(
        f"\n{what}: server RSS idle {idle:.0f} MiB, peak {peak.peak:.0f} MiB (+{peak.peak - idle:.0f}), "
        f"after {after:.0f} MiB; Next after the refusal {next_s:.2f} s"
    )
    cap = SESSION_BUDGET / MIB
    assert peak.peak - idle <= cap, f"{what}: {peak.peak:.0f} MiB, more than {cap:.0f} MiB above idle ({idle:.0f})"


def test_a_shared_link_with_a_200000_character_image_id_is_one_message(px_tabs, server):
    url, pid, idle = server
    # the link "Share this view" gives for this upload
    q, warnings = to_query(ViewState(lesson=None, upload=(NAME, SCENARIO.encode())))
    assert not warnings and "up" in q, warnings
    link = f"{url}/?{urllib.parse.urlencode(q)}"
    print(f"\nthe link: {len(link) - len(url)} characters after the origin (up= {len(q['up'])})")
    with open_tab(px_tabs) as page:
        with PeakRss(pid) as peak:
            page.goto(link)
            msg = _one_refusal(page)
            assert NAME in msg and REFUSAL in msg, msg
            _on_default_lesson(page)  # the session fell back to the default lesson
            next_s = _timed_next(page, 1)
            _still_serving(px_tabs, url)
    _report("shared link", pid, idle, peak, next_s)


def test_an_upload_with_a_200000_character_image_id_is_one_message(px_tabs, server):
    url, pid, idle = server
    with open_tab(px_tabs) as page:
        with PeakRss(pid) as peak:
            page.goto(f"{url}/")
            _on_default_lesson(page)
            wait_idle(page)
            files = page.locator(".st-key-px_x_files details").first
            if files.get_attribute("open") is None:
                files.locator("summary").click()
            page.locator('.st-key-px_w_upload input[type="file"]').set_input_files(
                files=[{"name": NAME, "mimeType": "application/toml", "buffer": SCENARIO.encode()}]
            )
            msg = _one_refusal(page)
            assert NAME in msg and REFUSAL in msg, msg
            _on_default_lesson(page)  # the upload was not taken
            next_s = _timed_next(page, 1)
            _still_serving(px_tabs, url)
    _report("upload", pid, idle, peak, next_s)
