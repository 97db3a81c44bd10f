"""GPU check of the prefill measurement: full vs cached prefill in bf16 on an NVIDIA GPU.

For a machine whose Python (3.10+) has only torch (with CUDA) and numpy, and no network. From
the repository root:

    python scripts/gpu_check.py [--budget-s 280] [--out gpu_check.json]

Random weights in SmolLM2-135M's and Llama-3.1-8B's shapes (timing depends on shapes, not on
values; no model file needed), several prompt lengths (up to 32k tokens for the 8B shape) and
hit lengths. Each case goes through the explorer's KV cache manager exactly as
`python -m explorer prefill` does, and reports the design-section-4 JSON plus a correctness
verdict: the cached run's last-token logits within BF16_TOLERANCE of the full run's, and the
same greedy tokens. Per model, one cached block is also overwritten with noise to show that the
cached run really reads it. Cases run smallest first and stop when the time budget is spent
(the rest are listed as skipped). One JSON object goes to stdout (and to --out).

`--cpu-smoke` runs the same code on the CPU with the tiny shape: that is what the test suite
runs, with gguf, tokenizers, cbor2, xxhash, msgspec and the plotting libraries blocked.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from explorer.prefill.configs import LLAMA3_8B_SHAPE, SMOLLM2_135M_SHAPE, TINY, ModelConfig
from explorer.prefill.engine import corrupted_block_effect
from explorer.prefill.estimate import estimate_prefill, gpu_peak_flops
from explorer.prefill.measure import default_dtype, measure_prefill
from explorer.prefill.model import PagedLlama
from explorer.prefill.weights import random_weights

# Cached vs full last-token logits may differ by rounding only. float32: rounding level. bf16:
# the hit blocks' K/V were computed in another batch (A's prompt), so GEMMs of another shape may
# round differently; with random weights scaled to give logits of standard deviation ~1, a few
# bf16 ulps at the top logits' size (an ulp is 1/32 between 4 and 8) stays below this.
# Provisional until a GPU run has confirmed the margin.
BF16_TOLERANCE = 0.25
FP32_TOLERANCE = 1e-3

# (config, prompt tokens, hit tokens), cheapest first so a tight budget still covers each shape.
GPU_PLAN: list[tuple[ModelConfig, int, list[int]]] = [
    (SMOLLM2_135M_SHAPE, 1200, [0, 496, 992, 1184]),
    (SMOLLM2_135M_SHAPE, 8192, [0, 4096, 8176]),
    (LLAMA3_8B_SHAPE, 1200, [0, 496, 992, 1184]),
    (LLAMA3_8B_SHAPE, 8192, [0, 4096, 8176]),
    (LLAMA3_8B_SHAPE, 32768, [0, 16384, 32752]),
]
CPU_SMOKE_PLAN: list[tuple[ModelConfig, int, list[int]]] = [
    (TINY, 64, [0, 48]),
    (TINY, 200, [0, 96, 192]),
]


def tolerance(dtype: torch.dtype) -> float:
    return FP32_TOLERANCE if dtype == torch.float32 else BF16_TOLERANCE


def run_case(model: PagedLlama, prompt: int, hit: int, warmup: int, repeats: int) -> dict:
    """One (prompt, hit) case: the section-4 JSON, the 50%-of-peak estimate, and a verdict."""
    r = measure_prefill(model, prompt, hit, warmup=warmup, repeats=repeats)
    out = r.to_json()
    tol = tolerance(model.dtype)
    out.update(
        device_name=r.device_name,
        full_runs_ms=r.full_runs_ms,
        cached_runs_ms=r.cached_runs_ms,
        tolerance=tol,
        ok=bool(r.max_abs_logit_diff <= tol and r.greedy_match),
    )
    if r.peak_flops is not None:
        est = estimate_prefill(model.cfg.total_params, prompt, hit, r.peak_flops, 0.5, attention=model.cfg)
        out.update(estimate_full_ms=est.full_s * 1e3, estimate_cached_ms=est.cached_s * 1e3)
    return out


def repeats_for(prompt: int, device: str) -> tuple[int, int]:
    """(warm-up, timed runs): fewer for the long prompts, whose runs are long and steady."""
    if device == "cpu":
        return 0, 1
    return (1, 3) if prompt > 8192 else (2, 5)


def run_plan(plan: list[tuple[ModelConfig, int, list[int]]], device: str, budget_s: float) -> dict:
    t0 = time.monotonic()
    dtype = default_dtype(device)
    cases, checks, skipped, errors = [], [], [], []
    model: PagedLlama | None = None
    for cfg, prompt, hits in plan:
        if model is None or model.cfg is not cfg:
            model = None
            if device == "cuda":
                torch.cuda.empty_cache()
            model = PagedLlama(cfg, random_weights(cfg, device, dtype, seed=0), device, dtype)
            try:  # one corruption check per model, on its first case with a hit
                first_hit = next(h for h in hits if h >= 16)
                checks.append(
                    {
                        "model": cfg.name,
                        "prompt_tokens": prompt,
                        "hit_tokens": first_hit,
                        **corrupted_block_effect(model, prompt, first_hit),
                    }
                )
            except torch.cuda.OutOfMemoryError as e:
                errors.append({"model": cfg.name, "prompt_tokens": prompt, "error": f"out of memory: {e}"})
        warmup, repeats = repeats_for(prompt, device)
        for hit in hits:
            if time.monotonic() - t0 > budget_s:
                skipped.append({"model": cfg.name, "prompt_tokens": prompt, "hit_tokens": hit})
                continue
            try:
                cases.append(run_case(model, prompt, hit, warmup, repeats))
            except torch.cuda.OutOfMemoryError as e:
                torch.cuda.empty_cache()
                errors.append(
                    {
                        "model": cfg.name,
                        "prompt_tokens": prompt,
                        "hit_tokens": hit,
                        "error": f"out of memory: {str(e).splitlines()[0]}",
                    }
                )
    corrupt_ok = all(c["cached_change"] > 1e-2 and c["full_change"] == 0.0 for c in checks)
    return {
        "cases": cases,
        "corruption_checks": checks,
        "skipped": skipped,
        "errors": errors,
        "all_ok": bool(cases) and all(c["ok"] for c in cases) and corrupt_ok and not errors,
        "elapsed_s": time.monotonic() - t0,
    }


def environment(device: str) -> dict:
    env = {"python": platform.python_version(), "torch": torch.__version__, "device": device}
    if device == "cuda":
        name = torch.cuda.get_device_name(0)
        env.update(gpu=name, cuda=torch.version.cuda, bf16_peak_flops=gpu_peak_flops(name))
    return env


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Full vs cached prefill on a GPU (random weights).")
    ap.add_argument("--budget-s", type=float, default=280.0, help="stop starting new cases after this")
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny shapes on the CPU (for tests)")
    args = ap.parse_args(argv)

    if args.cpu_smoke:
        device, plan = "cpu", CPU_SMOKE_PLAN
    elif torch.cuda.is_available():
        device, plan = "cuda", GPU_PLAN
    else:
        print("error: no CUDA GPU visible to torch (use --cpu-smoke for a CPU run of the tiny shape)", file=sys.stderr)
        return 2
    result = {"environment": environment(device), **run_plan(plan, device, args.budget_s)}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0 if result["all_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
