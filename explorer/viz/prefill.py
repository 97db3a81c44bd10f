"""The prefill sweep figure: measured prefill time against hit length, beside the estimate.

Input is plain data (the measurement's JSON dicts), so this module needs neither torch nor
Streamlit. For each prompt length:
- measured cached prefill time at each hit length (markers and line);
- the measured full prefill time (dotted): what the prompt costs without the cache;
- the FLOP estimate (dashed): the full time scaled by FLOPs(cached) / FLOPs(full), i.e. what
  the cached run would take if time were exactly proportional to FLOPs on this device;
- optionally an absolute estimate from a peak and a utilisation (``estimate_ms`` in a point).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

# Okabe-Ito colours (colour-blind safe), one per prompt length.
COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9")


def _by_prompt(points: Sequence[Mapping]) -> dict[int, list[Mapping]]:
    groups: dict[int, list[Mapping]] = {}
    for p in points:
        groups.setdefault(int(p["prompt_tokens"]), []).append(p)
    return {k: sorted(v, key=lambda p: p["hit_tokens"]) for k, v in sorted(groups.items())}


def sweep_figure(points: Sequence[Mapping], title: str | None = None) -> go.Figure:
    """Time (ms) against hit tokens; one colour per prompt length."""
    fig = go.Figure()
    for i, (prompt, pts) in enumerate(_by_prompt(points).items()):
        colour = COLOURS[i % len(COLOURS)]
        hits = [p["hit_tokens"] for p in pts]
        # Every point re-times the full run; their median is the steadiest full time.
        full = statistics.median(p["full_ms"] for p in pts)
        fig.add_trace(
            go.Scatter(
                x=hits,
                y=[p["cached_ms"] for p in pts],
                mode="lines+markers",
                name=f"{prompt:,} tokens: measured, cached",
                line=dict(color=colour, width=2),
                customdata=[[p["saved_fraction"], p["flop_ideal_fraction"]] for p in pts],
                hovertemplate="hit %{x:,} tokens: %{y:.1f} ms<br>saved %{customdata[0]:.1%} "
                "(FLOP ideal %{customdata[1]:.1%})<extra></extra>",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=hits,
                y=[full * (1.0 - p["flop_ideal_fraction"]) for p in pts],
                mode="lines",
                name=f"{prompt:,} tokens: FLOP estimate",
                line=dict(color=colour, dash="dash", width=1.5),
                hovertemplate="hit %{x:,}: %{y:.1f} ms if time were proportional to FLOPs<extra></extra>",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=[0, max(hits) if hits else 0],
                y=[full, full],
                mode="lines",
                name=f"{prompt:,} tokens: measured, full",
                line=dict(color=colour, dash="dot", width=1),
                hovertemplate="full prefill: %{y:.1f} ms<extra></extra>",
            )
        )
        if all(p.get("estimate_ms") is not None for p in pts):
            fig.add_trace(
                go.Scatter(
                    x=hits,
                    y=[p["estimate_ms"] for p in pts],
                    mode="lines",
                    name=f"{prompt:,} tokens: peak x utilisation estimate",
                    line=dict(color=colour, dash="dashdot", width=1),
                )
            )
    fig.update_layout(
        title=title,
        xaxis_title="hit tokens (read from cached blocks)",
        yaxis_title="prefill time (ms)",
        yaxis=dict(rangemode="tozero"),
        xaxis=dict(rangemode="tozero"),
        legend=dict(orientation="h", yanchor="top", y=-0.2),
        margin=dict(l=50, r=10, t=40 if title else 10, b=10),
        height=420,
    )
    return fig
