"""A real Prometheus scrapes `explorer metrics --serve` and evaluates the PromQL the UI shows.

Debian's `prometheus` (scripts/setup_test_env.sh installs it; a missing binary fails) runs on
loopback with a scrape interval of 1 s against `metrics --serve PORT --pace 2.5` replaying
lesson 10. Each step's values stay up for 2.5 s, so every one is scraped. Checked through the
HTTP API: the raw counters Prometheus stored are the replay's values after each step, in
order, ending at its totals; and the hit rate
`sum(rate(vllm:prefix_cache_hits_total[W])) / sum(rate(vllm:prefix_cache_queries_total[W]))`
over a window from the first scrape (both counters at 0, so rate's extrapolation scales both
alike) equals the replay's hits / queries over the same steps.
"""

from __future__ import annotations

import json
import math
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from explorer.metrics.replay import points, promql
from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario
from tests.metrics.helpers import LESSON, REPO, wait_for_line

PACE = 2.5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


def _until(predicate, what: str, deadline_s: float = 120.0):
    """Poll until ``predicate()`` is truthy (a guard against a hang, not a speed limit)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def prometheus(tmp_path):
    """(Prometheus API base URL, the port it scrapes)."""
    binary = shutil.which("prometheus")
    assert binary is not None, "Debian's prometheus is not installed: bash scripts/setup_test_env.sh"
    target, web = _free_port(), _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
        f"scrape_configs:\n  - job_name: explorer\n    static_configs:\n      - targets: ['127.0.0.1:{target}']\n"
    )
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{web}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "prometheus.log").open("w"),
    )
    base = f"http://127.0.0.1:{web}"

    def ready() -> bool:
        try:
            with urllib.request.urlopen(base + "/-/ready", timeout=5) as r:
                return r.status == 200
        except OSError:
            assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()[-2000:]
            return False

    try:
        _until(ready, "Prometheus to be ready")
        # Its scrape manager applies targets on a 5 s tick: wait for the first (failed) scrape,
        # so that the server's first values are scraped from its start.
        _until(lambda: _query(base, "up", time.time()), "the first scrape of the target")
        yield base, target
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def _query(base: str, expr: str, at: float) -> list:
    q = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
    answer = _get(f"{base}/api/v1/query?{q}")
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def test_prometheus_scrapes_the_replay_and_its_promql_rate_is_the_replays(prometheus):
    base, port = prometheus
    pts = [p for p in points(replay(load_scenario(LESSON), record=False)) if p.op == "step"]
    proc = subprocess.Popen(
        [".venv/bin/python", "-m", "explorer", "metrics", str(LESSON), "--serve", str(port), "--pace", str(PACE)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_line(proc, "replay done")
        final = pts[-1]

        def scraped_final():
            up = _query(base, "vllm:prefix_cache_queries_total", time.time())
            return up and float(up[0]["value"][1]) == final.queries and up[0]["value"][0]

        # The final values were scraped: evaluate at that scrape, plus one interval of margin.
        at = float(_until(scraped_final, "the final values to be scraped")) + 1.0
        names = {"queries": "vllm:prefix_cache_queries_total", "hits": "vllm:prefix_cache_hits_total"}
        raw = {k: _query(base, f"{n}[10m]", at) for k, n in names.items()}
        for key, result in raw.items():
            assert len(result) == 1
            values = [float(v) for _, v in result[0]["values"]]
            seen = [v for i, v in enumerate(values) if i == 0 or v != values[i - 1]]
            replayed = [0.0] + [float(getattr(p, key)) for p in pts]
            wanted = [v for i, v in enumerate(replayed) if i == 0 or v != replayed[i - 1]]
            assert seen == wanted, (key, result[0]["values"][:8])  # every value the replay reached, in order, from 0
            assert values[0] == 0.0
        t0 = float(raw["queries"][0]["values"][0][0])
        window = f"{math.ceil(at - t0) + 1}s"
        instant = {k: float(_query(base, n, at)[0]["value"][1]) for k, n in names.items()}
        assert instant == {"queries": final.queries, "hits": final.hits}
        rate = _query(base, promql(window)[0], at)
        assert len(rate) == 1
        assert float(rate[0]["value"][1]) == pytest.approx(final.hits / final.queries, rel=1e-12)
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
