"""Page: replay a request trace and see what cache size and eviction policy do to the hit rate.

The sweep runs in a worker process, so other browser sessions stay responsive on a small
machine, and Cancel terminates it. The worker is a fresh interpreter (``python -m
explorer.traffic.worker``: one JSON job on stdin, JSON lines back; started and stopped by
`explorer.ui.replay_worker`), not a multiprocessing spawn: spawn re-runs the parent's
``__main__``, which under Streamlit is the app script itself. A thread per job reads the
worker's lines into a queue; the page polls it once a second (a fragment rerun costs the server
about a tenth of a core while someone watches a job), and the thread terminates a worker whose
browser session has gone away. Everything this page keeps lives in st.session_state under
keys starting with ``replay_``: one job per browser session.
"""

from __future__ import annotations

import base64
import queue as queue_mod
import time
from typing import Any

import streamlit as st

from explorer.errors import BadInput
from explorer.traffic.results import UI_MAX_NUM_BLOCKS
from explorer.traffic.scheduled import MAX_BATCHED_TOKENS, SCHEDULERS
from explorer.traffic.sweep import POLICIES, SEQUENTIAL, UI_MAX_BLOCKS_HASHED, parse_sizes
from explorer.traffic.trace import UI_MAX_TRACE_BYTES, parse_trace_bytes, shipped_trace_path
from explorer.ui import kept
from explorer.ui.replay_worker import start_worker, stop_worker
from explorer.ui.text import caption, error, info, md
from explorer.viz.replay import (
    POLICY_LABELS,
    SKIPPED_HELP,
    hit_rate_vs_cache_size,
    hits_over_time,
    results_table,
)

SHIPPED = "Mooncake synthetic trace (shipped)"
UPLOAD = "Upload a trace"
JOB = "replay_job"
RESULT = "replay_result"
ERROR = "replay_error"
NOTICE = "replay_notice"

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
(the ceiling).
"""


def _state() -> Any:
    return st.session_state


POLL_S = 1.0  # how often a watching page polls its job (a Streamlit rerun of one fragment)


def _start_job(job: dict[str, Any]) -> None:
    _state()[JOB] = {**start_worker(job), "frac": 0.0, "text": "starting the worker", "started": time.time()}
    _state().pop(RESULT, None)
    _state().pop(ERROR, None)
    _state().pop(NOTICE, None)


def _stop_job(terminate: bool) -> str:
    """Forget the job (terminating its worker when asked); the tail of its stderr."""
    job = _state().pop(JOB, None)
    if job is None:
        return ""
    return stop_worker(job, terminate)


def _poll_job() -> bool:
    """Drain the worker's messages; True when the job ended (result, error or death)."""
    job = _state().get(JOB)
    if job is None:
        return True
    q: queue_mod.Queue = job["queue"]
    while True:
        try:
            msg = q.get_nowait()
        except queue_mod.Empty:
            return False
        if msg is None:  # the worker's output ended without a result
            code = job["proc"].poll()
            tail = _stop_job(terminate=True)
            last = tail.splitlines()[-1] if tail else ""
            _state()[ERROR] = f"the replay worker stopped unexpectedly (exit code {code}). {last}".strip()
            return True
        if "progress" in msg:
            job["frac"], job["text"] = float(msg["progress"]), str(msg.get("text", ""))
        elif "result" in msg:
            _state()[RESULT] = msg["result"]
            _stop_job(terminate=False)
            return True
        elif "error" in msg:
            _state()[ERROR] = str(msg["error"])
            _stop_job(terminate=False)
            return True


def _cancel() -> None:
    _stop_job(terminate=True)
    _state()[NOTICE] = "Replay cancelled."


def _build_job(
    source: str,
    upload: Any,
    block_size: int,
    sizes_text: str,
    limit: int,
    policies: list[str],
    outputs: bool,
    scheduler: str,
    max_num_batched_tokens: int,
) -> dict[str, Any]:
    """Check the inputs (BadInput on anything wrong) and describe the worker's job."""
    sizes = parse_sizes(sizes_text)
    if max(sizes) > UI_MAX_NUM_BLOCKS:
        raise BadInput(f"cache sizes: {max(sizes):,} blocks is more than this page's limit of {UI_MAX_NUM_BLOCKS:,}")
    if not policies:
        raise BadInput("pick at least one policy")
    lim = int(limit) or None
    job: dict[str, Any] = {
        "limit": lim,
        "max_bytes": UI_MAX_TRACE_BYTES,
        "block_size": int(block_size),
        "sizes": sizes,
        "policies": policies,
        "outputs": outputs,
        "scheduler": scheduler,
        "max_num_batched_tokens": int(max_num_batched_tokens),
        "max_num_blocks": UI_MAX_NUM_BLOCKS,
        "max_blocks_hashed": UI_MAX_BLOCKS_HASHED,
    }
    if source == UPLOAD:
        if upload is None:
            raise BadInput("upload a trace first (JSON lines in Mooncake's format)")
        if upload.size > UI_MAX_TRACE_BYTES:
            raise BadInput(f"{upload.name}: {upload.size:,} bytes is more than the {UI_MAX_TRACE_BYTES:,}-byte limit")
        data = upload.getvalue()
        parse_trace_bytes(data, upload.name, lim, UI_MAX_TRACE_BYTES)  # bad input shows at once
        job.update(trace_b64=base64.b64encode(data).decode("ascii"), source=upload.name)
    else:
        job.update(trace_path=str(shipped_trace_path()), source=shipped_trace_path().name)
    return job


@st.fragment(run_every=POLL_S)
def _progress_panel() -> None:
    job = _state().get(JOB)
    if job is None:  # cancelled by the button below: redraw the whole page
        st.rerun(scope="app")
    if _poll_job():
        st.rerun(scope="app")
    job = _state().get(JOB)
    if job is None:
        return
    elapsed = time.time() - job["started"]
    st.progress(min(max(job["frac"], 0.0), 1.0), text=md(f"{job['text']} ({elapsed:.0f} s)", 300, inline=True))
    st.button("Cancel", key="replay_cancel", on_click=_cancel)


def _results(res: dict[str, Any]) -> None:
    runs = res["results"]
    caption(
        f"{res['requests']:,} requests, {res['prompt_tokens']:,} prompt tokens, block size {res['block_size']}"
        + (", with outputs" if res["outputs"] else "")
        + f"; replayed at {res['tokens_per_s']:,.0f} prompt tokens/s ({res['hash_seconds']:.1f} s hashing, once)"
    )
    st.plotly_chart(hit_rate_vs_cache_size(res), key="replay_fig_size")
    sizes = sorted({r["num_blocks"] for r in runs if r["num_blocks"] is not None})
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
    st.plotly_chart(hits_over_time(res, chosen, window), key="replay_fig_time")
    st.dataframe(results_table(runs), hide_index=True)
    caption(SKIPPED_HELP[0].upper() + SKIPPED_HELP[1:] + ".")


RULES = """
- **Cache size** is vLLM's `num_gpu_blocks`: block 0 is the null block, so *N* blocks hold
  *N - 1* blocks of KV. A request that could not fit even in an empty cache (its prompt, plus
  with outputs every output token but the last, over *N - 1* blocks) is skipped: it still
  counts in the prompt tokens, with no hit.
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
- The shipped trace is Mooncake's synthetic trace (3,993 requests, 61M prompt tokens); its
  whole replay at block size 16 takes minutes, so start with a few hundred requests.
"""


KEPT = "replay_kept"  # the settings across a visit to another page (explorer.ui.kept)
KEPT_KEYS = tuple(
    f"replay_{k}" for k in ("source", "block_size", "limit", "sizes", "policies", "outputs", "scheduler", "budget")
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
    running = _state().get(JOB) is not None

    source = st.radio("Trace", [SHIPPED, UPLOAD], key="replay_source", horizontal=True, disabled=running)
    upload = None
    if source == UPLOAD:
        upload = st.file_uploader(
            f"Trace file (JSON lines, at most {UI_MAX_TRACE_BYTES >> 20} MiB)",
            type=["jsonl", "json", "txt"],
            key="replay_upload",
            disabled=running,
        )
    c1, c2, c3 = st.columns(3)
    block_size = c1.number_input(
        "Block size (tokens)", min_value=1, max_value=4096, value=16, step=1, key="replay_block_size", disabled=running
    )
    limit = c2.number_input(
        "Requests to replay (0 = all)",
        min_value=0,
        value=500,
        step=100,
        key="replay_limit",
        disabled=running,
        help="The first N lines. The whole shipped trace takes minutes at block size 16.",
    )
    sizes_text = c3.text_input(
        "Cache sizes (blocks)",
        value="1000, 5000, 20000, 100000",
        key="replay_sizes",
        disabled=running,
        help="Comma-separated; block 0 is the null block.",
    )
    policies = st.multiselect(
        "Policies",
        list(POLICIES),
        default=list(SEQUENTIAL),
        key="replay_policies",
        format_func=lambda p: POLICY_LABELS[p],
        disabled=running,
    )
    c4, c5, c6 = st.columns(3)
    outputs = c4.checkbox(
        "Generate outputs",
        key="replay_outputs",
        disabled=running,
        help="Each request also decodes output_length tokens of 0, holding more blocks.",
    )
    no_sched = running or "scheduler" not in policies
    scheduler = c5.selectbox("Scheduler", list(SCHEDULERS), key="replay_scheduler", disabled=no_sched)
    budget = c6.number_input(
        "Token budget per step (max_num_batched_tokens)",
        min_value=64,
        max_value=MAX_BATCHED_TOKENS,
        value=2048,
        step=256,
        key="replay_budget",
        disabled=no_sched,
    )

    if not running:
        if st.button("Run replay", type="primary", key="replay_run"):
            try:
                job = _build_job(
                    source,
                    upload,
                    int(block_size),
                    sizes_text,
                    int(limit),
                    list(policies),
                    bool(outputs),
                    str(scheduler),
                    int(budget),
                )
            except BadInput as e:
                _state()[ERROR] = str(e)
                _state().pop(RESULT, None)
            else:
                _start_job(job)
                st.rerun()
    else:
        _progress_panel()

    if _state().get(NOTICE):
        info(_state()[NOTICE])
    if _state().get(ERROR):
        error(_state()[ERROR])
    if _state().get(RESULT) is not None and not running:
        _results(_state()[RESULT])


# Streamlit runs a page file as __main__; importing it (a test calling render()) draws nothing.
if __name__ == "__main__":
    render()
