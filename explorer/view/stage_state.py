"""The stage's state after step k as HTML: the block pool (chips, or a strip of cells for a big
pool), the free queue, the block tables, the metrics, the hash map and the KV event log; and the
presenter's column beside the panels."""

from __future__ import annotations

import json
from collections.abc import Iterable

from markupsafe import Markup

from explorer.core.events import event_to_json
from explorer.metrics.replay import points, promql, recorder_at, step_rates
from explorer.scenario.cli import id_ranges
from explorer.scenario.trace import Snapshot, Trace
from explorer.view.explain import step as explain
from explorer.view.explain.refs import REFS, Ref
from explorer.view.explain.words import counted
from explorer.view.html import caption_html, columns, details, heading_html, pre, trusted
from explorer.viz.chips import grid_mode, legend_html, snap_chip
from explorer.viz.groups_html import group_tables_html, pool_by_group_html
from explorer.viz.metrics_svg import by_source_svg, rates_svg
from explorer.viz.palette import CHANGED, STATES, block_letter, block_state
from explorer.viz.state_html import (
    event_log_html,
    free_queue_html,
    hash_map_html,
    hit_rate_svg,
    pool_grid_html,
    pool_summary_html,
    requests_html,
    stats_html,
    svg_img,
)

STRIP_COLUMNS = 100  # blocks a row of the strip
HISTORY_SLOT = Markup('<div class="px-history-slot" data-px-history-slot="1"></div>')  # the browser fills it


def _refs(refs: Iterable[Ref]) -> Markup:
    return Markup(" ").join(
        Markup("<span class='px-ref'>{} <span class='px-loc'>{}</span></span>").format(r.func, r.loc) for r in refs
    )


def strip_svg(snap: Snapshot, changed: set[int]) -> Markup:
    """One cell per block, 100 a row, coloured by state; the blocks this step changed outlined.
    Each cell names its block (``data-px-block``), so a click opens its history."""
    cell = 9
    n = len(snap.blocks)
    rows = (n + STRIP_COLUMNS - 1) // STRIP_COLUMNS
    rects = []
    for i, (rc, h) in enumerate(snap.blocks):
        r, c = divmod(i, STRIP_COLUMNS)
        fill = STATES[block_state(i, rc, h)][0]
        edge = f' stroke="{CHANGED}" stroke-width="2"' if i in changed else ""
        tip = f"block {i}: {block_letter(i, rc)}, ref_cnt {rc}" + (f", hash {h.hex()[:8]}" if h else "")
        rects.append(
            f'<rect data-px-block="{i}" x="{c * cell}" y="{r * cell}" width="{cell - 1}" height="{cell - 1}" '
            f'fill="{fill}"{edge}><title>{tip}</title></rect>'
        )
    width, height = STRIP_COLUMNS * cell, rows * cell
    return Markup(
        '<svg class="px-strip" role="img" aria-label="the block pool, one cell per block" viewBox="0 0 {} {}" '
        'width="100%" preserveAspectRatio="xMinYMin meet">{}</svg>'
    ).format(width, height, Markup("".join(rects)))  # the cells hold numbers and hex digits only


def pool_html(trace: Trace, k: int, changed: set[int]) -> list[Markup]:
    snap = trace.snapshot_at(k)
    n = len(snap.blocks)
    head = heading_html("pool", f"Block pool after step {k}" if k else "Block pool before step 1")
    out = [head + trusted(legend_html()) + trusted(pool_summary_html(snap))]
    if grid_mode(n) == "strip":
        body = strip_svg(snap, changed) + caption_html(
            "One cell per block, 100 blocks a row, coloured by state; an outlined cell marks a block this step "
            "changed. Hover for id, ref_cnt and hash; click a block (or type its id below) for its history."
        )
        if changed:
            ids = sorted(changed)
            chips = "".join(snap_chip(snap, b, changed, None, "full") for b in ids) if len(ids) <= 60 else ""
            label = Markup(
                '<div class="px-row" data-px-changed="{}"><span class="px-rowlabel">changed by this step ({} blocks):</span>'
            ).format(len(ids), f"{len(ids):,}")
            body += label + (trusted(chips) if chips else Markup("<code>{}</code>").format(id_ranges(ids)[1:-1]))
            body += Markup("</div>")
        out.append(body)
    else:
        out.append(trusted(pool_grid_html(snap, changed, None)))
    return out


def state_views(trace: Trace, k: int, changed: set[int], window: int) -> list[Markup]:
    """Everything after the panels, top to bottom; the block history's slot after the pool."""
    snap = trace.snapshot_at(k)
    prev = trace.snapshot_at(k - 1) if k > 0 else None
    step = trace.steps[k - 1] if k > 0 else None
    out = pool_html(trace, k, changed)
    out.append(HISTORY_SLOT)
    out.append(
        heading_html("free-queue", "Free queue")
        + caption_html(
            f"{snap.num_free_blocks:,} free blocks. get_new_blocks pops from the head; free_blocks puts unhashed "
            "blocks at the head and hashed ones at the tail."
        )
        + trusted(free_queue_html(snap, changed, None))
    )
    groups = trace.scenario.groups
    if groups is not None:
        out.append(
            heading_html("groups", "Block tables by KV cache group")
            + caption_html(
                "One row per group. A window group's blocks left of its window are the null block (block 0): "
                "they hold nothing a later token attends."
            )
            + trusted(group_tables_html(snap, groups.groups))
            + details("The pool coloured by group", pool_by_group_html(snap, groups.groups))
        )
    requests = heading_html("requests", "Requests and their block tables") + trusted(requests_html(snap, changed, None))
    out.append(columns((3, 2), requests, metrics_html(trace, k)))
    if trace.scenario.sched is not None:
        out.append(exported_metrics_html(trace, k, window))
    hash_map = (
        heading_html("hash-map", "Hash map")
        + caption_html(
            f"{len(snap.cached):,} hashes cached. One hash may map to several blocks: vLLM keeps duplicates."
        )
        + trusted(hash_map_html(snap, step, prev, None, int_hashes=trace.scenario.engine.int_block_hashes))
    )
    events = heading_html("events", "KV event log") + trusted(event_log_html(trace, k))
    if step is not None and step.events:
        evs = [event_to_json(e) for e in step.events[:20]]
        for e in evs:
            if isinstance(e.get("token_ids"), list) and len(e["token_ids"]) > 32:
                e["token_ids"] = e["token_ids"][:16] + [f"... {len(e['token_ids'])} in all"]
        events += details(
            f"This step's {len(step.events)} event(s) as vLLM's msgpack decodes them",
            pre(json.dumps(evs, indent=1, ensure_ascii=False, default=str)),
        )
    out.append(columns((1, 1), hash_map, events))
    return out


def metrics_html(trace: Trace, k: int) -> Markup:
    """The prefix-cache metrics after step k, the sentence that reads them and the hit-rate chart."""
    snap = trace.snapshot_at(k)
    prev = trace.snapshot_at(k - 1) if k > 0 else snap
    s = snap.stats
    sentence = (
        explain.metrics_sentence(trace, k)
        + f" Preempted: {counted(s['preempted_requests'], 'request')}, {s['preempted_hits']:,} of "
        f"{s['preempted_queries']:,} tokens hit."
    )
    refs = (REFS["record_stats"], REFS["prefix_cache_stats"], REFS["caching_metrics"])
    return (
        heading_html("metrics", "Metrics")
        + trusted(stats_html(snap, prev))
        + caption_html(sentence)
        + Markup('<div class="px-refs">{}</div>').format(_refs(refs))
        + trusted(svg_img(hit_rate_svg(trace, k), f"Hit rate after each step, total and windowed; step {k} marked."))
    )


def _pct(rate: float | None) -> str:
    return "none" if rate is None else f"{rate:.1%}"


def exported_metrics_html(trace: Trace, k: int, window: int) -> Markup:
    """What vLLM's stat loggers export after step k (engine-step scenarios): the three hit rates
    users confuse, both charts, the log line, the PromQL and the exposition text."""
    pts = points(trace)
    p = pts[k - 1] if k > 0 else None
    windowed = step_rates(pts, window)[k - 1] if k > 0 else None
    cells = (
        ("Counters: hits / queries", _pct(p.total_rate if p else None)),
        ("Log line: Prefix cache hit rate", _pct(p.window_rate if p else None)),
        (f"PromQL rate, last {window} steps", _pct(windowed)),
    )
    out = heading_html("exported-metrics", "Exported metrics, as vLLM's /metrics and log line show them")
    out += Markup('<div class="px-metric-row">{}</div>').format(
        Markup("").join(
            Markup(
                '<div class="px-metric"><div class="px-metric-label">{}</div><div class="px-metric-value">{}</div></div>'
            ).format(label, value)
            for label, value in cells
        )
    )
    if p is not None:
        out += Markup(
            '<div class="px-metrics-now" data-px-metrics="{}">queries {} · hits {} · external queries {} · external hits {} · '
            "preemptions {} · KV cache usage {} · running {} · waiting {}</div>"
        ).format(
            k, f"{p.queries:,}", f"{p.hits:,}", f"{p.external_queries:,}", f"{p.external_hits:,}",
            f"{p.preemptions:,}", f"{p.kv_cache_usage:.1%}", p.running, p.waiting,
        )  # fmt: skip
    out += trusted(rates_svg(pts, k, window) + by_source_svg(pts, k))
    rec = recorder_at(trace, k)
    line = rec.log()
    out += Markup("<p><b>The log line</b> for steps 1 to k as one logging interval (one second per step):</p>")
    out += pre("\n".join(f"{line.level} {t}" for t in line.lines), "px-code")
    if rec.cached_by_source is not None:
        out += Markup(
            '<p class="px-cached-by-source"><b>vLLM {}: prompt tokens cached by source</b> '
            "(<code>vllm:prompt_tokens_cached_by_source</code>, at admission): {}</p>"
        ).format(rec.release.version, " · ".join(f"{src} {n:,}" for src, n in rec.cached_by_source.items()))
    out += Markup("<p><b>PromQL</b> for Grafana (the ratios of rates over one range):</p>")
    out += pre("\n".join(promql("5m")), "px-code")
    out += details(
        f"The exposition after step {k} (vllm:* families as /metrics serves them)", pre(rec.exposition(), "px-code")
    )
    return out + caption_html(
        "Preempted re-admissions count in preempted_* stats, which no logger exports; the external "
        "ratio's denominator is the tokens after the local hit."
    )
