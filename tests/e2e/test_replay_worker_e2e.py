"""Replay workers do not outlive their tab or their server: a real `streamlit run`, a real
browser starting a whole-trace replay, the worker found among the server's children. A worker
stopped with SIGSTOP stands for a hung one (it prints nothing); closing its tab must end it. Then
Ctrl-C of the server must leave no worker behind. Waits are guards, not speed tests."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from explorer.ui.timings import ABANDON_ENV
from tests.e2e.conftest import REPO, _free_port, new_tab, streamlit_command, wait_idle

pytestmark = pytest.mark.e2e

# The server ends a closed tab's job after this many seconds (30 by default): the same rule, sooner.
ABANDON_S = 5.0


def _workers_of(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid and b"explorer.traffic.worker" in cmd:
            out.append(int(d.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_for(cond, guard_s: float, what: str):
    end = time.monotonic() + guard_s
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(what)


def _start_replay(tabs, url: str):
    page = new_tab(tabs, 1400, 1000)
    page.goto(f"{url}/replay")
    page.get_by_role("button", name="Run replay").wait_for(timeout=90_000)
    wait_idle(page)
    field = page.get_by_role("spinbutton", name="Requests to replay (0 = all)")
    field.fill("0")
    field.press("Enter")
    wait_idle(page)
    page.get_by_role("button", name="Run replay").click()
    expect(page.get_by_role("button", name="Cancel")).to_be_visible(timeout=90_000)
    return page


def test_a_hung_worker_ends_with_its_tab_and_none_outlive_the_server(px_tabs):
    port = _free_port()
    log = open(REPO / "test-output" / "e2e-replay-worker.log", "wb")  # noqa: SIM115
    server = subprocess.Popen(
        streamlit_command(port),
        cwd=REPO,
        env={**os.environ, "PYTHONMALLOC": "malloc", ABANDON_ENV: str(ABANDON_S)},
        stdout=log,
        stderr=log,
    )
    url = f"http://127.0.0.1:{port}"
    seen: list[int] = []
    try:
        import urllib.request

        def up() -> bool:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False

        _wait_for(up, 120, "streamlit did not come up")
        tab = _start_replay(px_tabs, url)
        (worker,) = _wait_for(lambda: _workers_of(server.pid), 60, "no replay worker started")
        seen.append(worker)
        os.kill(worker, signal.SIGSTOP)  # hung: it prints nothing from now on
        tab.close()
        _wait_for(lambda: not _alive(worker), ABANDON_S + 60, "the hung worker outlived its closed tab")

        tab = _start_replay(px_tabs, url)
        (second,) = _wait_for(lambda: _workers_of(server.pid), 60, "no second replay worker started")
        seen.append(second)
        server.send_signal(signal.SIGINT)  # Ctrl-C
        server.wait(timeout=60)
        tab.close()
        _wait_for(lambda: not _alive(second), 30, "a replay worker outlived the server")
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        for pid in seen:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        log.close()
