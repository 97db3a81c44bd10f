"""Plotly figures of the metrics panel: the three hit rates over the steps, prompt tokens by
source, and the counters a live scrape read. Pure functions of recorded points."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from explorer.metrics.replay import MetricsPoint, step_rates
from explorer.viz.palette import OKABE_ITO

RATE_COLOURS = (OKABE_ITO["blue"], OKABE_ITO["orange"], OKABE_ITO["bluish_green"])
SOURCE_COLOURS = (OKABE_ITO["vermillion"], OKABE_ITO["sky_blue"], OKABE_ITO["reddish_purple"])
SOURCE_LABELS = ("local_compute", "local_cache_hit", "external_kv_transfer")


def _layout(fig: go.Figure, title: str, y_title: str, height: int = 300) -> go.Figure:
    fig.update_layout(
        title={"text": title, "font": {"size": 14}},
        height=height,
        margin={"l": 50, "r": 10, "t": 40, "b": 40},
        legend={"orientation": "h", "y": -0.25},
        yaxis_title=y_title,
        xaxis_title="step",
    )
    return fig


def rates_figure(pts: Sequence[MetricsPoint], k: int, n: int) -> go.Figure:
    """Total (the counters), the log line's window and a PromQL rate over the last ``n`` steps,
    after every op; a gap where a rate is undefined; step ``k`` marked."""
    xs = [p.index + 1 for p in pts]
    series = (
        ("counters: hits / queries since the start", [p.total_rate for p in pts]),
        ("log line: window of ~1,000 requests", [p.window_rate for p in pts]),
        (f"PromQL rate over the last {n} steps", step_rates(list(pts), n)),
    )
    fig = go.Figure()
    for (name, ys), colour in zip(series, RATE_COLOURS, strict=True):
        pct = [None if y is None else 100 * y for y in ys]
        fig.add_trace(go.Scatter(x=xs, y=pct, name=name, mode="lines+markers", line={"color": colour}))
    if k > 0:
        fig.add_vline(x=k, line={"color": "#888888", "dash": "dot"})
    fig.update_yaxes(range=[-2, 102])
    return _layout(fig, "Prefix cache hit rate, three ways", "%")


def by_source_figure(pts: Sequence[MetricsPoint], k: int) -> go.Figure:
    """vllm:prompt_tokens_by_source_total after each op, stacked; step ``k`` marked."""
    xs = [p.index + 1 for p in pts]
    fig = go.Figure()
    for i, (label, colour) in enumerate(zip(SOURCE_LABELS, SOURCE_COLOURS, strict=True)):
        fig.add_trace(go.Bar(x=xs, y=[p.by_source[i] for p in pts], name=label, marker_color=colour))
    fig.update_layout(barmode="stack")
    if k > 0:
        fig.add_vline(x=k, line={"color": "#888888", "dash": "dot"})
    return _layout(fig, "vllm:prompt_tokens_by_source_total", "tokens")


def scrape_figure(
    times: Sequence[float], series: Mapping[str, Sequence[float | None]], title: str, y: str
) -> go.Figure:
    """Lines over scrape times (seconds since the first scrape)."""
    fig = go.Figure()
    colours = (*RATE_COLOURS, *SOURCE_COLOURS)
    for (name, ys), colour in zip(series.items(), colours, strict=False):
        fig.add_trace(go.Scatter(x=list(times), y=list(ys), name=name, mode="lines", line={"color": colour}))
    fig = _layout(fig, title, y, height=260)
    fig.update_xaxes(title="seconds since the first scrape")
    return fig
