"""The explorer page's metrics panel for an engine-step scenario (design section 11): what
vLLM's stat loggers export after step k, recorded from the replay (explorer/metrics/).

Side by side and on one plot, the three numbers users confuse: the counters' total hit rate,
the log line's window and a PromQL-style rate over the last N steps (N adjustable); then
prompt tokens by source as stacked bars (both charts up to step k), the log line, the PromQL to paste into Grafana and
the exposition text of step k (st.code has a copy button)."""

from __future__ import annotations

import streamlit as st

from explorer.metrics.replay import points, promql, recorder_at, step_rates
from explorer.scenario.trace import Trace
from explorer.ui.html_block import html_block
from explorer.ui.text import esc
from explorer.viz.metrics_svg import by_source_svg, rates_svg

W_WINDOW = "px_metrics_window"
MAX_WINDOW = 1000


def _pct(rate: float | None) -> str:
    return "none" if rate is None else f"{rate:.1%}"


def metrics_panel(trace: Trace, k: int) -> None:
    if trace.scenario.sched is None:
        return
    pts = points(trace)
    st.subheader("Exported metrics, as vLLM's /metrics and log line show them", anchor="exported-metrics")
    n = int(
        st.number_input(
            "PromQL window: the last N steps (one scrape per step)",
            min_value=1,
            max_value=MAX_WINDOW,
            value=5,
            step=1,
            key=W_WINDOW,
        )
    )
    p = pts[k - 1] if k > 0 else None
    windowed = step_rates(pts, n)[k - 1] if k > 0 else None
    c = st.columns(3)
    c[0].metric(
        "Counters: hits / queries",
        _pct(p.total_rate if p else None),
        help="vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total: since the engine started.",
    )
    c[1].metric(
        "Log line: Prefix cache hit rate",
        _pct(p.window_rate if p else None),
        help="LoggingStatLogger's window over about the last 1,000 requests; a reset empties it.",
    )
    c[2].metric(
        f"PromQL rate, last {n} steps",
        _pct(windowed),
        help="sum(rate(hits[w])) / sum(rate(queries[w])): the hits added over the queries added in the range.",
    )
    now = ""
    if p is not None:
        now = (
            f'<div class="px-metrics-now" data-px-metrics="{k}">'
            f"queries {p.queries:,} · hits {p.hits:,} · external queries {p.external_queries:,} · "
            f"external hits {p.external_hits:,} · preemptions {p.preemptions:,} · "
            f"KV cache usage {p.kv_cache_usage:.1%} · running {p.running} · waiting {p.waiting}</div>"
        )
    html_block(now + rates_svg(pts, k, n) + by_source_svg(pts, k), "px_html_metrics_now")
    rec = recorder_at(trace, k)
    line = rec.log()
    st.markdown("**The log line** for steps 1 to k as one logging interval (one second per step):")
    st.code("\n".join(f"{line.level} {text}" for text in line.lines), language=None, wrap_lines=True)
    st.markdown("**PromQL** for Grafana (the ratios of rates over one range):")
    st.code("\n".join(promql("5m")), language="promql", wrap_lines=True)
    with st.expander(f"The exposition after step {k} (vllm:* families as /metrics serves them)"):
        st.code(rec.exposition(), language=None)
    st.caption(
        esc(
            "Preempted re-admissions count in preempted_* stats, which no logger exports; the external "
            "ratio's denominator is the tokens after the local hit."
        )
    )
