"""The metrics panel's two charts (explorer/ui/metrics_panel.py): the three hit rates over the
steps and prompt tokens by source, as SVG images with their legends (explorer/viz/svg_charts.py),
drawn up to step k."""

from __future__ import annotations

from collections.abc import Sequence

from explorer.metrics.replay import MetricsPoint, step_rates
from explorer.viz.metrics_figs import RATE_COLOURS, SOURCE_COLOURS, SOURCE_LABELS
from explorer.viz.state_html import svg_img
from explorer.viz.svg_charts import Series, legend_html, line_chart_svg, stacked_bars_svg
from explorer.viz.text import esc


def _by_step(pts: Sequence[MetricsPoint], values: Sequence[float | None]) -> list[float | None]:
    """Values per op as values per step: index 0 is before the first op (nothing yet)."""
    out: list[float | None] = [None] * (len(pts) + 1)
    for p, v in zip(pts, values, strict=True):
        out[p.index + 1] = v
    return out


def _chart(title: str, svg: str, series: Sequence[Series], alt: str) -> str:
    return f'<div class="px-chart"><div class="px-chart-title">{esc(title)}</div>{svg_img(svg, alt)}{legend_html(series)}</div>'


def rates_svg(pts: Sequence[MetricsPoint], k: int, n: int) -> str:
    """Total (the counters), the log line's window and a PromQL rate over the last ``n`` steps,
    after every op up to step ``k``; a gap where a rate is undefined."""
    names = (
        "counters: hits / queries since the start",
        "log line: window of ~1,000 requests",
        f"PromQL rate over the last {n} steps",
    )
    values = ([p.total_rate for p in pts], [p.window_rate for p in pts], step_rates(list(pts), n))
    dashes = ("", "7 4", "2 3")  # where the three agree, each still shows
    series = [
        Series(name, _by_step(pts, v), c, d) for name, v, c, d in zip(names, values, RATE_COLOURS, dashes, strict=True)
    ]
    svg = line_chart_svg(series, len(pts), k)
    return _chart(
        "Prefix cache hit rate, three ways", svg, series, f"The three hit rates after each step up to step {k}."
    )


def by_source_svg(pts: Sequence[MetricsPoint], k: int) -> str:
    """vllm:prompt_tokens_by_source_total after each op up to step ``k``, stacked."""
    series = [
        Series(label, _by_step(pts, [p.by_source[i] for p in pts]), c)
        for i, (label, c) in enumerate(zip(SOURCE_LABELS, SOURCE_COLOURS, strict=True))
    ]
    svg = stacked_bars_svg(series, len(pts), k)
    return _chart(
        "vllm:prompt_tokens_by_source_total", svg, series, f"Prompt tokens by source after each step up to step {k}."
    )
