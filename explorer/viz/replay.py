"""Figures of a trace replay sweep (plotly only, no Streamlit).

Both builders take the dict of `explorer.traffic.sweep.sweep_to_dict(sweep, per_request=True)`:
``{"block_size", "requests", "prompt_tokens", "timestamps", "prompt_lengths", "results":
[{"policy", "num_blocks" (None: unbounded), "skipped", "hit_tokens", "hit_rate", "hits": [per
request]}]}``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

POLICY_LABELS = {
    "vllm": "vLLM free-queue order (the engine)",
    "lru": "plain LRU (simulator, not vLLM)",
    "unbounded": "unbounded cache (ceiling, not vLLM)",
    "scheduler": "vLLM's scheduler, concurrent (the engine)",
}
POLICY_COLORS = {"vllm": "#1f77b4", "lru": "#ff7f0e", "unbounded": "#2ca02c", "scheduler": "#d62728"}


def hit_rate_vs_cache_size(sweep: Mapping[str, Any]) -> go.Figure:
    """Hit rate against cache size (log x), one line per policy; unbounded is a flat line."""
    results = sweep["results"]
    sized = sorted({r["num_blocks"] for r in results if r["num_blocks"] is not None})
    fig = go.Figure()
    for policy in ("vllm", "lru", "scheduler"):
        rows = sorted((r for r in results if r["policy"] == policy), key=lambda r: r["num_blocks"])
        if not rows:
            continue
        fig.add_trace(
            go.Scatter(
                x=[r["num_blocks"] for r in rows],
                y=[r["hit_rate"] for r in rows],
                mode="lines+markers",
                name=POLICY_LABELS[policy],
                line={"color": POLICY_COLORS[policy]},
                customdata=[[r["hit_tokens"], r["skipped"]] for r in rows],
                hovertemplate="%{x:,} blocks: %{y:.2%}<br>%{customdata[0]:,} hit tokens, "
                "%{customdata[1]:,} skipped (too big for the cache)<extra></extra>",
            )
        )
    for r in results:
        if r["policy"] == "unbounded":
            xs = [sized[0], sized[-1]] if sized else [1, 2]
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=[r["hit_rate"]] * len(xs),
                    mode="lines",
                    name=POLICY_LABELS["unbounded"],
                    line={"color": POLICY_COLORS["unbounded"], "dash": "dash"},
                    hovertemplate=f"ceiling: {r['hit_rate']:.2%}<extra></extra>",
                )
            )
    bs = sweep["block_size"]
    fig.update_layout(
        title=f"Prefix cache hit rate against cache size (block size {bs})",
        xaxis_title="cache size (blocks, log scale)",
        yaxis_title="hit tokens / prompt tokens",
        yaxis_tickformat=".0%",
        legend={"orientation": "h", "y": -0.25},
        margin={"t": 50, "l": 60, "r": 20, "b": 40},
    )
    # a log axis labels only the swept sizes, with separators (plotly's own log ticks read "2 5 1000 2 5")
    fig.update_xaxes(type="log", tickvals=sized, ticktext=[f"{s:,}" for s in sized])
    return fig


SKIPPED_HELP = (
    "skipped: requests that could not fit even in an empty cache of this size (the prompt, plus with outputs "
    "every output token but the last, needs more than N - 1 blocks): they count in the prompt tokens, with no hit"
)


def results_table(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """One row per run, numbers with thousands separators (as text, so the table shows them so)."""
    rows = []
    for r in runs:
        row = {
            "policy": POLICY_LABELS.get(r["policy"], r["policy"]),
            "cache blocks": "unbounded" if r["num_blocks"] is None else f"{r['num_blocks']:,}",
            "skipped (too big)": f"{r['skipped']:,}",
            "hit tokens": f"{r['hit_tokens']:,}",
            "hit rate": f"{r['hit_rate']:.2%}",
        }
        sched = r.get("scheduler")
        if sched:
            row.update(
                {
                    "engine steps": f"{sched['steps']:,}",
                    "preemptions": f"{sched['preemptions']:,}",
                    "peak running": f"{sched['peak_running']:,}",
                    "mean queueing (ms)": f"{sched['mean_queueing_ms']:,.1f}",
                    "max queueing (ms)": f"{sched['max_queueing_ms']:,.1f}",
                }
            )
        rows.append(row)
    return rows


def _windowed(hits: Sequence[int], lengths: Sequence[int], window: int) -> list[float]:
    """Hit tokens / prompt tokens over the last ``window`` requests, at every request."""
    out = []
    h_sum = n_sum = 0
    for k in range(len(hits)):
        h_sum += hits[k]
        n_sum += lengths[k]
        if k >= window:
            h_sum -= hits[k - window]
            n_sum -= lengths[k - window]
        out.append(h_sum / n_sum if n_sum else 0.0)
    return out


def hits_over_time(sweep: Mapping[str, Any], num_blocks: int | None = None, window: int = 100) -> go.Figure:
    """The hit rate over a sliding window of requests against arrival time, one line per run
    at cache size ``num_blocks`` (default: the largest swept), plus the unbounded ceiling."""
    results = sweep["results"]
    sizes = sorted({r["num_blocks"] for r in results if r["num_blocks"] is not None})
    if num_blocks is None and sizes:
        num_blocks = sizes[-1]
    ts = [t / 1000.0 for t in sweep["timestamps"]]
    lengths = sweep["prompt_lengths"]
    window = max(1, min(window, len(lengths)))
    fig = go.Figure()
    for r in results:
        if r["num_blocks"] not in (num_blocks, None) or "hits" not in r:
            continue
        dash = "dash" if r["policy"] == "unbounded" else None
        fig.add_trace(
            go.Scatter(
                x=ts,
                y=_windowed(r["hits"], lengths, window),
                mode="lines",
                name=POLICY_LABELS.get(r["policy"], r["policy"]),
                line={"color": POLICY_COLORS.get(r["policy"]), "dash": dash},
                hovertemplate="t=%{x:.1f} s: %{y:.1%}<extra></extra>",
            )
        )
    size_txt = f"{num_blocks:,} blocks" if num_blocks is not None else "unbounded"
    fig.update_layout(
        title=f"Hit rate over the last {window} requests ({size_txt})",
        xaxis_title="arrival time (s)",
        yaxis_title="hit tokens / prompt tokens",
        yaxis_tickformat=".0%",
        legend={"orientation": "h", "y": -0.25},
        margin={"t": 50, "l": 60, "r": 20, "b": 40},
    )
    return fig
