"""Metrics in a real browser: the explorer's metrics panel on lesson 10 shows the three rates
of a step, and the Live page scrapes `explorer metrics --serve` standing in for vLLM."""

from __future__ import annotations

import signal

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import shot, wait_idle
from tests.metrics.helpers import LESSON, start_server, wait_for_line

pytestmark = pytest.mark.e2e


def _metric(page, label: str) -> str:
    box = page.locator(".px-metric").filter(has_text=label).first  # the stage's HTML, laid out as st.metric
    return box.locator(".px-metric-value").inner_text().strip()


def _live_metric(page, label: str) -> str:
    box = page.locator('[data-testid="stMetric"]').filter(has_text=label).first  # the live page's st.metric
    return box.locator('[data-testid="stMetricValue"]').inner_text().strip()


def test_the_metrics_panel_shows_the_three_rates(px_page, px_app_url):
    page = px_page
    page.goto(f"{px_app_url}/?lesson=10_metrics&step=8")
    expect(page.locator("[data-px-metrics='8']")).to_be_visible(timeout=90_000)
    wait_idle(page)
    assert _metric(page, "Counters: hits / queries") == "32.0%"
    assert _metric(page, "Log line: Prefix cache hit rate") == "0.0%"
    assert _metric(page, "PromQL rate, last 5 steps") == "32.0%"
    assert "queries 300 · hits 96" in page.locator("[data-px-metrics='8']").inner_text()
    body = page.locator("body").inner_text()
    assert "sum(rate(vllm:prefix_cache_hits_total[5m]))" in body
    assert "Prefix cache hit rate: 0.0%" in body
    shot(page, "metrics-panel", full=True)


def test_the_live_page_scrapes_a_metrics_endpoint(px_page, px_app_url):
    proc, port = start_server(LESSON, 0.3)
    try:
        page = px_page
        page.goto(f"{px_app_url}/live")
        box = page.locator(".st-key-live_metrics_url input")
        box.wait_for(timeout=90_000)
        wait_idle(page)
        box.fill(f"http://127.0.0.1:{port}/metrics")
        box.press("Enter")
        page.locator(".st-key-live_metrics_start button").click()
        wait_for_line(proc, "replay done")
        live = page.locator("[data-px-live-queries='300'][data-px-live-hits='96']")
        expect(live).to_be_visible(timeout=90_000)
        assert _live_metric(page, "Counters: hits / queries") == "32.0%"
        assert page.locator(".st-key-live_metrics_rates").count() == 1
        shot(page, "live-metrics")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    assert proc.returncode == 0
