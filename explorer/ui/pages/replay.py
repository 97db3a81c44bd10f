"""Page: replay a request trace and see what cache size and eviction policy do to the hit rate.

The sweep takes its turn among the server's heavy actions (one at a time; a waiting session
reads "Waiting for N others to finish", `explorer.ui.replay_job`), then runs in a worker
process, so other browser sessions stay responsive on a small machine, and Cancel terminates it. The worker runs the grid as `explorer sweep` does
(`explorer.traffic.ray_sweep`): a local Ray instance (or the cluster named by
``EXPLORER_RAY_ADDRESS`` when the server was started with it), the trace hashed once and shared,
one task per cell on every core, progress counted in finished cells. The worker is a fresh interpreter (``python -m
explorer.traffic.worker``: one JSON job on stdin, JSON lines back; started and stopped by
`explorer.ui.replay_worker`), not a multiprocessing spawn: spawn re-runs the parent's
``__main__``, which under Streamlit is the app script itself. A thread per job reads the
worker's lines into a queue; the page polls it once a second (a fragment rerun costs the server
about a tenth of a core while someone watches a job), and the thread terminates a worker whose
browser session has gone away. Everything this page keeps lives in st.session_state under
keys starting with ``replay_``: one job per browser session.
"""

from __future__ import annotations

import time
from typing import Any

import streamlit as st

from explorer.errors import BadInput
from explorer.traffic.scheduled import MAX_BATCHED_TOKENS, SCHEDULERS
from explorer.traffic.sweep import POLICIES, SEQUENTIAL
from explorer.traffic.trace import UI_MAX_TRACE_BYTES
from explorer.ui import kept
from explorer.ui.heavy import WAIT_ICON, waiting_text
from explorer.ui.replay_grid import UI_MAX_CELLS, build_job, cut
from explorer.ui.replay_job import ERROR, JOB, NOTICE, RESULT, WHAT, advance, cancel, poll_job, queue_job, running
from explorer.ui.text import caption, error, info, md
from explorer.viz.replay import (
    POLICY_LABELS,
    SKIPPED_HELP,
    block_sizes,
    hit_rate_vs_cache_size,
    hits_over_time,
    in_tokens,
    results_table,
    scheduler_name,
)
from explorer.viz.replay_bounds import (
    add_bounds,
    largest_reason_line,
    miss_reasons_by_size,
    reason_shares,
    reasons_policy,
)

SHIPPED = "Mooncake synthetic trace (shipped)"
UPLOAD = "Upload a trace"

INTRO = """
Real traffic through the faithful engine. Each line of a trace in Mooncake's format
(`timestamp`, `input_length`, `output_length`, `hash_ids`) becomes a request: token *j* of
trace block *i* is `hash_ids[i] * 512 + j`. By default requests run one at a time, in file
order, through vLLM's own admission path (lookup, `allocate_slots`, stats) with the sha256
block hasher, so the hit tokens are exactly vLLM's. **scheduler** replays the trace
concurrently through vLLM's scheduler loop, mirrored (checked against vLLM's own): requests
arrive at their timestamps, one engine step per 20 ms of trace time, and each generates its
output_length tokens. **lru** and **unbounded** are small simulators over the same block hashes,
*not* vLLM: plain least-recently-used eviction in token order, and a cache that never evicts
(the ceiling). Every block size, policy and cache size (and, for the scheduler, each scheduler
picked) is one cell; the cells run in parallel on Ray, as `python -m explorer sweep` runs them,
with the trace hashed once per block size: on a local instance, or on the cluster this server was
started with (`EXPLORER_RAY_ADDRESS`).
"""


def _state() -> Any:
    return st.session_state


POLL_S = 1.0  # how often a watching page polls its job (a Streamlit rerun of one fragment)


@st.fragment(run_every=POLL_S)
def _progress_panel() -> None:
    if not running():  # cancelled by the button below, or ended: redraw the whole page
        st.rerun(scope="app")
    ahead = advance()
    if not running():  # the worker did not start
        st.rerun(scope="app")
    job = _state().get(JOB)
    if ahead:
        st.info(waiting_text(ahead, WHAT), icon=WAIT_ICON)
    elif job is None:
        st.progress(0.0, text="starting the worker")
    else:
        if poll_job():
            st.rerun(scope="app")
        elapsed = time.time() - job["started"]
        st.progress(min(max(job["frac"], 0.0), 1.0), text=md(f"{job['text']} ({elapsed:.0f} s)", 300, inline=True))
    st.button("Cancel", key="replay_cancel", on_click=cancel)


def _where(backend: str | None) -> str:
    """Where the cells ran, as the sweep's result names it ("local" or "ray://HOST:PORT")."""
    if not backend:
        return ""
    return "; on a local Ray instance" if backend == "local" else f"; on the Ray cluster at {backend}"


def _results(res: dict[str, Any]) -> None:
    runs = res["results"]
    bss = block_sizes(res)
    what = f"block size {bss[0]}" if len(bss) == 1 else f"block sizes {', '.join(map(str, bss))}"
    caption(
        f"{res['requests']:,} requests, {res['prompt_tokens']:,} prompt tokens, {what}, {len(runs):,} cell{'' if len(runs) == 1 else 's'}"
        + (", with outputs" if res["outputs"] else "")
        + f"; replayed at {res['tokens_per_s']:,.0f} prompt tokens/s ({res['hash_seconds']:.1f} s hashing, once"
        + (" per block size)" if len(bss) > 1 else ")")
        + _where(res.get("backend"))
    )
    st.plotly_chart(add_bounds(hit_rate_vs_cache_size(res), res), key="replay_fig_size")
    if in_tokens(res):
        caption(
            "Cache size in tokens (blocks x block size): N blocks of 32 tokens hold as much KV as 2N blocks of 16, "
            "so only tokens, the memory a cache takes, compare block sizes. Each line is one policy at one "
            "block size" + (" and scheduler" if len(res.get("schedulers") or []) > 1 else "") + "."
        )
    one = _pick_one(res, bss)
    _reasons(one)
    sizes = sorted({r["num_blocks"] for r in one["results"] if r["num_blocks"] is not None})
    chosen = None
    if len(sizes) > 1:
        chosen = st.selectbox(
            "Cache size for the time plot",
            sizes,
            index=len(sizes) - 1,
            format_func=lambda s: f"{s:,} blocks",
            key="replay_time_size",
        )
    window = min(100, max(1, res["requests"] // 10 or 1))
    st.plotly_chart(hits_over_time(one, chosen, window), key="replay_fig_time")
    st.dataframe(results_table(runs), hide_index=True)
    caption(SKIPPED_HELP[0].upper() + SKIPPED_HELP[1:] + ".")


def _pick_one(res: dict[str, Any], bss: list[int]) -> dict[str, Any]:
    """The block size (and scheduler) the missed-tokens part and the time plot show: they draw
    one at a time, so with several a selectbox picks it."""
    bs = bss[0]
    scheds = sorted({s for r in res["results"] if (s := scheduler_name(r))})
    if len(bss) == 1 and len(scheds) < 2:
        return cut(res, bs, None)
    c1, c2 = st.columns(2)
    if len(bss) > 1:
        bs = c1.selectbox(
            "Block size for the missed tokens and the time plot", bss, format_func=str, key="replay_show_bs"
        )
    sched = None
    if len(scheds) > 1:
        sched = c2.selectbox("Scheduler for the missed tokens and the time plot", scheds, key="replay_show_sched")
    return cut(res, int(bs), sched)


def _reasons(res: dict[str, Any]) -> None:
    """Why the engine's replay missed at each size (design section 14), and its largest reason."""
    policy = reasons_policy(res)
    if policy is None:
        return
    with st.container(key="replay_why"):
        st.markdown(md(largest_reason_line(res, policy)))
        st.plotly_chart(miss_reasons_by_size(res, policy), key="replay_fig_reasons")
        with st.expander("Each reason's share of the missed tokens, per cache size"):
            st.dataframe(reason_shares([r for r in res["results"] if r["policy"] == policy]), hide_index=True)


RULES = """
- **Cache size** is vLLM's `num_gpu_blocks`: block 0 is the null block, so *N* blocks hold
  *N - 1* blocks of KV. A request that could not fit even in an empty cache (its prompt, plus
  with outputs every output token but the last, over *N - 1* blocks) is skipped: it still
  counts in the prompt tokens, with no hit.
- **Block sizes**: with several, the chart's cache size is in tokens (*N* blocks x block size,
  the KV memory the cache takes): *N* blocks of 32 tokens hold as much as *2N* blocks of 16, so
  blocks would not compare them. The table gives both.
- **Hit rate** is hit tokens / prompt tokens over every request. A lookup never covers a
  prompt's last token (the model must compute at least one), so a fully cached prompt
  recomputes its last block.
- **vLLM free-queue order**: a finished request's blocks return to the free queue tail first,
  so the tail of its prompt is evicted before its head, and a shared system prompt survives
  longest. **Plain LRU** evicts in token order instead: the head of a chain goes first.
- **vLLM's scheduler**: requests arrive at their timestamps and the engine steps every 20 ms of
  trace time (async: AsyncScheduler, vLLM's default; sync: Scheduler), spending its token budget
  on running requests first, then admitting waiting ones first come, first served, chunking long
  prompts and preempting when blocks run out. Each request generates output_length tokens of 0
  (always, whatever "Generate outputs" says) and holds its blocks until it finishes; others can
  hit them meanwhile. Its hit is what vLLM reports per request (num_cached_tokens).
- **Bounds**: beside vLLM, *Belady's MIN* is the hit an eviction policy that knew the future
  would get with the same number of blocks (one request at a time, every block hash referenced
  in order, the resident hash used farthest in the future evicted), and the *infinite cache*
  one that never evicts. Neither is vLLM; vLLM's hit lies at or under both.
- **Missed tokens by reason**: each lookup's missed tokens, sorted by the first rule that holds:
  never seen before (no cache size helps), evicted (a bigger cache would keep them), the
  partial block or the last full block a lookup never covers, a request too big for the cache
  (skipped), and with the scheduler a prefix still being computed by another running request.
- The shipped trace is Mooncake's synthetic trace (3,993 requests, 61M prompt tokens); its
  whole replay at block size 16 takes minutes, so start with a few hundred requests.
"""


KEPT = "replay_kept"  # the settings across a visit to another page (explorer.ui.kept)
KEPT_KEYS = tuple(
    f"replay_{k}" for k in ("source", "block_sizes", "limit", "sizes", "policies", "outputs", "schedulers", "budget")
)


def render() -> None:
    kept.restore(KEPT)  # the settings of the result shown, not the defaults
    try:
        _render()
    finally:
        kept.keep(KEPT, KEPT_KEYS)


def _render() -> None:
    st.header("Replay a trace: cache size and eviction policy")
    st.markdown(INTRO)
    with st.expander("How the replay works"):
        st.markdown(RULES)
    busy = running()

    source = st.radio("Trace", [SHIPPED, UPLOAD], key="replay_source", horizontal=True, disabled=busy)
    upload = None
    if source == UPLOAD:
        upload = st.file_uploader(
            f"Trace file (JSON lines, at most {UI_MAX_TRACE_BYTES >> 20} MiB)",
            type=["jsonl", "json", "txt"],
            key="replay_upload",
            disabled=busy,
        )
    c1, c2, c3 = st.columns(3)
    block_sizes_text = c1.text_input(
        "Block sizes (tokens)",
        value="16",
        key="replay_block_sizes",
        disabled=busy,
        help=f"Comma-separated, e.g. 16, 32, 64: every block size with every cache size and policy "
        f"(at most {UI_MAX_CELLS} cells). The trace is hashed once per block size.",
    )
    limit = c2.number_input(
        "Requests to replay (0 = all)",
        min_value=0,
        value=500,
        step=100,
        key="replay_limit",
        disabled=busy,
        help="The first N lines. The whole shipped trace takes minutes at block size 16.",
    )
    sizes_text = c3.text_input(
        "Cache sizes (blocks)",
        value="1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000",
        key="replay_sizes",
        disabled=busy,
        help="Comma-separated; block 0 is the null block.",
    )
    policies = st.multiselect(
        "Policies",
        list(POLICIES),
        default=list(SEQUENTIAL),
        key="replay_policies",
        format_func=lambda p: POLICY_LABELS[p],
        disabled=busy,
    )
    c4, c5, c6 = st.columns(3)
    outputs = c4.checkbox(
        "Generate outputs",
        key="replay_outputs",
        disabled=busy,
        help="Each request also decodes output_length tokens of 0, holding more blocks.",
    )
    no_sched = busy or "scheduler" not in policies
    schedulers = c5.multiselect(
        "Schedulers",
        list(SCHEDULERS),
        default=["async"],
        key="replay_schedulers",
        disabled=no_sched,
        help="async: AsyncScheduler (vLLM's default); sync: Scheduler. Both: each cache size runs under each.",
    )
    budget = c6.number_input(
        "Token budget per step (max_num_batched_tokens)",
        min_value=64,
        max_value=MAX_BATCHED_TOKENS,
        value=2048,
        step=256,
        key="replay_budget",
        disabled=no_sched,
    )

    if not busy:
        if st.button("Run replay", type="primary", key="replay_run"):
            try:
                job = build_job(
                    source == UPLOAD,
                    upload,
                    str(block_sizes_text),
                    sizes_text,
                    int(limit),
                    list(policies),
                    bool(outputs),
                    [str(x) for x in schedulers],
                    int(budget),
                )
            except BadInput as e:
                _state()[ERROR] = str(e)
                _state().pop(RESULT, None)
            else:
                queue_job(job)
                st.rerun()
    else:
        _progress_panel()

    if _state().get(NOTICE):
        info(_state()[NOTICE])
    if _state().get(ERROR):
        error(_state()[ERROR])
    if _state().get(RESULT) is not None and not busy:
        _results(_state()[RESULT])


# Streamlit runs a page file as __main__; importing it (a test calling render()) draws nothing.
if __name__ == "__main__":
    render()
