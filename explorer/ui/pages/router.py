"""Page: a prefix-aware router over a simulated fleet, what KV events buy it, and how it breaks.

The fleet, the router and the request stream come from a fleet file (TOML, `fleets/*.toml`,
docs/router.md); the controls on the page override its router settings and failure switches.
The simulation lives in `explorer.router` and the figures in `explorer.viz.router`; this page
only collects settings and draws (how the controls make a config: `explorer.ui.router_controls`).
A setup is shared by URL (``?fleet=v1....``: the effective config as compressed TOML, capped;
only ever parsed as TOML).

Everything this page keeps lives in st.session_state under keys starting with ``router_``.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import streamlit as st

from explorer.errors import BadInput
from explorer.router.config import BASELINE, LIMITS, POLICIES, TIE_BREAKS, FleetConfig
from explorer.router.failures import SWITCH_HELP, explain
from explorer.router.fleet_file import example_fleets, parse_fleet_text
from explorer.router.results import FleetResult
from explorer.router.share import decode_share
from explorer.router.simulate import ask, simulate
from explorer.traffic.trace import UI_MAX_TRACE_BYTES
from explorer.ui import kept
from explorer.ui.heavy import heavy_turn
from explorer.ui.router_controls import (
    CONTROL_KEYS,
    KEPT,
    UI_MAX_REQUESTS,
    W_ALGO,
    W_BS,
    W_DROP,
    W_FORM,
    W_IGNORE,
    W_INSTANCES,
    W_LOAD,
    W_REQUESTS,
    W_SALT,
    W_SEED,
    W_SEEDF,
    W_TIE,
    W_XX,
    apply_controls,
    sync_controls,
)
from explorer.ui.router_share import share
from explorer.ui.text import error, md, success, warning
from explorer.viz import router as V
from explorer.viz.router_available import achieved_vs_available, gap_sentence

PRESET = "router_preset"
TOML = "router_toml"
RESULTS = "router_results"
FIGS = "router_figures"  # the last result's figures (key "": that result)
URL_DONE = "router_url_loaded"
URL_ERROR = "router_url_error"
TRACE = "router_trace"
CUSTOM = "(edited)"
MAX_CACHED = 3

# widget keys (the controls that make the config are in explorer.ui.router_controls)
W_METRIC = "router_metric"
W_ASK = "router_ask"
W_ASK_KIND = "router_ask_kind"
W_ASK_TENANT = "router_ask_tenant"

INTRO = """
Several simulated vLLM instances, each its own engine with KV events on, publish their events after every engine step
in vLLM's wire format; a router subscribes through the same decoder as the *Live events* page. Each instance runs vLLM's
scheduler loop (mirrored: token budget, chunked prefill, preemption), so what the router predicts is checked against
what a vLLM-like instance really hits under concurrency. The router tokenizes each request, hashes it with vLLM's block
hasher (its own NONE_HASH and seed), converts its hashes to the 64-bit form the events carry, and sends the request
where the longest run of its hashes is already cached, minus a load term. Round robin and least-loaded run on the same
stream for comparison. Then flip a switch below and watch it break.
"""

SWITCHES = [
    (W_ALGO, "Router hashes with another algorithm", "router_hash_algo"),
    (W_SEEDF, "Router runs with PYTHONHASHSEED=0 (another NONE_HASH seed)", "router_hash_seed"),
    (W_BS, "Router uses another block size", "router_block_size"),
    (W_FORM, "Router reads 64-bit event hashes as raw digests", "router_wrong_hash_form"),
    (W_XX, "xxhash instances without a shared seed (each draws its own)", "xxhash_unshared_seed"),
    (W_SALT, "A cache_salt per tenant", "tenant_salt"),
    (W_IGNORE, "... and the router hashes without the salt", "router_ignores_salt"),
]


def _ss() -> Any:
    return st.session_state


def _preset_text(name: str) -> str:
    path = example_fleets()[name]
    return path.read_text(encoding="utf-8")


def _init() -> None:
    ss = _ss()
    presets = example_fleets()
    if URL_DONE not in ss:
        ss[URL_DONE] = True
        token = st.query_params.get("fleet")
        if token:
            try:
                cfg = decode_share(token)
                ss[TOML] = cfg.to_toml()
                ss[PRESET] = CUSTOM
                return
            except BadInput as e:
                ss[URL_ERROR] = str(e)
    if TOML not in ss:
        first = next(iter(presets), None)
        ss[PRESET] = first if first is not None else CUSTOM
        ss[TOML] = _preset_text(first) if first is not None else FleetConfig().to_toml()


def _on_preset() -> None:
    name = _ss()[PRESET]
    if name != CUSTOM and name in example_fleets():
        _ss()[TOML] = _preset_text(name)


def _config_editor() -> FleetConfig | None:
    presets = list(example_fleets())
    options = presets + [CUSTOM]
    if _ss().get(PRESET) not in options:
        _ss()[PRESET] = CUSTOM
    c1, c2 = st.columns([1, 2])
    c1.selectbox(
        "Example fleet",
        options,
        key=PRESET,
        on_change=_on_preset,
        help="The fleets/ folder. Pick one to load it into the editor; edit the TOML freely.",
    )
    with c2.expander("Fleet file (TOML)", expanded=False):
        st.text_area("Fleet TOML", key=TOML, height=420, label_visibility="collapsed")
        st.caption("Format: docs/router.md. The controls below override [router] and [failures].")
    try:
        base = parse_fleet_text(_ss()[TOML], "fleet file")
    except BadInput as e:
        error(str(e))
        return None
    if base.description:
        c1.caption(md(base.description, 1_000))
    return base


def _controls(base: FleetConfig) -> FleetConfig:
    sync_controls(_ss(), base)
    st.subheader("Router")
    c1, c2, c3, c4, c5 = st.columns(5)
    c1.slider(
        "Load weight",
        0.0,
        max(64.0, float(base.router.load_weight)),
        step=0.5,
        key=W_LOAD,
        help="cost = blocks to prefill + load weight x requests in flight; the lowest cost wins. "
        "0 = pure longest match.",
    )
    c2.selectbox("Tie-break", TIE_BREAKS, key=W_TIE, help="Who wins among equal costs.")
    c3.number_input("Instances", 1, LIMITS.max_instances, key=W_INSTANCES)
    c4.number_input("Requests", 1, UI_MAX_REQUESTS, key=W_REQUESTS)
    c5.number_input("Stream seed", 0, 2**31 - 1, key=W_SEED)
    st.caption(
        "Prefix-aware: for every instance, **cost = (prompt blocks − known cached run) + load weight × "
        "requests in flight**; the run is the longest prefix of the router's block hashes found in the "
        "instance's published set, capped so the last prompt token always runs, as vLLM's lookup is."
    )

    st.subheader("What goes wrong")
    cols = st.columns(2)
    for n, (key, label, name) in enumerate(SWITCHES):
        disabled = key == W_IGNORE and not _ss().get(W_SALT)
        if disabled:
            _ss()[W_IGNORE] = False
        cols[n % 2].toggle(label, key=key, help=SWITCH_HELP[name], disabled=disabled)
    cols[len(SWITCHES) % 2].slider(
        "Event batches lost (no replay)", 0.0, 0.95, step=0.05, key=W_DROP, help=SWITCH_HELP["drop_batches"]
    )
    return apply_controls(_ss(), base)


def _trace_input(cfg: FleetConfig) -> tuple[bytes | None, str, str | None]:
    """(bytes, name, error) of the trace a trace workload needs."""
    if cfg.workload.kind != "trace":
        return None, "", None
    up = st.file_uploader(
        "Mooncake trace (JSON lines)",
        type=["jsonl", "json", "txt"],
        key=TRACE,
        help='Used when the fleet file says trace = "upload".',
    )
    if cfg.workload.trace == "upload":
        if up is None:
            return None, "", 'This fleet replays an uploaded trace (trace = "upload"): upload one.'
        data = up.getvalue()
        if len(data) > UI_MAX_TRACE_BYTES:
            return None, "", f"{up.name}: {len(data):,} bytes is more than the {UI_MAX_TRACE_BYTES:,}-byte limit"
        return data, up.name, None
    return None, "", None


def _results_cache() -> OrderedDict:
    ss = _ss()
    if RESULTS not in ss:
        ss[RESULTS] = OrderedDict()
    return ss[RESULTS]


def _run(cfg: FleetConfig, trace: bytes | None, trace_name: str) -> FleetResult | None:
    key = cfg.key() + (hashlib.sha256(trace).hexdigest() if trace is not None else "")
    cache = _results_cache()
    if key in cache:
        cache.move_to_end(key)
        return cache[key]
    try:
        with heavy_turn("fleet run"), st.spinner("Running the fleet under every policy..."):
            result = simulate(cfg, trace, trace_name)
    except BadInput as e:
        error(str(e))
        return None
    cache[key] = result
    while len(cache) > MAX_CACHED:
        cache.popitem(last=False)
    return result


def _explanations(result: FleetResult) -> None:
    for name, text in explain(result):
        (success if name == "healthy" else warning)(text if name == "healthy" else f"{name.replace('_', ' ')}: {text}")


def _summary(result: FleetResult) -> None:
    runs = [result.runs[p] for p in (*POLICIES, BASELINE) if p in result.runs]
    rr = result.runs.get("round_robin")
    cols = st.columns(len(runs))
    for col, run in zip(cols, runs):
        delta = (
            f"{(run.hit_rate - rr.hit_rate) * 100:+.1f} pts vs round robin"
            if rr is not None and run is not rr
            else None
        )
        col.metric(
            run.label, f"{run.hit_rate:.1%}", delta, help="hit tokens / prompt tokens, from the engines' own stats"
        )
    # one column per policy, one row per figure: it fits (and wraps) at any width from 1024 px
    st.table(V.summary_table([(run.label, run.summary()) for run in runs]))
    p = result.config.prefill
    st.caption(
        f"Milliseconds are the walkthrough's estimate: 2 × {p.params:.3g} parameters / ({p.peak_tflops:g} TFLOP/s × "
        f"{p.utilization:.0%})"
        + (" plus Llama-3-8B-shaped attention" if p.attention else "")
        + " per prompt token; a hit skips its tokens. "
        f"{len(result.stream.requests):,} requests ({md(result.stream.source, 200)}), simulated in {result.seconds:.2f} s."
    )


def _fig(result: FleetResult, name: str, make: Callable[[], Any]) -> Any:
    """A figure of ``result``, built once: a visit or a rerun redraws the last result's figures."""
    figs = _ss().get(FIGS)
    if figs is None or figs.get("") is not result:
        figs = _ss()[FIGS] = {"": result}
    return figs[name] if name in figs else figs.setdefault(name, make())


def _plots(result: FleetResult) -> None:
    c1, c2 = st.columns(2)
    c1.plotly_chart(_fig(result, "hit", lambda: V.hit_rate_by_policy(result)), key="router_fig_hit")
    c2.plotly_chart(_fig(result, "prefill", lambda: V.prefill_time(result)), key="router_fig_prefill")
    st.plotly_chart(_fig(result, "cum", lambda: V.cumulative_hit_rate(result)), key="router_fig_cumulative")
    with st.container(key="router_available"):  # achieved against available (design section 14)
        st.markdown(md(gap_sentence(result)))
        st.plotly_chart(_fig(result, "avail", lambda: achieved_vs_available(result)), key="router_fig_available")
    st.selectbox(
        "Per instance", list(V.PER_INSTANCE_METRICS), key=W_METRIC, format_func=lambda m: V.PER_INSTANCE_METRICS[m][0]
    )
    st.plotly_chart(V.per_instance(result, _ss().get(W_METRIC) or "hit_tokens"), key="router_fig_instances")
    run = result.runs["prefix"]
    c1, c2 = st.columns(2)
    c1.plotly_chart(_fig(result, "match", lambda: V.router_vs_engine(run)), key="router_fig_match")
    c2.plotly_chart(_fig(result, "view", lambda: V.subscriber_view(run)), key="router_fig_view")
    with st.expander("Per instance, prefix-aware run (the engines' own stats)"):
        st.dataframe(
            [
                {
                    "instance": i.name,
                    "routed": i.routed,
                    "requests (stats)": i.stats["requests"],
                    "queries (stats)": i.stats["queries"],
                    "hits (stats)": i.stats["hits"],
                    "hit rate": f"{i.hit_rate:.1%}",
                    "batches": i.subscriber.get("batches", 0),
                    "gaps": i.subscriber.get("gaps", 0),
                    "lost": i.subscriber.get("lost", 0),
                    "hashes in view": i.view_hashes,
                    "hashes in engine": i.engine_hashes,
                    "phantom": i.phantom,
                    "missing": i.missing,
                    "longest queue": i.max_queue,
                    "NONE_HASH seed": i.seed,
                }
                for i in run.instances
            ],
            hide_index=True,
            width="stretch",
        )
        chk = run.prediction_check()
        st.caption(
            f"Router's match = engine's hit for {chk['exact']:,} requests admitted at once; "
            f"over {chk['over']:,}, under {chk['under']:,}; {chk['queued']:,} waited in a queue first "
            "(the cache can change while a request waits)."
        )


def _ask(result: FleetResult) -> None:
    st.subheader("Ask the router")
    st.caption(
        "Where would one more request go, against the fleet's final state? A token spec such as "
        "`0:1000, 7*200`, or text (SmolLM2's tokenizer)."
    )
    c1, c2, c3 = st.columns([1, 3, 1])
    c1.radio("Prompt is", ["spec", "text"], key=W_ASK_KIND, format_func={"spec": "token spec", "text": "text"}.get)
    c2.text_input("Prompt", key=W_ASK, placeholder="0:1000, 7*200")
    c3.number_input("Tenant", 0, max(0, result.config.workload.tenants - 1), key=W_ASK_TENANT)
    prompt = _ss().get(W_ASK)
    if not prompt:
        return
    try:
        a = ask(result, prompt, _ss().get(W_ASK_KIND) or "spec", int(_ss().get(W_ASK_TENANT) or 0))
    except BadInput as e:
        error(str(e))
        return
    bs = result.setup.router_block_size
    st.markdown(
        f"{a.tokens:,} tokens, {a.blocks} full blocks, lookup may cover {a.cap}. Known cached run per instance: "
        + ", ".join(f"instance-{i} **{m}** blocks ({m * bs:,} tokens)" for i, m in enumerate(a.matches))
        + f". The router picks **instance-{a.instance}**."
    )


def render() -> None:
    kept.restore(KEPT)  # the controls as they were, so the last result is found, not simulated again
    try:
        _render()
    finally:
        kept.keep(KEPT, (*CONTROL_KEYS, PRESET, TOML, W_METRIC, W_ASK, W_ASK_KIND, W_ASK_TENANT))


def _render() -> None:
    st.title("Prefix-aware routing")
    st.markdown(INTRO)
    _init()
    err = _ss().pop(URL_ERROR, None)
    if err:
        error(f"The shared link could not be loaded: {err}")
    base = _config_editor()
    if base is None:
        return
    cfg = _controls(base)
    trace, trace_name, trace_err = _trace_input(cfg)
    if trace_err:
        error(trace_err)
        return
    st.divider()
    result = _run(cfg, trace, trace_name)
    if result is None:
        return
    _explanations(result)
    _summary(result)
    _plots(result)
    _ask(result)
    share(cfg)


# Streamlit runs a page file as __main__; importing it (a test calling render()) draws nothing.
if __name__ == "__main__":
    render()
