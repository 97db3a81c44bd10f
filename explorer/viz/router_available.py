"""The Router page's achieved against available hit rate per routing policy (design section 14):
what each policy's engines hit, beside what every instance's cache pooled held for the same
requests when they were routed (plotly only)."""

from __future__ import annotations

import plotly.graph_objects as go

from explorer.router.config import BASELINE, POLICIES
from explorer.router.results import FleetResult, PolicyRun

ACHIEVED_COLOR = "#0072B2"
AVAILABLE_COLOR = "#BBBBBB"


def _runs(result: FleetResult) -> list[PolicyRun]:
    return [result.runs[p] for p in (*POLICIES, BASELINE) if p in result.runs]


def achieved_vs_available(result: FleetResult) -> go.Figure:
    """Two bars per policy: the achieved hit rate and the available one."""
    runs = _runs(result)
    labels = [r.label for r in runs]
    fig = go.Figure(
        [
            go.Bar(
                x=labels,
                y=[r.hit_rate for r in runs],
                name="achieved (the engines' own stats)",
                marker_color=ACHIEVED_COLOR,
                text=[f"{r.hit_rate:.1%}" for r in runs],
                textposition="outside",
                meta="achieved",
            ),
            go.Bar(
                x=labels,
                y=[r.available_hit_rate for r in runs],
                name="available (every instance's cache pooled)",
                marker_color=AVAILABLE_COLOR,
                text=[f"{r.available_hit_rate:.1%}" for r in runs],
                textposition="outside",
                customdata=[r.other_instance_tokens for r in runs],
                hovertemplate="%{x}: %{y:.2%} available<br>%{customdata:,} missed tokens another instance "
                "held<extra></extra>",
                meta="available",
            ),
        ]
    )
    fig.update_layout(
        title="Achieved against available hit rate, per routing policy",
        barmode="group",
        yaxis={"tickformat": ".0%", "range": [0, 1.1]},
        legend={"orientation": "h", "y": -0.2},
        margin={"t": 50, "l": 50, "r": 20, "b": 40},
    )
    return fig


def gap_sentence(result: FleetResult) -> str:
    """One sentence: the policy that leaves the most on other instances."""
    runs = [r for r in _runs(result) if r.queries]
    if not runs:
        return ""
    worst = max(runs, key=lambda r: r.available_hit_rate - r.hit_rate)
    gap = worst.available_hit_rate - worst.hit_rate
    if gap <= 0:
        return "Every policy hit all the fleet had cached for its requests: no miss was held by another instance."
    return (
        f"{worst.label} leaves the most on other instances: it achieved {worst.hit_rate:.1%} where "
        f"{worst.available_hit_rate:.1%} was available ({worst.other_instance_tokens:,} missed tokens another "
        "instance held)."
    )
