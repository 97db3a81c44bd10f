"""A trace replay beside its bounds (design section 14), plotly only: Belady's MIN and the
infinite cache added to the hit-rate-vs-size chart, the missed tokens by reason as stacked bars
per size, and the one sentence that names the largest reason.

Every number is what the replay reported per cell (`miss_tokens`, `bound_belady`,
`bound_infinite` of `explorer.traffic.ray_sweep.cell_result`); nothing is recomputed here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from explorer.miss.reasons import REASONS
from explorer.miss.sentence import REASON_LABELS, largest_reason_sentence
from explorer.viz.palette import REASON_STYLES
from explorer.viz.replay import block_sizes, cache_x, in_tokens

ENGINE_POLICIES = ("vllm", "scheduler")  # the policies that replay vLLM and carry the reasons
ENGINE_NAMES = {"vllm": "vLLM free-queue order", "scheduler": "vLLM's scheduler"}
BELADY_COLOR = "#7F7F7F"
INFINITE_COLOR = "#2ca02c"


def _rows(sweep: Mapping[str, Any], policy: str) -> list[Mapping[str, Any]]:
    return sorted(
        (r for r in sweep["results"] if r["policy"] == policy and r["num_blocks"] is not None),
        key=lambda r: r["num_blocks"],
    )


def reasons_policy(sweep: Mapping[str, Any]) -> str | None:
    """The engine policy whose reasons the page draws: vLLM's sequential replay, else the scheduler's."""
    for p in ENGINE_POLICIES:
        if any("miss_tokens" in r for r in _rows(sweep, p)):
            return p
    return None


def add_bounds(fig: go.Figure, sweep: Mapping[str, Any]) -> go.Figure:
    """Belady's MIN and the infinite cache as hit rates on the sizes the engine replayed, one
    pair of lines per block size (the bounds depend on the block size, not on the scheduler),
    on the chart's own cache-size axis (`explorer.viz.replay.in_tokens`)."""
    total = sweep["prompt_tokens"] or 1
    bss = block_sizes(sweep)
    tokens = in_tokens(sweep)
    unit = "tokens" if tokens else "blocks"
    for bs in bss:
        at_bs = {**sweep, "results": [r for r in sweep["results"] if r.get("block_size", sweep["block_size"]) == bs]}
        rows = next(
            (rows for p in ENGINE_POLICIES if (rows := [r for r in _rows(at_bs, p) if "bound_belady" in r])), []
        )
        by_size = {r["num_blocks"]: r for r in rows}  # one per size (both schedulers carry the same bounds)
        rows = [by_size[n] for n in sorted(by_size)]
        if not rows:
            continue
        xs = [cache_x(r, sweep, tokens) for r in rows]
        at = f", block size {bs}" if len(bss) > 1 else ""
        for name, key, color, dash in (
            ("Belady's MIN (an eviction that knows the future; bound, not vLLM)", "bound_belady", BELADY_COLOR, "dot"),
            ("infinite cache (never evicts; bound, not vLLM)", "bound_infinite", INFINITE_COLOR, "dashdot"),
        ):
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=[r[key] / total for r in rows],
                    mode="lines+markers",
                    name=name + at,
                    line={"color": color, "dash": dash},
                    customdata=[r[key] for r in rows],
                    hovertemplate=f"%{{x:,}} {unit}: " + "%{y:.2%}<br>%{customdata:,} hit tokens<extra></extra>",
                    meta=key if len(bss) == 1 else f"{key}@{bs}",
                )
            )
    return fig


def miss_reasons_by_size(sweep: Mapping[str, Any], policy: str) -> go.Figure:
    """The missed tokens of ``policy`` at each size, one stacked bar segment per reason."""
    rows = [r for r in _rows(sweep, policy) if "miss_tokens" in r]
    labels = [f"{r['num_blocks']:,}" for r in rows]
    fig = go.Figure()
    for reason in REASONS:
        ys = [int(r["miss_tokens"].get(reason, 0)) for r in rows]
        if not any(ys):
            continue
        fig.add_trace(
            go.Bar(
                x=labels,
                y=ys,
                name=REASON_LABELS[reason],
                marker={"color": REASON_STYLES[reason][0]},
                hovertemplate=f"{reason}: " + "%{y:,} missed tokens at %{x} blocks<extra></extra>",
                meta=reason,
            )
        )
    fig.update_layout(
        barmode="stack",
        title=f"Missed tokens by reason at each cache size ({ENGINE_NAMES[policy]}, block size {sweep['block_size']})",
        xaxis_title="cache size (blocks)",
        xaxis_type="category",
        yaxis_title="missed prompt tokens",
        legend={"orientation": "h", "y": -0.25},
        margin={"t": 50, "l": 60, "r": 20, "b": 40},
    )
    return fig


def largest_reason_line(sweep: Mapping[str, Any], policy: str) -> str:
    """The one sentence: the largest reason at the largest cache size swept."""
    rows = [r for r in _rows(sweep, policy) if "miss_tokens" in r]
    if not rows:
        return ""
    last = rows[-1]
    return f"At {last['num_blocks']:,} blocks, {largest_reason_sentence(dict(last['miss_tokens']))}."


def reason_shares(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """A table: each size's share of missed tokens per reason (what the closing note quotes)."""
    out = []
    for r in rows:
        tokens = r.get("miss_tokens") or {}
        total = sum(tokens.values())
        row = {"cache size (blocks)": f"{r['num_blocks']:,}", "missed tokens": f"{total:,}"}
        for reason in REASONS:
            if tokens.get(reason):
                row[reason] = f"{tokens[reason] / total:.1%}"
        out.append(row)
    return out
