"""Figures of a fleet simulation (plotly only, no Streamlit).

Every builder takes an `explorer.router.results.FleetResult` (or one of its `PolicyRun`s) and
draws numbers it already holds; the hit tokens are the engines' own `PrefixCacheStats` totals.
"""

from __future__ import annotations

import plotly.graph_objects as go

from explorer.router.config import BASELINE, POLICIES
from explorer.router.results import FleetResult, PolicyRun
from explorer.viz.palette import OKABE_ITO

POLICY_COLORS = {
    "prefix": OKABE_ITO["blue"],
    "round_robin": OKABE_ITO["orange"],
    "least_loaded": OKABE_ITO["reddish_purple"],
    BASELINE: OKABE_ITO["bluish_green"],
}
_LAYOUT = {"margin": {"l": 50, "r": 20, "t": 50, "b": 40}, "legend": {"orientation": "h", "y": -0.2}}


def _runs(result: FleetResult) -> list[PolicyRun]:
    order = [*POLICIES, BASELINE]
    return [result.runs[p] for p in order if p in result.runs]


def hit_rate_by_policy(result: FleetResult) -> go.Figure:
    """Fleet-wide hit rate (hit tokens / prompt tokens) per policy, with the tokens in the hover."""
    runs = _runs(result)
    fig = go.Figure(
        go.Bar(
            x=[r.label for r in runs],
            y=[r.hit_rate for r in runs],
            marker_color=[POLICY_COLORS.get(r.policy, "#888888") for r in runs],
            text=[f"{r.hit_rate:.1%}" for r in runs],
            textposition="outside",
            customdata=[[r.hits, r.queries, r.saved_ms] for r in runs],
            hovertemplate="%{x}: %{y:.2%}<br>%{customdata[0]:,} of %{customdata[1]:,} prompt tokens hit"
            "<br>%{customdata[2]:,.0f} ms of prefill saved (estimate)<extra></extra>",
        )
    )
    fig.update_layout(
        title="Prefix cache hit rate, whole fleet", yaxis={"tickformat": ".0%", "range": [0, 1.1]}, **_LAYOUT
    )
    return fig


PER_INSTANCE_METRICS = {
    "hit_tokens": ("Hit tokens (engine stats)", ",d"),
    "hit_rate": ("Hit rate", ".0%"),
    "routed": ("Requests routed", ",d"),
    "prefill_ms": ("Prefill computed, ms (estimate)", ",.0f"),
    "saved_ms": ("Prefill saved, ms (estimate)", ",.0f"),
}


def per_instance(result: FleetResult, metric: str = "hit_tokens") -> go.Figure:
    """One group of bars per instance, one bar per policy."""
    if metric not in PER_INSTANCE_METRICS:
        raise ValueError(f"unknown metric {metric!r}")
    title, fmt = PER_INSTANCE_METRICS[metric]
    fig = go.Figure()
    for run in _runs(result):
        values = [getattr(i, metric) for i in run.instances]
        fig.add_trace(
            go.Bar(
                name=run.label,
                x=[i.name for i in run.instances],
                y=values,
                marker_color=POLICY_COLORS.get(run.policy, "#888888"),
                hovertemplate=f"%{{x}}: %{{y:{fmt}}}<extra>{run.label}</extra>",
            )
        )
    fig.update_layout(title=f"{title}, per instance", barmode="group", yaxis={"tickformat": fmt}, **_LAYOUT)
    return fig


def cumulative_hit_rate(result: FleetResult) -> go.Figure:
    """Hit tokens / prompt tokens of the first k admitted requests, in stream order."""
    fig = go.Figure()
    for run in _runs(result):
        xs, ys = [], []
        hits = total = 0
        for k, (inst, h, n) in enumerate(zip(run.instance_of, run.hit_tokens, run.prompt_tokens)):
            if inst < 0:
                continue
            hits += h
            total += n
            xs.append(k + 1)
            ys.append(hits / total)
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines",
                name=run.label,
                line={"color": POLICY_COLORS.get(run.policy, "#888888")},
                hovertemplate="after %{x} requests: %{y:.1%}<extra>" + run.label + "</extra>",
            )
        )
    fig.update_layout(
        title="Hit rate so far, along the stream", xaxis_title="requests", yaxis={"tickformat": ".0%"}, **_LAYOUT
    )
    return fig


def prefill_time(result: FleetResult) -> go.Figure:
    """Estimated prefill milliseconds per policy: computed, and saved by hits (stacked)."""
    runs = _runs(result)
    labels = [r.label for r in runs]
    fig = go.Figure(
        [
            go.Bar(
                name="computed",
                x=labels,
                y=[r.prefill_ms for r in runs],
                marker_color=OKABE_ITO["vermillion"],
                hovertemplate="%{x}: %{y:,.0f} ms computed<extra></extra>",
            ),
            go.Bar(
                name="saved by hits",
                x=labels,
                y=[r.saved_ms for r in runs],
                marker_color=OKABE_ITO["bluish_green"],
                hovertemplate="%{x}: %{y:,.0f} ms saved<extra></extra>",
            ),
        ]
    )
    fig.update_layout(title="Prefill time, whole fleet (estimate)", barmode="stack", yaxis_title="ms", **_LAYOUT)
    return fig


def router_vs_engine(run: PolicyRun) -> go.Figure:
    """Per request: the router's predicted match (from its event view) against the engine's own
    hit. On the diagonal the view was right; above it, the engine found more (stores the router
    missed); below, the router expected blocks that were gone (stale view)."""
    xs, ys, text, colors = [], [], [], []
    for k, (inst, p, h, w) in enumerate(zip(run.instance_of, run.predicted_tokens, run.hit_tokens, run.waited)):
        if inst < 0:
            continue
        xs.append(p)
        ys.append(h)
        text.append(f"request {k} on instance-{inst}" + (" (queued first)" if w else ""))
        colors.append(OKABE_ITO["orange"] if w else (OKABE_ITO["blue"] if p == h else OKABE_ITO["vermillion"]))
    top = max([1, *xs, *ys])
    fig = go.Figure(
        [
            go.Scatter(
                x=[0, top],
                y=[0, top],
                mode="lines",
                line={"color": "#bbbbbb", "dash": "dot"},
                hoverinfo="skip",
                showlegend=False,
            ),
            go.Scatter(
                x=xs,
                y=ys,
                mode="markers",
                marker={"color": colors, "size": 7, "opacity": 0.75},
                text=text,
                hovertemplate="%{text}<br>router expected %{x:,} tokens, engine hit %{y:,}<extra></extra>",
                showlegend=False,
            ),
        ]
    )
    fig.update_layout(
        title=f"Router's match vs the engine's hit ({run.label})",
        xaxis_title="router's match (tokens)",
        yaxis_title="engine's hit (tokens)",
        **_LAYOUT,
    )
    return fig


def subscriber_view(run: PolicyRun) -> go.Figure:
    """Per instance: batches applied and lost, and how the router's view differs from the engine
    at the end (phantom = evicted but still in the view, missing = cached but not in the view)."""
    names = [i.name for i in run.instances]
    series = [
        ("batches applied", [i.subscriber.get("batches", 0) for i in run.instances], OKABE_ITO["sky_blue"]),
        ("batches lost (gaps)", [i.subscriber.get("lost", 0) for i in run.instances], OKABE_ITO["vermillion"]),
        ("phantom blocks in view", [i.phantom for i in run.instances], OKABE_ITO["orange"]),
        ("cached blocks missing from view", [i.missing for i in run.instances], OKABE_ITO["reddish_purple"]),
    ]
    fig = go.Figure(
        [
            go.Bar(name=n, x=names, y=v, marker_color=c, hovertemplate="%{x}: %{y:,}<extra>" + n + "</extra>")
            for n, v, c in series
        ]
    )
    fig.update_layout(title=f"The router's event view ({run.label})", barmode="group", **_LAYOUT)
    return fig


# (row label, summary key, format): the router page's table, one row per figure
SUMMARY_ROWS = (
    ("hit rate", "hit_rate", "{:.1%}"),
    ("available hit rate (every cache pooled)", "available_hit_rate", "{:.1%}"),
    ("missed, held by another instance (tokens)", "other_instance_tokens", "{:,}"),
    ("hit tokens (prefill saved)", "hit_tokens", "{:,}"),
    ("prompt tokens", "prompt_tokens", "{:,}"),
    ("prefill saved, ms", "saved_ms", "{:,.0f}"),
    ("prefill computed, ms", "prefill_ms", "{:,.0f}"),
    ("router's matched tokens", "router_match_tokens", "{:,}"),
    ("busiest / mean (prefill)", "imbalance_prefill", "{:.2f}"),
    ("busiest / mean (requests)", "imbalance_requests", "{:.2f}"),
    ("skipped", "skipped", "{:,}"),
    ("gaps", "gaps", "{:,}"),
    ("cross-tenant hit tokens", "cross_tenant_hit_tokens", "{:,}"),
)


def summary_table(runs: list[tuple[str, dict]]) -> dict[str, list[str]]:
    """The runs side by side: a column per policy (its label), a row per figure, numbers with
    separators. Few columns, so the table wraps at narrow widths instead of scrolling."""
    table: dict[str, list[str]] = {"": [label for label, _, _ in SUMMARY_ROWS]}
    for label, s in runs:
        table[label] = [fmt.format(s[key]) for _, key, fmt in SUMMARY_ROWS]
    return table
