"""The metrics' colours and names, and the Plotly figure of the counters a live scrape read (the
explorer's own metrics charts are SVG: explorer/viz/metrics_svg.py). Pure functions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

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
