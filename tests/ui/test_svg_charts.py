"""The stage's SVG charts (explorer/viz/svg_charts.py, explorer/viz/metrics_svg.py): what they
draw follows the numbers, up to the step shown and never past it."""

from __future__ import annotations

import base64
import re

from explorer.metrics.replay import points
from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario
from explorer.viz.metrics_svg import by_source_svg, rates_svg
from explorer.viz.svg_charts import LEFT, TOP, Series, line_chart_svg, stacked_bars_svg
from tests.ui.helpers import ROOT


def _polylines(svg: str) -> list[list[tuple[float, float]]]:
    out = []
    for pts in re.findall(r'<polyline[^>]*points="([^"]*)"', svg):
        out.append([tuple(float(v) for v in p.split(",")) for p in pts.split()])
    return out


def test_a_line_breaks_where_a_value_is_undefined_and_stops_at_step_k():
    s = Series("s", [None, 0.0, 0.5, None, 1.0, 1.0, 0.0], "#000000")
    svg = line_chart_svg([s], n=6, k=5, width=400, height=200)
    runs = _polylines(svg)
    assert [len(r) for r in runs] == [2, 2]  # steps 1-2, then 4-5; step 6 is past k
    h = 200 - TOP - 28
    assert runs[0][1][1] == round(TOP + h * 0.5, 1) and runs[1][0][1] == float(TOP)  # 0.5 halfway, 1.0 at the top
    assert [p[0] for p in runs[1]] == [round(LEFT + (400 - LEFT - 10) * i / 6, 1) for i in (4, 5)]


def test_a_value_alone_between_gaps_gets_a_dot_on_a_long_axis():
    values = [None] * 100 + [0.25] + [None] * 99
    svg = line_chart_svg([Series("s", values, "#000000")], n=199, k=199)
    assert len(re.findall(r"<circle ", svg)) == 1 and len(_polylines(svg)) == 1


def test_stacked_bars_stack_in_order_and_scale_to_the_tallest_bar_so_far():
    a = Series("a", [None, 10, 30, 100], "#111111")
    b = Series("b", [None, 10, 10, 0], "#222222")
    svg = stacked_bars_svg([a, b], n=3, k=2, width=300, height=200)
    rects = [
        tuple(float(v) for v in r)
        for r in re.findall(r'<rect x="[^"]+" y="([^"]+)" width="[^"]+" height="([^"]+)"', svg)
    ]
    assert len(rects) == 4  # steps 1 and 2, two parts each: step 3 is not drawn
    h = 200 - TOP - 28
    heights = [r[1] for r in rects]
    assert abs(heights[2] + heights[3] - h) < 0.2  # step 2 (40 tokens) is the tallest: the full height
    assert abs(heights[0] - h * 10 / 40) < 0.2 and abs(heights[3] - h * 10 / 40) < 0.2
    assert 'fill="#222222"' in svg and svg.index('fill="#111111"') < svg.index('fill="#222222"')


def _svg_of(chart_html: str) -> str:
    return base64.b64decode(re.search(r"base64,([^\"]+)", chart_html).group(1)).decode()  # type: ignore[union-attr]


def test_the_metrics_charts_draw_the_lesson_up_to_the_step_shown():
    trace = replay(load_scenario(ROOT / "lessons" / "10_metrics.toml"))
    pts = points(trace)
    at8 = _svg_of(rates_svg(pts, 8, 5))
    # after step 8 the counters and the PromQL rate are at 32%; the log line's window is 0%
    # with nothing defined at steps 6-7, so it stands alone as a dot at the bottom
    bottom = 170 - 28
    assert any(abs(float(cy) - bottom) < 0.2 for cy in re.findall(r'<circle cx="[^"]+" cy="([^"]+)"', at8))
    assert max(len(r) for r in _polylines(at8)) <= 8
    assert len(_polylines(_svg_of(rates_svg(pts, 10, 5)))) >= len(_polylines(at8))
    bars = _svg_of(by_source_svg(pts, 4))
    assert 0 < len(re.findall(r"<rect ", bars)) <= 4 * 3
    assert "local_cache_hit" in by_source_svg(pts, 4) and "external_kv_transfer" in by_source_svg(pts, 4)
