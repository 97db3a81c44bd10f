"""A class server: `make class`'s script binds the address it is given, and the page gives the room
the address the browser used, as text and as a QR code that a reader decodes to that address.

Loopback only: the class is served on 127.0.0.2 (another loopback address than the tests' usual
127.0.0.1), so a link or code that carried the bind default or 127.0.0.1 would fail here.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import REPO, SHOTS, open_tab, stop, wait_healthy, wait_idle

pytestmark = pytest.mark.e2e
HOST = "127.0.0.2"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def class_url():
    port = _free_port()
    (REPO / "test-output").mkdir(exist_ok=True)
    log = open(REPO / "test-output" / "e2e-class.log", "wb")  # noqa: SIM115 (lives as long as the server)
    proc = subprocess.Popen(
        [sys.executable, "scripts/serve_class.py", "--host", HOST, "--port", str(port)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=log,
    )
    url = f"http://{HOST}:{port}"
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().decode()
        said = proc.stdout.readline().decode()
        assert url in first and f"Give students this address: {url}" in said
        wait_healthy(url, proc, REPO / "test-output" / "e2e-class.log")
        yield url
    finally:
        stop(proc, 20)
        log.close()


def _decode_qr(png) -> str:
    zbar = shutil.which("zbarimg")
    if zbar is None:
        pytest.fail("zbarimg is missing: apt-get install -y zbar-tools (scripts/setup_test_env.sh does)")
    out = subprocess.run([zbar, "--quiet", "--raw", str(png)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _qr_on_page(page, name: str) -> str:
    """What the page's class QR code reads as, from a screenshot of it (``name``.png)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    png = SHOTS / f"{name}.png"
    img = page.locator(".st-key-px_join_qr img").first
    # Shot only once the image is decoded and the page idle (a rerun fades stale elements).
    img.evaluate("el => el.decode()")
    wait_idle(page)
    img.screenshot(path=str(png), animations="disabled")
    return _decode_qr(png)


def test_the_class_address_and_its_qr_code_carry_the_address_the_browser_used(px_tabs, class_url):
    with open_tab(px_tabs) as page:
        page.goto(f"{class_url}/lessons?lesson=03_lookup_cap")
        wait_idle(page)
        page.get_by_text("Class address: a QR code for the room").first.click()
        box = page.locator(".px-join").first
        expect(box).to_be_visible()
        want = f"{class_url}/lessons?lesson=03_lookup_cap"
        assert box.get_attribute("data-px-join-url") == want
        expect(box.locator(".px-join-url")).to_have_text(want)
        assert _qr_on_page(page, "class-qr") == want  # what a phone's camera reads is the address to open
        # The Explorer's share link carries the same address, not the bind default.
        page.goto(f"{class_url}/?lesson=03_lookup_cap")
        wait_idle(page)
        page.get_by_text("Share this view").first.click()
        link = page.locator(".px-share-link").first
        expect(link).to_contain_text("lesson=03_lookup_cap")
        assert link.inner_text().strip().startswith(f"{class_url}?") or link.inner_text().strip().startswith(
            f"{class_url}/?"
        )


def test_serve_class_refuses_a_bad_port():
    out = subprocess.run(
        [sys.executable, "scripts/serve_class.py", "--host", HOST, "--port", "70000"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "PORT must be 1-65535" in out.stderr


def test_presenter_mode_draws_the_class_address_as_a_qr_code(px_tabs, class_url):
    # The presenter screen is what the room sees: its QR code must open the served address.
    with open_tab(px_tabs, 1920, 1080) as page:
        page.goto(f"{class_url}/?lesson=03_lookup_cap&presenter=1")
        page.locator(".px-now").first.wait_for()
        wait_idle(page)
        page.get_by_text("Class address: a QR code for the room").first.click()
        box = page.locator(".px-join").first
        expect(box).to_be_visible()
        shown = box.get_attribute("data-px-join-url")
        assert shown is not None and shown.startswith(class_url), (shown, class_url)
        assert _qr_on_page(page, "class-qr-presenter") == shown
