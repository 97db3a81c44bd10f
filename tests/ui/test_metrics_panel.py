"""The explorer page's metrics panel on an engine-step lesson: the three rates side by side,
the numbers of the step, the log line, the PromQL and the exposition of the step."""

from __future__ import annotations

import re
from html import unescape

from explorer.metrics.replay import points, step_rates
from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario
from tests.ui.helpers import ROOT, all_html, explorer, no_exception, step_through_lesson, step_to

# The stage's metric cells (explorer.view.stage_state.exported_metrics_html), laid out as st.metric.
_CELL = re.compile(
    r'<div class="px-metric"><div class="px-metric-label">(.*?)</div><div class="px-metric-value">(.*?)</div></div>'
)
_CODE = re.compile(r'<pre class="px-code">(.*?)</pre>', re.S)


def _metric(at, label: str) -> str:
    """The value of the first metric cell at the page's step whose label starts with ``label``."""
    cells = [(unescape(a), unescape(v)) for a, v in _CELL.findall(all_html(at))]
    return next(v for a, v in cells if a.startswith(label))


def _codes(at) -> list[str]:
    """The code blocks at the page's step (the log line, the PromQL, the exposition)."""
    return [unescape(c) for c in _CODE.findall(all_html(at))]


def test_the_panel_shows_the_three_rates_of_each_step():
    trace = replay(load_scenario(ROOT / "lessons" / "10_metrics.toml"))
    pts = points(trace)
    for k, _, at in step_through_lesson("10_metrics"):
        p = pts[k - 1]
        assert f'data-px-metrics="{k}"' in all_html(at)
        assert _metric(at, "Counters") == ("none" if p.total_rate is None else f"{p.total_rate:.1%}")
        assert _metric(at, "Log line") == ("none" if p.window_rate is None else f"{p.window_rate:.1%}")
        r = step_rates(pts, 5)[k - 1]
        assert _metric(at, "PromQL rate, last 5 steps") == ("none" if r is None else f"{r:.1%}")
    # After D (step 8): the counters 32%, the window 0%.
    at = step_to(at, 8)
    assert (_metric(at, "Counters"), _metric(at, "Log line")) == ("32.0%", "0.0%")
    codes = _codes(at)
    assert any('vllm:prefix_cache_hits_total{engine="0",model_name="explorer"} 96.0' in c for c in codes)
    assert any(c.startswith("sum(rate(vllm:prefix_cache_hits_total[5m]))") for c in codes)
    assert any("Prefix cache hit rate: 0.0%" in c for c in codes)


def test_the_window_is_adjustable():
    at = step_to(explorer({"lesson": "10_metrics"}), 8)
    at.number_input(key="px_metrics_window").set_value(1).run()
    no_exception(at)
    assert _metric(at, "PromQL rate, last 1 steps") == "0.0%"
    at.number_input(key="px_metrics_window").set_value(10).run()
    assert _metric(at, "PromQL rate, last 10 steps") == "32.0%"


def test_a_manager_level_lesson_has_no_exported_metrics_panel():
    at = explorer({"lesson": "00_two_chat_turns"})
    assert "data-px-metrics=" not in all_html(at)
