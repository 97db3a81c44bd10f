"""The live page's metrics view: scrape a running vLLM's ``/metrics`` once a second and plot
its prefix-cache counters and hit rates (the counters' total, and a PromQL-style rate over
the last N scrapes), beside the event-derived view.

Which hosts: the same rule as the event endpoints (loopback, or the app's allow-list); the
fetch and its caps are `explorer.metrics.scrape`'s, and every failure is one message. The
history lives in this session's state, capped at MAX_POINTS scrapes; a counter that goes
down (the server restarted) starts it again.
"""

from __future__ import annotations

import time
from typing import Any

import streamlit as st

from explorer.errors import BadInput
from explorer.metrics.scrape import Scraped, check_url, scrape
from explorer.ui.text import caption, error, info
from explorer.viz.metrics_figs import scrape_figure

W_URL = "live_metrics_url"
W_START = "live_metrics_start"
W_STOP = "live_metrics_stop"
W_WINDOW = "live_metrics_window"
ACTIVE = "live_metrics_active"  # the checked URL while scraping
HISTORY = "live_metrics_history"  # [(seconds, Scraped)]
ERROR = "live_metrics_error"
MAX_POINTS = 600
REFRESH_S = 1.0
DEFAULT_URL = "http://127.0.0.1:8000/metrics"


def _ss() -> Any:
    return st.session_state


def _start(allow: frozenset[str]) -> None:
    ss = _ss()
    ss[ERROR] = None
    try:
        ss[ACTIVE] = check_url((ss.get(W_URL) or "").strip(), allow)
    except BadInput as e:
        ss[ACTIVE] = None
        ss[ERROR] = str(e)
    ss[HISTORY] = []


def _stop() -> None:
    _ss()[ACTIVE] = None


def _rate(hist: list[tuple[float, Scraped]], n: int, external: bool = False) -> float | None:
    """Increase of hits over increase of queries across the last ``n`` scrapes (PromQL's
    ratio of two rates over one range)."""
    if len(hist) < 2:
        return None
    a, b = hist[max(0, len(hist) - 1 - n)][1], hist[-1][1]
    dq = (b.external_queries - a.external_queries) if external else (b.queries - a.queries)
    dh = (b.external_hits - a.external_hits) if external else (b.hits - a.hits)
    return dh / dq if dq > 0 else None


def _pct(x: float | None) -> str:
    return "none" if x is None else f"{x:.1%}"


def _scrape_once(allow: frozenset[str]) -> None:
    ss = _ss()
    url = ss.get(ACTIVE)
    if not url:
        return
    hist: list[tuple[float, Scraped]] = ss.setdefault(HISTORY, [])
    try:
        s = scrape(url, allow)
    except BadInput as e:
        ss[ERROR] = f"{url}: {e}"
        return
    ss[ERROR] = None
    if hist and (s.queries < hist[-1][1].queries or s.hits < hist[-1][1].hits):
        hist.clear()  # a counter went down: the server restarted
    hist.append((time.monotonic(), s))
    del hist[:-MAX_POINTS]


def _draw() -> None:
    ss = _ss()
    if ss.get(ERROR):
        error(ss[ERROR])
    hist: list[tuple[float, Scraped]] = ss.get(HISTORY) or []
    if not hist:
        info("No scrape yet.")
        return
    n = int(ss.get(W_WINDOW) or 5)
    last = hist[-1][1]
    total = last.hits / last.queries if last.queries else None
    c = st.columns(4)
    c[0].metric("vllm:prefix_cache_queries_total", f"{last.queries:,.0f}")
    c[1].metric("vllm:prefix_cache_hits_total", f"{last.hits:,.0f}")
    c[2].metric("Counters: hits / queries", _pct(total))
    c[3].metric(f"PromQL rate, last {n} scrapes", _pct(_rate(hist, n)))
    st.html(
        f'<div class="px-live-metrics" data-px-live-queries="{last.queries:.0f}" data-px-live-hits="{last.hits:.0f}" '
        f'data-px-live-scrapes="{len(hist)}">{len(hist)} scrapes; external queries {last.external_queries:,.0f}, '
        f"external hits {last.external_hits:,.0f}, {last.samples:,} vllm:* samples in the last one</div>"
    )
    t0 = hist[0][0]
    times = [t - t0 for t, _ in hist]
    st.plotly_chart(
        scrape_figure(
            times,
            {"queries": [s.queries for _, s in hist], "hits": [s.hits for _, s in hist]},
            "Prefix cache counters (tokens)",
            "tokens",
        ),
        key="live_metrics_counters",
        config={"displayModeBar": False},
    )
    rates = {
        "counters: hits / queries": [s.hits / s.queries * 100 if s.queries else None for _, s in hist],
        f"rate over the last {n} scrapes": [_percent(_rate(hist[: i + 1], n)) for i in range(len(hist))],
    }
    st.plotly_chart(
        scrape_figure(times, rates, "Hit rate", "%"), key="live_metrics_rates", config={"displayModeBar": False}
    )


def _percent(x: float | None) -> float | None:
    return None if x is None else 100 * x


def metrics_section(allow: frozenset[str]) -> None:
    """The form and, while scraping, a fragment that scrapes and redraws once a second."""
    ss = _ss()
    st.subheader("Metrics from /metrics", anchor="live-metrics")
    with st.form("live_metrics_form", border=True):
        c1, c2 = st.columns([3, 1])
        c1.text_input("vLLM /metrics URL", value=DEFAULT_URL, key=W_URL)
        c2.number_input("Rate over the last N scrapes", min_value=1, max_value=MAX_POINTS, value=5, key=W_WINDOW)
        st.form_submit_button("Scrape", on_click=_start, args=(allow,), key=W_START)
    caption("Loopback only, as for the event endpoints; one scrape a second, the last 600 kept.")
    if not ss.get(ACTIVE):
        if ss.get(ERROR):
            error(ss[ERROR])
        return
    st.button("Stop scraping", key=W_STOP, on_click=_stop)

    @st.fragment(run_every=REFRESH_S)
    def _panel() -> None:
        _scrape_once(allow)
        _draw()

    _panel()
