"""The class figure: N browser sessions (28 by default) pressing Next at once, in a real browser.

Not part of CI (minutes of a loaded machine; reported, never asserted). Starts ``streamlit run
app.py`` on loopback as the tests do (``PYTHONMALLOC=malloc MALLOC_ARENA_MAX=2``, as ``make run``), reads the
server's resident size once one ordinary session has opened the explorer and left (idle), then
opens ``--sessions`` tabs, each on one of ``--lessons`` in turn (all opened at once), and,
``--rounds`` times, clicks Next in every tab at once. Cross-talk: after each round, a tab that
does not show its own lesson's title at its own step.
Each tab times its own Next in the page (from its click until the next step is drawn and the
page is idle, the browser tests' rule), so the tabs read one after another do not add up. Then
every tab closes and the resident size is read until it is back within 20 % of idle or
``--settle`` seconds pass. Prints Next median and p90, errors, cross-talk, peak and settled memory.

Run:  .venv/bin/python scripts/bench_class.py [--sessions 28] [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS, IDLE, _free_port, streamlit_command  # noqa: E402

IDLE_JS = (
    "!!document.querySelector('" + IDLE.replace("'", "\\'") + "')"
    " && !document.querySelector('[data-testid=\"stSkeleton\"]')"
)
# Armed in a tab: click Next, then note the time at which step ``k`` is drawn and idle.
ARM_JS = (
    "(k) => { window.__pxDone = undefined; const t0 = performance.now();"
    " const b = document.querySelector('.px-b-next'); b.click();"
    " const id = setInterval(() => { const h = document.querySelector('.px-now');"
    " if (h && h.dataset.pxNow === String(k) && " + IDLE_JS + ") {"
    " window.__pxDone = performance.now() - t0; clearInterval(id); } }, 10); }"
)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def _ready(page, k: int) -> None:
    page.wait_for_function(
        "(k) => { const h = document.querySelector('.px-now'); return !!h && h.dataset.pxNow === String(k) && "
        + IDLE_JS
        + "; }",
        arg=k,
        timeout=300_000,
    )


def _say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def _title(lesson: str) -> str:
    import tomllib

    return tomllib.loads((ROOT / "lessons" / f"{lesson}.toml").read_text(encoding="utf-8"))["title"]


def _cross_talk(pages: list, titles: list[str], k: int) -> int:
    """Tabs not showing their own lesson (tab i: ``titles[i]``) at step ``k``."""
    wrong = 0
    for pg, want in zip(pages, titles, strict=True):
        title = pg.locator(".px-title-main").first.inner_text().strip()
        now = pg.locator(".px-now").first.get_attribute("data-px-now")
        wrong += title != want or now != str(k)
    return wrong


def run(sessions: int, rounds: int, lessons: list[str], settle: float) -> dict:
    from playwright.sync_api import sync_playwright

    lesson = lessons[0]

    port = _free_port()
    log = open(ROOT / "test-output" / "bench-class-streamlit.log", "wb")  # noqa: SIM115
    server = subprocess.Popen(
        streamlit_command(port),
        cwd=ROOT,
        env={**os.environ, "PYTHONMALLOC": "malloc", "MALLOC_ARENA_MAX": "2"},
        stdout=log,
        stderr=log,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.time() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2):
                    break
            except OSError:
                if time.time() > end:
                    raise RuntimeError("streamlit did not come up") from None
                time.sleep(0.5)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            ctx = browser.new_context(viewport={"width": 1300, "height": 900})
            page = ctx.new_page()
            page.goto(f"{url}/?lesson={lesson}")
            _ready(page, 0)
            ctx.close()
            time.sleep(35)  # the ended session's memory is handed back up to 30 s later
            idle = rss_mib(server.pid)
            _say(f"idle {idle:.0f} MiB; opening {sessions} sessions")
            contexts = [browser.new_context(viewport={"width": 1300, "height": 900}) for _ in range(sessions)]
            pages = [c.new_page() for c in contexts]
            opened = [lessons[i % len(lessons)] for i in range(sessions)]
            titles = [_title(stem) for stem in opened]
            for pg, stem in zip(pages, opened, strict=True):
                pg.set_default_timeout(300_000)
                pg.goto(f"{url}/?lesson={stem}", wait_until="commit")
            for pg in pages:
                _ready(pg, 0)
            cross_talk = _cross_talk(pages, titles, 0)
            loaded = rss_mib(server.pid)
            _say(f"{sessions} sessions at step 0, {loaded:.0f} MiB")
            times: list[float] = []
            peak = loaded
            for k in range(1, rounds + 1):
                for pg in pages:
                    pg.evaluate(ARM_JS, k)
                for pg in pages:
                    pg.wait_for_function("() => window.__pxDone !== undefined", timeout=300_000, polling=100)
                    times.append(pg.evaluate("() => window.__pxDone") / 1000)
                    peak = max(peak, rss_mib(server.pid))
                cross_talk += _cross_talk(pages, titles, k)
                _say(f"round {k}: Next median so far {statistics.median(times):.2f} s")
            errors = sum(pg.locator('[data-testid="stException"]').count() for pg in pages)
            for c in contexts:
                c.close()
            browser.close()
        start, settled = time.time(), rss_mib(server.pid)
        while time.time() - start < settle:
            time.sleep(5)
            settled = rss_mib(server.pid)
            if settled <= 1.2 * idle:
                break
        times.sort()
        return {
            "sessions": sessions,
            "rounds": rounds,
            "next_median_s": round(statistics.median(times), 2),
            "next_p90_s": round(statistics.quantiles(times, n=10)[-1], 2) if len(times) > 1 else round(times[0], 2),
            "next_max_s": round(times[-1], 2),
            "errors": errors,
            "cross_talk": cross_talk,
            "lessons": len(lessons),
            "idle_mib": round(idle),
            "loaded_mib": round(loaded),
            "peak_mib": round(peak),
            "settled_mib": round(settled),
            "back_vs_idle": round(settled / idle, 2),
            "settled_after_s": round(time.time() - start),
            "load_avg": os.getloadavg()[0],
        }
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--sessions", type=int, default=28)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--lessons",
        default="00_two_chat_turns,01_hash_chain,04_touch_then_allocate,06_free_order_lru,14_engine_step",
        help="the tabs open these lessons in turn (comma separated)",
    )
    ap.add_argument("--settle", type=float, default=90.0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    (ROOT / "test-output").mkdir(exist_ok=True)
    res = run(a.sessions, a.rounds, [s.strip() for s in a.lessons.split(",") if s.strip()], a.settle)
    print(json.dumps(res) if a.json else "\n".join(f"{k}: {v}" for k, v in res.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
