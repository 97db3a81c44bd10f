"""Scraping a /metrics endpoint: the URL rule, the caps, hostile answers as one message, and
the live page's metrics view against `explorer metrics --serve`."""

from __future__ import annotations

import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from streamlit.testing.v1 import AppTest

from explorer.errors import BadInput
from explorer.metrics.scrape import MAX_BODY, check_url, parse_counters, scrape
from tests.metrics.helpers import LESSON, start_server, wait_for_line


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000/metrics"),
        ("http://localhost:9/metrics", "http://localhost:9/metrics"),
        ("http://[::1]:8000/metrics", "http://[::1]:8000/metrics"),
        ("http://10.0.0.1:80/metrics", "not loopback"),
        ("https://127.0.0.1/metrics", "no https"),
        ("http://u:p@127.0.0.1:1/", "no user"),
        ("http://127.0.0.1:99999/", "the port"),
        ("http://127.0.0.1:８/", "printable ASCII"),
        ("file:///etc/passwd", "expected http"),
        ("http://127.0.0.1/" + "a" * 3000, "up to 2000"),
    ],
)
def test_the_url_rule(url, ok):
    if ok.startswith("http"):
        assert check_url(url, frozenset()) == ok
    else:
        with pytest.raises(BadInput, match=ok):
            check_url(url, frozenset())


def test_an_allowed_host_passes():
    assert check_url("http://vllm-a:8000/metrics", frozenset({"vllm-a"})) == "http://vllm-a:8000/metrics"


def test_counters_are_summed_over_engines():
    text = (
        "# HELP vllm:prefix_cache_hits_total x\n"
        'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 10.0\n'
        'vllm:prefix_cache_hits_total{engine="1",model_name="m"} 5.0\n'
        'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 40.0 1700000000000\n'
        'vllm:prefix_cache_queries_total{engine="1",model_name="a b}"} 20.0\n'
    )
    s = parse_counters(text)
    assert (s.hits, s.queries, s.external_hits, s.samples) == (15.0, 60.0, 0.0, 4)


def test_the_format_is_read_as_prometheus_reads_it():
    """prometheus_client's parser: escaped quotes and a brace inside a label value, comments,
    a counter's TYPE line, other clients' samples among vLLM's."""
    text = (
        "# TYPE vllm:prefix_cache_hits_total counter\n"
        'vllm:prefix_cache_hits_total{engine="0",model_name="say \\"hi\\" {x}"} 7\n'
        "# a comment\n"
        "process_cpu_seconds_total 3.5\n"
        'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 9\n'
    )
    s = parse_counters(text)
    assert (s.hits, s.queries, s.samples) == (7.0, 9.0, 2)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hello", "not a Prometheus text exposition"),
        ("# HELP vllm:x y\nnode_load1 0.5\n", "is this vLLM's /metrics"),
        (
            'vllm:prefix_cache_hits_total{a="b"} x\nvllm:prefix_cache_queries_total 1',
            "not a Prometheus text exposition",
        ),
        ('vllm:prefix_cache_hits_total{a="b} 1\nvllm:prefix_cache_queries_total 1', "not a Prometheus text exposition"),
        ("vllm:prefix_cache_hits_total -1\nvllm:prefix_cache_queries_total 1", "not a counter value"),
        ("vllm:prefix_cache_hits_total NaN\nvllm:prefix_cache_queries_total 1", "not a counter value"),
        ("x\n" * 200_001, "more than 200,000 lines"),
    ],
)
def test_hostile_expositions_are_one_message(text, message):
    with pytest.raises(BadInput, match=message):
        parse_counters(text)


class _Hostile(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "http://10.0.0.1/metrics")
            self.end_headers()
        elif self.path == "/error":
            self.send_error(500)
        elif self.path == "/huge":
            self.send_response(200)
            self.end_headers()
            chunk = b"#" * (1 << 20)
            try:
                for _ in range((MAX_BODY >> 20) + 2):
                    self.wfile.write(chunk)
            except OSError:
                pass
        elif self.path == "/binary":
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"\xff\xfe\x00vllm")
        else:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"<html>not metrics</html>")

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def hostile():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/redirect", "redirect"),
        ("/error", "HTTP 500"),
        ("/huge", "over 8 MiB"),
        ("/binary", "not UTF-8"),
        ("/html", "is this vLLM's /metrics"),
    ],
)
def test_hostile_servers_are_one_message(hostile, path, message):
    with pytest.raises(BadInput, match=message) as e:
        scrape(hostile + path, frozenset())
    assert "\n" not in str(e.value)


def test_nobody_listening_is_one_message():
    with pytest.raises(BadInput, match="could not read"):
        scrape("http://127.0.0.1:9/metrics", frozenset())


def _live():
    from explorer.ui.pages.live import render

    render()


def test_the_live_page_scrapes_explorer_metrics_serve():
    proc, port = start_server(LESSON, 0.02)
    try:
        wait_for_line(proc, "replay done")
        at = AppTest.from_function(_live, default_timeout=30)
        at.run()
        at.text_input(key="live_metrics_url").set_value(f"http://127.0.0.1:{port}/metrics")
        at.button(key="live_metrics_start").click()
        at.run()
        assert not at.exception
        at.run()  # a second scrape
        html = "\n".join(h.value for h in at.html)
        assert 'data-px-live-queries="300"' in html and 'data-px-live-hits="96"' in html
        metrics = {m.label: m.value for m in at.metric}
        assert metrics["Counters: hits / queries"] == "32.0%"
        assert metrics["vllm:prefix_cache_hits_total"] == "96"
        assert not at.error
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)


def test_the_live_page_refuses_a_remote_host():
    at = AppTest.from_function(_live, default_timeout=30)
    at.run()
    at.text_input(key="live_metrics_url").set_value("http://192.0.2.1:8000/metrics")
    at.button(key="live_metrics_start").click()
    at.run()
    assert [e.value for e in at.error if "not loopback" in e.value]
