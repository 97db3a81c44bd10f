"""One `streamlit run app.py` on loopback for the whole test session, and Debian's chromium.

Playwright's sync API drives the system browser (no browser download). Screenshots go to
test-output/ (gitignored).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario
from explorer.scenario.trace import Step

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHOTS = REPO / "test-output" / "e2e"
IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'


# The stage writes the step and the open block into the address when the page is next idle
# (explorer/ui/static/stage.js, writeUrlSoon): a test that reads the address waits for it.
_URL_SETTLED_JS = """() => {
  const kept = window.__pxStageKept;
  if (!kept) return false;
  const q = new URL(window.location.href).searchParams;
  const block = kept.block === null ? null : String(kept.block);
  return q.get('step') === String(kept.k) && q.get('block') === block;
}"""


def settled_url(page) -> str:
    """The page's address once it holds the step and block the stage shows."""
    page.wait_for_function(_URL_SETTLED_JS, timeout=30_000, polling="raf")
    return page.evaluate("() => window.location.href")


# The layout has settled: the web fonts are in and two frames have passed, so a resize's layout
# and the stage's refit (its resize observer fires before the next paint) are done.
_LAYOUT_SETTLED_JS = (
    "() => document.fonts.ready.then(() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r))))"
)


def settle_layout(page) -> None:
    page.evaluate(_LAYOUT_SETTLED_JS)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def streamlit_command(port: int) -> list[str]:
    """`streamlit run app.py` as the tests and scripts/bench_ui.py start it (on loopback)."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        "app.py",
        "--server.headless",
        "true",
        "--server.fileWatcherType",
        "none",
        "--browser.gatherUsageStats",
        "false",
        "--server.address",
        "127.0.0.1",
        "--server.port",
        str(port),
    ]


def wait_healthy(url: str, proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    """Until the server at ``url`` answers its health check (RuntimeError if ``proc`` exits or
    ``timeout`` seconds pass first)."""
    deadline = time.time() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if proc.poll() is not None or time.time() > deadline:
            raise RuntimeError(f"streamlit did not come up (see {log})")
        time.sleep(0.5)


def stop(proc: subprocess.Popen, grace: float) -> None:
    """Stop a server the test started: SIGTERM, then SIGKILL after ``grace`` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()


@contextlib.contextmanager
def serve_app(log_name: str = "e2e-streamlit.log") -> Iterator[str]:
    """The app under `streamlit run` on a free loopback port, until the block ends; yields its URL."""
    with serve_app_process(log_name) as (url, _):
        yield url


def server_log(log_name: str = "e2e-streamlit.log") -> Path:
    """Where `serve_app_process(log_name)` writes its server's output (one log per parallel worker)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return REPO / "test-output" / (log_name.replace(".log", f"-{worker}.log") if worker else log_name)


@contextlib.contextmanager
def serve_app_process(log_name: str) -> Iterator[tuple[str, subprocess.Popen]]:
    """As `serve_app`, and the server's process too (for its pid: its resident size)."""
    port = _free_port()
    log_name = server_log(log_name).name
    log = REPO / "test-output"
    log.mkdir(exist_ok=True)
    out = open(log / log_name, "wb")  # noqa: SIM115 (lives as long as the child process)
    proc = subprocess.Popen(
        streamlit_command(port),
        cwd=REPO,
        env={**os.environ, "PYTHONMALLOC": "malloc"},  # as `make run` starts it (explorer/ui/budget.py)
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, log / log_name)
        yield url, proc
    finally:
        stop(proc, 15)
        out.close()


@pytest.fixture(scope="session")
def px_app_url():
    """The app under `streamlit run`, started once per test session."""
    with serve_app() as url:
        yield url


@pytest.fixture(scope="session")
def px_playwright():
    from playwright import sync_api

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (scripts/setup_test_env.sh does)")
    with sync_api.sync_playwright() as p:
        yield p


@pytest.fixture(scope="session")
def px_browser(px_playwright):
    """Chromium for the tests that need browser contexts isolated from each other (several
    sessions stepping at once, each in front in its own window; a page whose every request is
    routed; a download). Its contexts are incognito: every page load in them compiles Streamlit's scripts anew."""
    b = px_playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    try:
        yield b
    finally:
        b.close()


@pytest.fixture(scope="session")
def px_tabs(px_playwright, tmp_path_factory):
    """One browser profile on disk for the test session, whose tabs the page tests open
    (`open_tab`). Each tab is its own Streamlit session, as a tab is for a user; what the
    profile keeps between tabs is the HTTP cache and V8's code cache, so a page load after the
    first does not parse and compile Streamlit's scripts again (about a third less browser CPU
    per load, measured on this suite's machine). Only the newest tab is in front: one behind it
    gets no animation frames and slower timers, so a test that steps several sessions at once
    gives each its own context of `px_browser`."""
    ctx = px_playwright.chromium.launch_persistent_context(
        str(tmp_path_factory.mktemp("chromium-profile")),
        executable_path=CHROMIUM,
        args=CHROMIUM_ARGS,
        viewport={"width": 1500, "height": 1000},
    )
    ctx.set_default_timeout(90_000)
    try:
        yield ctx
    finally:
        ctx.close()


def new_tab(tabs, width: int = 1500, height: int = 1000, timeout_ms: float = 90_000):
    """A new tab of the session's browser profile at ``width`` x ``height``; the caller closes it
    (which ends its Streamlit session)."""
    page = tabs.new_page()
    page.set_viewport_size({"width": width, "height": height})
    page.set_default_timeout(timeout_ms)
    return page


@contextlib.contextmanager
def open_tab(tabs, width: int = 1500, height: int = 1000, timeout_ms: float = 90_000) -> Iterator:
    """`new_tab`, closed when the block ends."""
    page = new_tab(tabs, width, height, timeout_ms)
    try:
        yield page
    finally:
        page.close()


@pytest.fixture
def px_page(px_tabs):
    with open_tab(px_tabs) as page:
        yield page


def wait_idle(page) -> None:
    page.locator(IDLE).wait_for(timeout=90_000)
    # widgets whose frontend code is still loading show as skeletons for a moment
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stSkeleton\"]')", timeout=90_000)


def step_through_lesson(page, app_url: str, stem: str) -> Iterator[tuple[int, Step]]:
    """Open lesson ``stem`` in the explorer and press Next to its end: (k, step k's record)
    once step k is drawn and idle. The page is left at the last step."""
    from playwright.sync_api import expect

    trace = replay(load_scenario(REPO / "lessons" / f"{stem}.toml"))
    n = len(trace.steps)
    page.goto(f"{app_url}/?lesson={stem}")
    expect(page.locator(".px-now .px-headline")).to_contain_text(f"Step 0 of {n}", timeout=90_000)
    wait_idle(page)
    for k, step in enumerate(trace.steps, start=1):
        page.locator(".px-b-next").first.click()
        expect(page.locator(".px-now .px-headline")).to_contain_text(f"Step {k} of {n}", timeout=90_000)
        wait_idle(page)
        yield k, step


def shot(page, name: str, full: bool = False) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    wait_idle(page)
    page.screenshot(path=str(path), full_page=full, timeout=120_000)
    return path
