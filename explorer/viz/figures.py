"""Plotly figures: the pool as a heat strip, for scenarios with thousands of blocks."""

from __future__ import annotations

import plotly.graph_objects as go

from explorer.scenario.trace import Snapshot
from explorer.viz.palette import CHANGED, OKABE_ITO, STATE_CODE, STATE_ORDER, STATES, block_letter, block_state

STRIP_COLUMNS = 100


def heat_strip(
    snap: Snapshot, changed: set[int], selected: int | None = None, columns: int = STRIP_COLUMNS
) -> go.Figure:
    """One cell per block, `columns` blocks per row, coloured by state; the blocks this step
    changed are marked with an open vermillion square (clickable), the selected one in blue."""
    n = len(snap.blocks)
    rows = (n + columns - 1) // columns
    z: list[list[float | None]] = [[None] * columns for _ in range(rows)]
    text: list[list[str]] = [[""] * columns for _ in range(rows)]
    for i, (rc, h) in enumerate(snap.blocks):
        r, c = divmod(i, columns)
        state = block_state(i, rc, h)
        z[r][c] = STATE_CODE[state]
        text[r][c] = f"block {i}: {block_letter(i, rc)}, ref_cnt {rc}" + (f", hash {h.hex()[:8]}" if h else "")
    k = len(STATE_ORDER)
    scale = []
    for i, s in enumerate(STATE_ORDER):
        scale += [[i / k, STATES[s][0]], [(i + 1) / k, STATES[s][0]]]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            text=text,
            hoverinfo="text",
            colorscale=scale,
            zmin=-0.5,
            zmax=k - 0.5,
            showscale=False,
            xgap=1,
            ygap=1,
        )
    )
    ch = sorted(changed)
    fig.add_trace(
        go.Scatter(
            x=[b % columns for b in ch],
            y=[b // columns for b in ch],
            mode="markers",
            marker=dict(symbol="square-open", size=9, color=CHANGED, line=dict(width=2)),
            customdata=ch,
            hovertemplate="block %{customdata}: changed by this step<extra></extra>",
            name="changed",
        )
    )
    if selected is not None and 0 <= selected < n:
        fig.add_trace(
            go.Scatter(
                x=[selected % columns],
                y=[selected // columns],
                mode="markers",
                marker=dict(symbol="circle-open", size=12, color=OKABE_ITO["blue"], line=dict(width=3)),
                hoverinfo="skip",
                name="selected",
            )
        )
    fig.update_layout(
        height=max(120, 14 * rows + 40),
        margin=dict(l=40, r=10, t=10, b=20),
        showlegend=False,
        xaxis=dict(
            range=[-0.5, columns - 0.5],
            showgrid=False,
            zeroline=False,
            title=None,
            tickvals=list(range(0, columns, 10)),
        ),
        yaxis=dict(
            autorange="reversed",
            showgrid=False,
            zeroline=False,
            tickvals=list(range(rows)),
            ticktext=[f"{r * columns}" for r in range(rows)],
            title=None,
        ),
        plot_bgcolor="#FFFFFF",
        clickmode="event+select",
        dragmode=False,
    )
    return fig
