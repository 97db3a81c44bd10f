"""The web app's speed in a real browser (Debian's chromium, Playwright): prints a table.

What it measures (issue #14's targets, medians of ``--runs``; reported, never asserted):

- first load: a fresh browser session opens the app's address (the default lesson) until the
  page is idle (target 2.5 s);
- Next -> idle: a click on Next until the next step is drawn and the page is idle (250 ms);
  and Next -> painted by the page's own clock (issue 23's 50 ms): the button pressed inside the
  page until the frame that shows the next step is done, without the driver's round trips;
- open a lesson: a lesson picked in the explorer's sidebar until its step 0 is drawn and idle,
  and "Open this lesson in the explorer" on the Lessons page (1.5 s);
- page switch: a click on a page in the sidebar's menu until that page is drawn and idle (1 s),
  every page, Router and Trace replay after they have a result (they must keep it).

"Idle" is the rule the browser tests use (tests/e2e/conftest.py): Streamlit's app element says
the script is not running and no widget is still a loading skeleton. The app runs under
`streamlit run` with the tests' flags (or ``--url`` of a running one). The machine is shared:
run it more than once and read the spread (p10 .. p90), not one figure.

Run:  .venv/bin/python scripts/bench_ui.py [--runs 20] [--only next,lesson,first,switch]
          [--next-lessons 14_engine_step,10_metrics]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS, IDLE, serve_app  # noqa: E402

IDLE_JS = (
    "() => !!document.querySelector('" + IDLE.replace("'", "\\'") + "')"
    " && !document.querySelector('[data-testid=\"stSkeleton\"]')"
)
TARGETS_MS = {"first": 2500, "next": 250, "lesson": 1500, "switch": 1000}
LESSON_MENU = [  # lessons the explorer's picker opens, in turn (several kinds and sizes)
    "01_hash_chain",
    "07_eviction_preemption",
    "14_engine_step",
    "00_two_chat_turns",
    "10_metrics",
    "15_async_hash_later",
]
# (menu label, url path, a selector present once that page is drawn)
PAGES = [
    ("Lessons", "lessons", "h1:has-text('Lessons')"),
    ("Practice", "practice", "h1:has-text('Practice')"),
    ("What a hit saves", "prefill", "h1:has-text('What a hit saves')"),
    ("Hash calculator", "hash", "h1:has-text('Hash calculator')"),
    ("Live events", "live", "h1:has-text('Live KV events')"),
    ("Trace replay", "replay", ".st-key-replay_fig_size"),
    ("Router", "router", ".st-key-router_fig_hit"),
    ("Explorer", "explorer", ".px-now"),
]


def _wait(page, selector: str | None = None, js: str | None = None) -> None:
    if selector:
        page.locator(selector).first.wait_for(timeout=120_000)
    if js:
        page.wait_for_function(js, timeout=120_000, polling="raf")
    page.wait_for_function(IDLE_JS, timeout=120_000, polling="raf")


def _headline_is(k: int) -> str:
    return f"() => {{ const h = document.querySelector('.px-now'); return !!h && h.dataset.pxNow === '{k}'; }}"


def bench_first(browser, url: str, runs: int, warm_cache: bool = False) -> list[float]:
    """A new browser session each time: a fresh browser profile (nothing cached), or with
    ``warm_cache`` a new tab of one profile (the app's scripts in the browser's cache)."""
    out = []
    shared = browser.new_context(viewport={"width": 1500, "height": 1000}) if warm_cache else None
    for _ in range(runs):
        ctx = shared or browser.new_context(viewport={"width": 1500, "height": 1000})
        page = ctx.new_page()
        t = time.perf_counter()
        page.goto(url + "/")
        _wait(page, ".px-now")
        out.append((time.perf_counter() - t) * 1000)
        page.close()
        if shared is None:
            ctx.close()
    if shared is not None:
        shared.close()
    return out


def _metrics(cdp) -> dict[str, float]:
    return {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}


def _restarted_at_last(page) -> bool:
    """At the last step, back to step 0 (not timed); whether it was there."""
    if not page.locator(".px-b-next").first.is_disabled():
        return False
    page.locator(".px-b-first").first.click()
    _wait(page, js=_headline_is(0))
    return True


def bench_next(browser, url: str, runs: int, lesson: str = "00_two_chat_turns", presenter: bool = False):
    """(wall ms per Next, the browser main thread's busy ms per Next: script, layout, style and
    the rest of its tasks, from Chromium's own counters, less sensitive to a busy machine)."""
    ctx = browser.new_context(viewport={"width": 1500, "height": 1000})
    page = ctx.new_page()
    cdp = ctx.new_cdp_session(page)
    cdp.send("Performance.enable")
    page.goto(f"{url}/?lesson={lesson}&step=0" + ("&presenter=1" if presenter else ""))
    _wait(page, ".px-now")
    out: list[float] = []
    busy: list[float] = []
    k = 0
    while len(out) < runs:
        if _restarted_at_last(page):
            k = 0
            continue
        nxt = page.locator(".px-b-next").first
        before = _metrics(cdp)
        t = time.perf_counter()
        nxt.click()
        _wait(page, js=_headline_is(k + 1))
        out.append((time.perf_counter() - t) * 1000)
        busy.append((_metrics(cdp)["TaskDuration"] - before["TaskDuration"]) * 1000)
        k += 1
    ctx.close()
    return out, busy


# Next pressed inside the page, until the step after it is painted: the click's handler draws
# the step synchronously, the next animation frame lays it out and paints, and the task after
# that frame runs once the frame is done. No driver round trip is in it (Playwright's click
# waits for the button to be stable over two frames and each wait polls once a frame).
IN_PAGE_NEXT_JS = """async () => {
  const next = document.querySelector('.px-b-next');
  const t = performance.now();
  next.click();
  await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
  return [performance.now() - t, Number(document.querySelector('.px-now').dataset.pxNow)];
}"""


def bench_next_in_page(browser, url: str, runs: int, presenter: bool = False) -> list[float]:
    """Next -> painted, timed by the page's own clock (ms), on the default lesson."""
    ctx = browser.new_context(viewport={"width": 1500, "height": 1000})
    page = ctx.new_page()
    page.goto(url + "/?step=0" + ("&presenter=1" if presenter else ""))
    _wait(page, ".px-now")
    out: list[float] = []
    k = 0
    while len(out) < runs:
        if _restarted_at_last(page):
            k = 0
            continue
        ms, shown = page.evaluate(IN_PAGE_NEXT_JS)
        if shown != k + 1:
            raise RuntimeError(f"Next drew step {shown}, not {k + 1}")
        page.wait_for_function(IDLE_JS, timeout=120_000, polling="raf")
        out.append(ms)
        k += 1
    ctx.close()
    return out


def _pick_lesson(page, stem: str) -> None:
    from explorer.ui.lesson_files import lesson_title

    page.locator('[class*="st-key-px_w_lesson__"]').first.click()
    page.get_by_role("option", name=lesson_title(stem), exact=True).first.click()


def bench_lesson(browser, url: str, runs: int) -> tuple[list[float], list[float]]:
    """(the explorer's picker, the Lessons page's link) times."""
    ctx = browser.new_context(viewport={"width": 1500, "height": 1000})
    page = ctx.new_page()
    page.goto(url + "/")
    _wait(page, ".px-now")
    picker: list[float] = []
    i = 0
    while len(picker) < runs:
        stem = LESSON_MENU[i % len(LESSON_MENU)]
        i += 1
        if f"lessons/{stem}.toml" in page.locator(".px-title-sub").inner_text():
            continue
        t = time.perf_counter()
        _pick_lesson(page, stem)
        _wait(
            page,
            js=f"() => (document.querySelector('.px-title-sub')||{{}}).textContent?.includes('lessons/{stem}.toml')",
        )
        picker.append((time.perf_counter() - t) * 1000)
    link: list[float] = []
    i = 0
    while len(link) < runs:
        stem = LESSON_MENU[i % len(LESSON_MENU)]
        i += 1
        page.goto(f"{url}/lessons?lesson={stem}")
        _wait(page, "h1:has-text('Lessons')")
        t = time.perf_counter()
        page.get_by_text("Open this lesson in the explorer").first.click()
        _wait(
            page,
            js=f"() => (document.querySelector('.px-title-sub')||{{}}).textContent?.includes('lessons/{stem}.toml')",
        )
        link.append((time.perf_counter() - t) * 1000)
    ctx.close()
    return picker, link


def _nav(page, label: str, path: str, marker: str) -> float:
    t = time.perf_counter()
    page.get_by_test_id("stSidebarNav").get_by_role("link", name=label, exact=True).click()
    # the default page (the explorer) lives at the app's root
    page.wait_for_url(
        lambda u: urlsplit(u).path.strip("/") in (path, "" if path == "explorer" else path), timeout=120_000
    )
    _wait(page, marker)
    return (time.perf_counter() - t) * 1000


def bench_switch(browser, url: str, runs: int) -> dict[str, list[float]]:
    """Every page in turn from the explorer, ``runs`` rounds; Trace replay is run once first so
    that it has a result to keep (the Router runs its fleet on its first visit)."""
    ctx = browser.new_context(viewport={"width": 1500, "height": 1000})
    page = ctx.new_page()
    page.goto(url + "/")
    _wait(page, ".px-now")
    page.get_by_test_id("stSidebarNav").get_by_role("link", name="Trace replay", exact=True).click()
    page.wait_for_url("**/replay**")
    _wait(page, "h2:has-text('Replay a trace')")
    page.get_by_role("button", name="Run replay").click()
    _wait(page, ".st-key-replay_fig_size")
    out: dict[str, list[float]] = {label: [] for label, _, _ in PAGES}
    out["Router (first visit)"] = []
    first_router = True
    for _ in range(runs):
        for label, path, marker in PAGES:
            ms = _nav(page, label, path, marker)
            if label == "Router" and first_router:
                out["Router (first visit)"].append(ms)
                first_router = False
            else:
                out[label].append(ms)
    ctx.close()
    return {k: v for k, v in out.items() if v}


def _row(name: str, ms: list[float], target: float | None) -> str:
    s = sorted(ms)
    med = statistics.median(s)
    p10 = s[int(0.1 * (len(s) - 1))]
    p90 = s[int(0.9 * (len(s) - 1))]
    verdict = "" if target is None else ("met" if med <= target else "NOT met")
    tgt = "" if target is None else f"{target:,.0f}"
    return f"| {name} | {len(s)} | {med:,.0f} | {p10:,.0f} .. {p90:,.0f} | {s[-1]:,.0f} | {tgt} | {verdict} |"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20, help="timed repeats of each action (default 20)")
    ap.add_argument("--only", default="first,next,lesson,switch", help="comma-separated: first,next,lesson,switch")
    ap.add_argument("--url", help="a running app's address (default: start one with the tests' flags)")
    ap.add_argument(
        "--next-lessons",
        default="",
        help="comma-separated lesson stems whose Next is timed too, after the default lesson's (e.g. 14_engine_step)",
    )
    args = ap.parse_args()
    which = {w.strip() for w in args.only.split(",") if w.strip()}
    from playwright.sync_api import sync_playwright

    load = os.getloadavg()
    print(
        f"chromium {CHROMIUM}, {os.cpu_count()} CPUs, load average at the start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    print("| what | runs | median ms | p10 .. p90 ms | max ms | target ms | median |")
    print("|---|---|---|---|---|---|---|", flush=True)

    def row(name: str, ms: list[float], target: float | None) -> None:
        print(_row(name, ms, target), flush=True)

    with contextlib.ExitStack() as stack:
        url = args.url or stack.enter_context(serve_app("bench-ui-streamlit.log"))
        pw = stack.enter_context(sync_playwright())
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        stack.callback(browser.close)
        # one untimed visit: the server's imports and the browser's caches are warm afterwards
        warm = browser.new_context()
        t = time.perf_counter()
        wp = warm.new_page()
        wp.goto(url + "/")
        _wait(wp, ".px-now")
        cold = (time.perf_counter() - t) * 1000
        warm.close()
        row("first load, cold server (once, not the target)", [cold], None)
        if "first" in which:
            row("first load: a fresh browser profile", bench_first(browser, url, args.runs), TARGETS_MS["first"])
            row(
                "first load: a new tab (scripts cached)",
                bench_first(browser, url, args.runs, True),
                TARGETS_MS["first"],
            )
        if "next" in which:
            wall, busy = bench_next(browser, url, args.runs)
            row("Next -> idle (default lesson, full page)", wall, TARGETS_MS["next"])
            row("  browser main thread busy per Next (full page)", busy, None)
            wall, busy = bench_next(browser, url, args.runs, presenter=True)
            row("Next -> idle (default lesson, presenter mode)", wall, TARGETS_MS["next"])
            row("  browser main thread busy per Next (presenter)", busy, None)
            for presenter in (False, True):
                where = "presenter mode" if presenter else "full page"
                ms = bench_next_in_page(browser, url, args.runs, presenter)
                row(f"Next -> painted, the page's own clock (default lesson, {where})", ms, 50)
            for stem in filter(None, (x.strip() for x in args.next_lessons.split(","))):
                for presenter in (False, True):
                    wall, _ = bench_next(browser, url, args.runs, lesson=stem, presenter=presenter)
                    where = "presenter mode" if presenter else "full page"
                    row(f"Next -> idle ({stem}, {where})", wall, TARGETS_MS["next"])
        if "lesson" in which:
            picker, link = bench_lesson(browser, url, args.runs)
            row("open a lesson: explorer's picker", picker, TARGETS_MS["lesson"])
            row("open a lesson: Lessons page's link", link, TARGETS_MS["lesson"])
        if "switch" in which:
            for label, ms in bench_switch(browser, url, args.runs).items():
                row(f"page switch -> {label}", ms, None if label == "Router (first visit)" else TARGETS_MS["switch"])
    load = os.getloadavg()
    print(f"load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
