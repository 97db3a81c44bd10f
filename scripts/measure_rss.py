"""Measure: does the app's server give its memory back after heavy or hostile browser sessions end?

Not part of CI: on a loaded 2-core machine the result varies from run to run. Run from the repository root:

    .venv/bin/python scripts/measure_rss.py                  # 4 sessions at once, 2 rounds
    .venv/bin/python scripts/measure_rss.py --sessions 6 --rounds 3 --json

Starts ``streamlit run app.py`` on loopback and reads its resident set size (VmRSS of
/proc/PID/status). Idle: after one ordinary session has opened every page and left (so every
import is loaded). Then, per round, ``--sessions`` browser sessions at once each open a valid
shared link whose replay is as large as one session's budget allows (many steps over a full
pool), step through it, upload one, and open the hostile links of the test suite (a replay
over the budget, lone surrogates, markup), then close. Reported: the idle RSS, the peak seen
while the sessions ran, and the RSS once they had ended (Streamlit drops a session's cached
replays when its browser disconnects, and the app hands the memory back then and again up to
30 s later, for a script run still finishing); it passes when, within ``--settle`` seconds
after every round, the RSS is back within 20 % of idle. The seconds it took are reported.
The server runs with ``PYTHONMALLOC=malloc`` as ``make run`` starts it; ``--pymalloc`` measures
Python's own allocator, which keeps a partly used arena's pages (explorer.ui.budget.release_cache).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from explorer.ui.timings import TRIM_ENV, trim_after_s  # noqa: E402 (after the path it is found on)

CHROMIUM = "/usr/bin/chromium"  # Debian's
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
PAGES = ["", "lessons", "practice", "hash", "live", "replay", "router"]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def heavy_scenario(rounds: int = 40, blocks: int = 8_000, tokens: int = 10_000) -> str:
    """Valid, and about as big as one session may replay: a full pool, hashed, every step."""
    lines = ["title = 'A full pool, every step'", "[engine]", "block_size = 16", f"num_blocks = {blocks}"]
    for i in range(rounds):
        lines += ["[[steps]]", "op = 'arrive'", f"id = 'R{i}'", f"prompt = '{i * 100_000}:{i * 100_000 + tokens}'"]
        lines += ["[[steps]]", "op = 'admit'", f"id = 'R{i}'", "[[steps]]", "op = 'finish'", f"id = 'R{i}'"]
    return "\n".join(lines) + "\n"


def links(origin: str, heavy: str | None = None) -> list[str]:
    from explorer.ui.budget import estimate_replay_bytes
    from explorer.ui.state import encode_blob, parse_base
    from tests.ui.test_budget import _toml
    from tests.ui.test_hostile_pages import UPLOAD_NAME, hostile_scenario

    heavy = heavy or heavy_scenario()
    est = estimate_replay_bytes(parse_base("heavy.toml", heavy.encode()))
    print(f"heavy link: {est / 2**20:.0f} MiB estimated", file=sys.stderr)
    over = [{"op": "arrive", "id": f"W{i}", "prompt": f"{i * 5_000}:{i * 5_000 + 2_000}"} for i in range(200)]
    q = [
        {"up": encode_blob({"name": "heavy.toml", "toml": heavy}), "step": "40"},
        {"up": encode_blob({"name": "over.toml", "toml": _toml({"block_size": 1}, over)})},
        {"up": encode_blob({"name": UPLOAD_NAME, "toml": hostile_scenario().decode()}), "step": "5"},
        {"ed": encode_blob([{"op": "arrive", "id": "Z", "prompt": "0*300000000"}])},
        {"step": "²", "bs": "①", "lesson": "![p](http://evil.test/x.png)"},
    ]
    return [f"{origin}/?{urllib.parse.urlencode(x)}" for x in q]


IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'


def sessions(contexts: list, urls: list[str], steps: int, errors: list[str]) -> None:
    """A browser session per context at once, each opening every link (in its own order) and stepping."""
    pages = []
    try:
        for c in contexts:
            page = c.new_page()
            page.set_viewport_size({"width": 1300, "height": 900})
            page.set_default_timeout(120_000)
            pages.append(page)
        for k in range(len(urls)):
            for i, page in enumerate(pages):
                page.goto(urls[(k + i) % len(urls)], wait_until="commit")
            for _ in range(steps + 1):
                for page in pages:
                    try:
                        page.locator(IDLE).wait_for()
                        page.wait_for_timeout(200)
                        nxt = page.locator(".px-b-next")
                        if nxt.count() and nxt.first.is_enabled():
                            nxt.first.click(no_wait_after=True)
                    except Exception as e:  # reported, not raised: the measurement goes on
                        errors.append(f"{type(e).__name__}: {str(e)[:200]}")
    finally:
        for page in pages:
            page.close()


def wait_return(pid: int, target: float, settle: float) -> tuple[float, float]:
    """Poll the RSS until it is at most ``target`` MiB or ``settle`` seconds passed: (RSS, seconds)."""
    start = time.monotonic()
    while True:
        now = rss_mib(pid)
        waited = time.monotonic() - start
        if now <= target or waited >= settle:
            return now, waited
        time.sleep(0.5)


def measure(
    sessions_at_once: int = 4,
    rounds: int = 2,
    steps: int = 6,
    settle: float = 60.0,
    pymalloc: bool = False,
    trim_after: str | None = None,
):
    """Run the server, the warm-up and the rounds; the figures as a dict (see the module docstring)."""
    from playwright.sync_api import sync_playwright

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true"]
    cmd += ["--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false"]
    cmd += ["--server.address", "127.0.0.1", "--server.port", str(port)]
    env = dict(os.environ)
    env.pop("PYTHONMALLOC", None)
    if not pymalloc:
        env["PYTHONMALLOC"] = "malloc"  # as `make run` starts it (explorer.ui.budget.release_cache says why)
    env.pop(TRIM_ENV, None)
    if trim_after:
        env[TRIM_ENV] = trim_after
    # idle is read once the warm session's own late trims have run (the server's last, and a margin)
    idle_wait = max(trim_after_s(env)) + 5.0
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    origin = f"http://127.0.0.1:{port}"
    peak = 0.0
    stop = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, rss_mib(proc.pid))
            time.sleep(0.2)

    try:
        for _ in range(240):
            try:
                with urllib.request.urlopen(f"{origin}/_stcore/health", timeout=2):
                    break
            except OSError:
                time.sleep(0.5)
        errors: list[str] = []
        with sync_playwright() as p:
            # warm: every page and code path once, with small data, so every import is loaded; in
            # a browser profile on disk, whose code cache spares the browser a recompile per page
            small = heavy_scenario(rounds=2, blocks=2_000, tokens=4_000)
            with tempfile.TemporaryDirectory() as profile:
                warm = p.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, args=ARGS)
                try:
                    sessions([warm], [f"{origin}/{page}" for page in PAGES] + links(origin, small), 2, errors)
                finally:
                    warm.close()
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            try:
                time.sleep(idle_wait)
                idle = rss_mib(proc.pid)
                watcher = threading.Thread(target=watch, daemon=True)
                watcher.start()
                hostile = links(origin)
                after_rounds, waits = [], []
                for _ in range(rounds):
                    contexts = [browser.new_context() for _ in range(sessions_at_once)]  # isolated
                    try:
                        sessions(contexts, hostile, steps, errors)
                    finally:
                        for c in contexts:
                            c.close()
                    after, waited = wait_return(proc.pid, 1.2 * idle, settle)
                    after_rounds.append(after)
                    waits.append(waited)
            finally:
                browser.close()
        stop.set()
        with urllib.request.urlopen(f"{origin}/_stcore/health", timeout=10) as r:
            healthy = r.status == 200
        worst = max(after_rounds)
        return {
            "allocator": "pymalloc" if pymalloc else "malloc",
            "idle_mib": round(idle, 1),
            "peak_mib": round(peak, 1),
            "after_mib": [round(a, 1) for a in after_rounds],
            "seconds_to_return": [round(w, 1) for w in waits],
            "after_over_idle": round(worst / idle, 3),
            "healthy": healthy,
            "errors": errors,
            "ok": healthy and worst <= 1.2 * idle,
        }
    finally:
        stop.set()
        proc.terminate()
        proc.wait(timeout=20)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6, help="Next clicks per link")
    ap.add_argument("--settle", type=float, default=60.0, help="seconds the RSS may take to return")
    ap.add_argument("--pymalloc", action="store_true", help="run the server on Python's own allocator")
    ap.add_argument(
        "--trim-after",
        help="seconds after a session's end at which the server hands its memory back again, "
        "comma-separated (the server's EXPLORER_TRIM_AFTER_S; default 2,10,30)",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = measure(args.sessions, args.rounds, args.steps, args.settle, args.pymalloc, args.trim_after)
    if args.json:
        print(json.dumps(out))
    else:
        print(
            f"idle {out['idle_mib']} MiB, peak {out['peak_mib']} MiB, after {out['after_mib']} MiB "
            f"in {out['seconds_to_return']} s ({out['after_over_idle']:.0%} of idle): "
            f"{'ok' if out['ok'] else 'NOT ok'}"
        )
        for e in out["errors"]:
            print("  session error:", e)
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
