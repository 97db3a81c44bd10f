"""Figures of a trace replay sweep (plotly only, no Streamlit).

Both builders take the dict of `explorer.traffic.sweep.sweep_to_dict(sweep, per_request=True)`:
``{"block_size", "requests", "prompt_tokens", "timestamps", "prompt_lengths", "results":
[{"policy", "num_blocks" (None: unbounded), "skipped", "hit_tokens", "hit_rate", "hits": [per
request]}]}``; the page's grid (`explorer.traffic.worker.grid_job`) adds each result's
``block_size`` and, for a scheduler cell, its figures under ``scheduler`` (they name it).
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


SCHEDULER_COLORS = {"async": "#d62728", "sync": "#9467bd"}  # the scheduler policy, per scheduler
BLOCK_DASHES = ("solid", "dot", "dash", "longdash", "dashdot", "longdashdot")  # per block size, in order


def block_sizes(sweep: Mapping[str, Any]) -> list[int]:
    """The block sizes the sweep's cells ran at (a one-block-size sweep's results may not say)."""
    return sorted({int(r.get("block_size", sweep["block_size"])) for r in sweep["results"]}) or [sweep["block_size"]]


def in_tokens(sweep: Mapping[str, Any]) -> bool:
    """Whether the cache-size axis counts tokens: when block sizes differ, N blocks of 32 hold twice
    what N blocks of 16 hold, so only tokens (num_gpu_blocks x block size: the KV memory the
    cache takes) compare them; one block size keeps vLLM's own unit, num_gpu_blocks."""
    return len(block_sizes(sweep)) > 1


def cache_x(r: Mapping[str, Any], sweep: Mapping[str, Any], tokens: bool) -> int:
    """A sized cell's place on the cache-size axis: blocks, or blocks x block size."""
    return int(r["num_blocks"]) * (int(r.get("block_size", sweep["block_size"])) if tokens else 1)


def scheduler_name(r: Mapping[str, Any]) -> str | None:
    """A scheduler cell's scheduler ("async", "sync"): its figures name it."""
    s = r.get("scheduler")
    return str(s.get("scheduler")) if isinstance(s, Mapping) and s.get("scheduler") else None


def line_label(policy: str, bs: int, sched: str | None, several_bs: bool, several_sched: bool) -> str:
    """A line's legend entry: the policy, then its block size and scheduler when the sweep has several."""
    extra = ([f"block size {bs}"] if several_bs else []) + ([sched] if sched and several_sched else [])
    return POLICY_LABELS.get(policy, policy) + (f", {', '.join(extra)}" if extra else "")


def _axis_unit(tokens: bool) -> str:
    return "tokens" if tokens else "blocks"


def hit_rate_vs_cache_size(sweep: Mapping[str, Any]) -> go.Figure:
    """Hit rate against cache size (log x), one line per policy, block size and scheduler;
    unbounded is a flat line per block size. The x axis is in blocks for one block size, in
    tokens (blocks x block size) when block sizes differ (`in_tokens`)."""
    results = sweep["results"]
    bss = block_sizes(sweep)
    tokens = in_tokens(sweep)
    unit = _axis_unit(tokens)
    scheds = sorted({s for r in results if (s := scheduler_name(r))})
    sized = sorted({cache_x(r, sweep, tokens) for r in results if r["num_blocks"] is not None})
    fig = go.Figure()
    for k, bs in enumerate(bss):
        dash = BLOCK_DASHES[k % len(BLOCK_DASHES)]
        at_bs = [r for r in results if int(r.get("block_size", sweep["block_size"])) == bs]
        for policy in ("vllm", "lru", "scheduler"):
            for sched in scheds if policy == "scheduler" else [None]:
                rows = sorted(
                    (r for r in at_bs if r["policy"] == policy and (sched is None or scheduler_name(r) == sched)),
                    key=lambda r: r["num_blocks"],
                )
                if not rows:
                    continue
                color = SCHEDULER_COLORS.get(sched or "", POLICY_COLORS[policy])
                fig.add_trace(
                    go.Scatter(
                        x=[cache_x(r, sweep, tokens) for r in rows],
                        y=[r["hit_rate"] for r in rows],
                        mode="lines+markers",
                        name=line_label(policy, bs, sched, len(bss) > 1, len(scheds) > 1),
                        line={"color": color, "dash": dash},
                        customdata=[[r["hit_tokens"], r["skipped"], r["num_blocks"], bs] for r in rows],
                        hovertemplate=f"%{{x:,}} {unit} (%{{customdata[2]:,}} blocks of %{{customdata[3]}}): "
                        "%{y:.2%}<br>%{customdata[0]:,} hit tokens, "
                        "%{customdata[1]:,} skipped (too big for the cache)<extra></extra>",
                    )
                )
        for r in at_bs:
            if r["policy"] == "unbounded":
                xs = [sized[0], sized[-1]] if sized else [1, 2]
                fig.add_trace(
                    go.Scatter(
                        x=xs,
                        y=[r["hit_rate"]] * len(xs),
                        mode="lines",
                        name=line_label("unbounded", bs, None, len(bss) > 1, False),
                        line={"color": POLICY_COLORS["unbounded"], "dash": "dash" if len(bss) == 1 else dash},
                        hovertemplate=f"ceiling: {r['hit_rate']:.2%}<extra></extra>",
                    )
                )
    what = f"block size {bss[0]}" if len(bss) == 1 else f"block sizes {', '.join(map(str, bss))}"
    fig.update_layout(
        title=f"Prefix cache hit rate against cache size ({what})",
        xaxis_title=f"cache size ({unit}{', blocks x block size' if tokens else ''}, log scale)",
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
        bs = r.get("block_size")
        row = {
            "policy": POLICY_LABELS.get(r["policy"], r["policy"]),
            "scheduler": scheduler_name(r) or "",
            "block size": "" if bs is None else f"{bs:,}",
            "cache blocks": "unbounded" if r["num_blocks"] is None else f"{r['num_blocks']:,}",
            "cache tokens": "unbounded" if r["num_blocks"] is None or bs is None else f"{r['num_blocks'] * bs:,}",
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
