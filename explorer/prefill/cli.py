"""`python -m explorer prefill`: measure the prefill time a prefix-cache hit saves.

explorer/cli.py parses the arguments (--model, --device, --prompt, --hit, --json); this module
checks them (bad input: one line, exit 2), runs the measurement and prints the design-section-4
JSON or a readable summary. Threads: torch uses as many as OMP_NUM_THREADS allows.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from explorer.errors import BadInput
from explorer.prefill.validate import check_model_available, check_settings, resolve_device

if TYPE_CHECKING:
    import torch

    from explorer.prefill.configs import ModelConfig
    from explorer.prefill.measure import PrefillMeasurement
    from explorer.prefill.model import PagedLlama


def run_measurement(
    model: str,
    device: str,
    prompt: int,
    hit: int,
    load: Callable[[ModelConfig, str, torch.dtype], PagedLlama] | None = None,
    **kwargs: Any,
) -> PrefillMeasurement:
    """Check the settings, build the model and measure: the CLI's and the UI's common path.

    ``load(cfg, device, dtype)`` builds the model (default: weights.load_model; the UI passes
    its cached loader); ``kwargs`` go to measure_prefill. Raises BadInput for anything the user
    can fix, running out of memory included.
    """
    cfg = check_settings(model, device, prompt, hit)
    resolved = resolve_device(device, cfg)
    check_model_available(cfg)

    import torch

    from explorer.prefill.engine import pool_blocks_needed
    from explorer.prefill.measure import default_dtype, measure_prefill

    if load is None:
        from explorer.prefill.weights import load_model

        load = load_model
    dtype = default_dtype(resolved)
    try:
        return measure_prefill(load(cfg, resolved, dtype), prompt, hit, **kwargs)
    except (torch.cuda.OutOfMemoryError, MemoryError) as e:
        raise BadInput(_oom_message(cfg, resolved, dtype, prompt, pool_blocks_needed(prompt, 4), e)) from None
    except RuntimeError as e:  # the CPU allocator reports exhaustion as a RuntimeError
        if "allocate" not in str(e) and "out of memory" not in str(e):
            raise
        raise BadInput(_oom_message(cfg, resolved, dtype, prompt, pool_blocks_needed(prompt, 4), e)) from None


def _oom_message(
    cfg: ModelConfig, device: str, dtype: torch.dtype, prompt: int, blocks: int, err: BaseException
) -> str:
    size = dtype.itemsize
    weights_gib = cfg.total_params * size / 2**30
    pool_gib = blocks * cfg.kv_bytes_per_block(size) / 2**30
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return (
        f"out of memory on {device}: {cfg.name} with a {prompt}-token prompt needs about "
        f"{weights_gib:.1f} GiB of weights + {pool_gib:.2f} GiB of KV pool ({blocks} blocks) in "
        f"{str(dtype).removeprefix('torch.')}, plus activations; try a shorter --prompt ({first})"
    )


def greedy_text(model: str, ids: list[int]) -> str | None:
    """The greedy tokens as text for the real model, when its tokenizer is at hand."""
    if model != "smollm2-135m":
        return None
    try:
        from explorer.tokens import decode_tokens

        return decode_tokens(ids)
    except Exception:  # text is a nicety here; the ids are the result
        return None


def summary(r: PrefillMeasurement) -> str:
    """A readable report of one PrefillMeasurement."""
    blocks = r.hit_tokens // 16
    mfu = "" if r.mfu is None else f", MFU of the full run {r.mfu:.0%}"
    text = greedy_text(r.model, r.greedy_cached)
    lines = [
        f"prefill of {r.model} ({r.weights} weights) on {r.device} ({r.device_name}), {r.dtype}",
        f"prompt {r.prompt_tokens:,} tokens; hit {r.hit_tokens:,} tokens = {blocks} blocks "
        f"{r.hit_block_ids[:8]}{' ...' if blocks > 8 else ''} found by the KV cache manager",
        f"full prefill    {r.full_ms:10.1f} ms   computes {r.prompt_tokens:,} tokens",
        f"cached prefill  {r.cached_ms:10.1f} ms   computes {r.prompt_tokens - r.hit_tokens:,} tokens, "
        "reads the hit blocks from the pool",
        f"saved           {r.saved_ms:10.1f} ms = {r.saved_fraction:.1%} of the full prefill "
        f"(ideal: {r.ideal_fraction:.1%} of tokens, {r.flop_ideal_fraction:.1%} of FLOPs){mfu}",
        f"median of {len(r.full_runs_ms)} timed runs each, after warm-up",
        f"correct: max |logit diff| cached vs full {r.max_abs_logit_diff:.2e}; greedy "
        f"{len(r.greedy_cached)} tokens {'match' if r.greedy_match else 'DIFFER'}: {r.greedy_cached}"
        + (f" {text!r}" if text is not None else ""),
    ]
    return "\n".join(lines)


def cmd_prefill(args: argparse.Namespace) -> int:
    r = run_measurement(args.model, args.device, args.prompt, args.hit)
    if args.json:
        sys.stdout.write(json.dumps(r.to_json()) + "\n")
    else:
        sys.stdout.write(summary(r) + "\n")
    return 0
