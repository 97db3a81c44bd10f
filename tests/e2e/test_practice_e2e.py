"""Practice in a real browser: answer two questions (one right, one wrong) and watch the score.

The page runs under `streamlit run app.py` on loopback; Playwright drives Debian's chromium.
The test computes each question's answer itself, from the seed the page shows.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from explorer import practice as P

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = REPO / "test-output"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def practice_server():
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.address", "127.0.0.1",
         "--server.port", str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false",
         "--server.fileWatcherType", "none"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            time.sleep(0.5)
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def browser_page():
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1800})
        try:
            yield page
        finally:
            browser.close()


def _score(page) -> str:
    metric = page.get_by_test_id("stMetric").filter(has_text="Score this session")
    return metric.get_by_test_id("stMetricValue").inner_text().strip()


def _seed(page) -> int:
    return int(page.get_by_role("spinbutton", name="Seed").input_value())


def _answer(page, text: str) -> None:
    box = page.get_by_label("Your answer")
    box.fill(text)
    box.press("Enter")  # commit the text input before the button click
    page.wait_for_timeout(500)
    page.get_by_role("button", name="Check my answer").click()


def test_answer_two_questions_right_then_wrong(practice_server, browser_page):
    page = browser_page
    ARTIFACTS.mkdir(exist_ok=True)
    page.goto(f"{practice_server}/practice?seed=11&kind=hit_length")
    page.get_by_text("Score this session").wait_for(timeout=90_000)
    assert _score(page) == "0 / 0"

    q1 = P.generate(_seed(page), "hit_length")
    page.get_by_text(q1.title).first.wait_for()
    _answer(page, str(q1.answer))
    page.get_by_text(re.compile(r"^Right")).wait_for(timeout=30_000)
    page.get_by_text("Why", exact=True).wait_for()
    assert _score(page) == "1 / 1"
    page.screenshot(path=str(ARTIFACTS / "practice-right.png"), full_page=True)

    page.get_by_role("button", name="New question").click()
    page.wait_for_function(
        "() => !document.body.innerText.includes('Right: ')", timeout=30_000)
    q2 = P.generate(_seed(page), "hit_length")
    _answer(page, str(q2.answer + 1))
    page.get_by_text(re.compile(r"^Not quite")).wait_for(timeout=30_000)
    assert P.format_answer("int", q2.answer) in page.get_by_text(re.compile(r"^Not quite")).inner_text()
    assert _score(page) == "1 / 2"
    page.screenshot(path=str(ARTIFACTS / "practice-wrong.png"), full_page=True)
