"""Full vs cached prefill of one request, timed and checked.

explorer/prefill/engine.py sets the two runs up through the explorer's KV cache manager; here
they are timed (warm-up, interleaved repeats, median), their last-token logits compared, and a
few tokens decoded greedily from each, through the manager, block by block.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from explorer.prefill.configs import BLOCK_SIZE, ModelConfig
from explorer.prefill.engine import Progress, prepare_pair
from explorer.prefill.estimate import gpu_peak_flops, prefill_flops
from explorer.prefill.model import PagedLlama
from explorer.prefill.timing import median, time_pair


@dataclass
class PrefillMeasurement:
    model: str
    weights: str
    device: str  # "cpu" or "cuda"
    device_name: str  # the GPU's name, or the CPU thread count: for people (JSON "device" stays "cpu"/"cuda")
    dtype: str
    prompt_tokens: int
    hit_tokens: int
    full_runs_ms: list[float]
    cached_runs_ms: list[float]
    flops_full: int
    flops_cached: int
    peak_flops: float | None  # known dense BF16 peak of the GPU, None on a CPU
    max_abs_logit_diff: float
    greedy_full: list[int]
    greedy_cached: list[int]
    hit_block_ids: list[int] = field(default_factory=list)  # B's first blocks, from the lookup
    a_block_ids: list[int] = field(default_factory=list)  # A's blocks, as A held them

    @property
    def full_ms(self) -> float:
        return median(self.full_runs_ms)

    @property
    def cached_ms(self) -> float:
        return median(self.cached_runs_ms)

    @property
    def saved_ms(self) -> float:
        return self.full_ms - self.cached_ms

    @property
    def saved_fraction(self) -> float:
        return self.saved_ms / self.full_ms

    @property
    def ideal_fraction(self) -> float:
        return self.hit_tokens / self.prompt_tokens

    @property
    def flop_ideal_fraction(self) -> float:
        return 1.0 - self.flops_cached / self.flops_full

    @property
    def mfu(self) -> float | None:
        """Model FLOPs utilisation of the full run (FLOPs / time / peak); None without a peak."""
        if self.peak_flops is None:
            return None
        return self.flops_full / (self.full_ms * 1e-3) / self.peak_flops

    @property
    def greedy_match(self) -> bool:
        return self.greedy_full == self.greedy_cached

    def to_json(self) -> dict:
        """Exactly the fields of design section 4."""
        return {
            "model": self.model,
            "weights": self.weights,
            "device": self.device,
            "dtype": self.dtype,
            "prompt_tokens": self.prompt_tokens,
            "hit_tokens": self.hit_tokens,
            "full_ms": self.full_ms,
            "cached_ms": self.cached_ms,
            "saved_ms": self.saved_ms,
            "saved_fraction": self.saved_fraction,
            "ideal_fraction": self.ideal_fraction,
            "flop_ideal_fraction": self.flop_ideal_fraction,
            "mfu": self.mfu,
            "max_abs_logit_diff": self.max_abs_logit_diff,
            "greedy_match": self.greedy_match,
        }


def measure_prefill(
    model: PagedLlama,
    prompt_tokens: int,
    hit_tokens: int,
    *,
    warmup: int = 1,
    repeats: int = 3,
    decode_tokens: int = 4,
    seed: int = 0,
    tokens: list[int] | None = None,
    progress: Progress | None = None,
) -> PrefillMeasurement:
    """Time and check the full and the cached prefill of one ``prompt_tokens`` prompt whose
    first ``hit_tokens`` tokens are in the prefix cache (settings checked by the caller). The
    prompt is ``tokens`` when given (then ``prompt_tokens`` must be its length), else seeded
    random ids."""
    cfg: ModelConfig = model.cfg
    say = progress or (lambda f, m: None)
    if tokens is not None and len(tokens) != prompt_tokens:
        raise ValueError(f"prompt_tokens is {prompt_tokens} but {len(tokens)} tokens were given")
    decode_tokens = max(1, min(decode_tokens, cfg.max_model_len - prompt_tokens + 1))
    pair = prepare_pair(model, prompt_tokens, hit_tokens, decode_tokens, seed, tokens, say)

    logits: dict[str, torch.Tensor] = {}

    def run_full() -> None:
        logits["full"] = pair.run_full()

    def run_cached() -> None:
        logits["cached"] = pair.run_cached()

    say(0.15, f"timing: {warmup} warm-up and {repeats} timed runs of each")
    full_ms, cached_ms = time_pair(
        run_full,
        run_cached,
        model.device,
        warmup,
        repeats,
        on_run=lambda i: say(0.15 + 0.75 * (i + 1) / repeats, f"timed run {i + 1} of {repeats}"),
    )
    diff = float((logits["full"] - logits["cached"]).abs().max())

    say(0.92, f"decoding {decode_tokens} tokens greedily from each run")
    eng, b, full = pair.engine, pair.cached, pair.full
    hit_block_ids = pair.hit_block_ids
    greedy_cached = eng.greedy(b, logits["cached"], decode_tokens)
    greedy_full = eng.greedy(full, logits["full"], decode_tokens)
    eng.sched.finish(b)
    eng.sched.finish(full)
    say(1.0, "done")

    is_cuda = model.device.type == "cuda"
    threads = torch.get_num_threads()
    where = torch.cuda.get_device_name(model.device) if is_cuda else f"CPU, {threads} torch thread{'s' * (threads > 1)}"
    return PrefillMeasurement(
        model=cfg.name,
        weights=cfg.weights_label,
        device=model.device.type,
        device_name=where,
        dtype=str(model.dtype).removeprefix("torch."),
        prompt_tokens=prompt_tokens,
        hit_tokens=hit_tokens,
        full_runs_ms=full_ms,
        cached_runs_ms=cached_ms,
        flops_full=prefill_flops(cfg, prompt_tokens, 0),
        flops_cached=prefill_flops(cfg, prompt_tokens, hit_tokens),
        peak_flops=gpu_peak_flops(where) if is_cuda else None,
        max_abs_logit_diff=diff,
        greedy_full=greedy_full,
        greedy_cached=greedy_cached,
        hit_block_ids=hit_block_ids,
        a_block_ids=pair.a_table,
    )


def default_dtype(device: str) -> torch.dtype:
    """float32 on a CPU (rounding-level agreement); bf16 on a GPU, as vLLM serves (fp16 on a GPU
    without bf16)."""
    if device == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def sweep_hits(prompt_tokens: int, points: int) -> list[int]:
    """``points`` hit lengths from 0 to the longest possible hit, whole blocks, no repeats."""
    top = ((prompt_tokens - 1) // BLOCK_SIZE) * BLOCK_SIZE
    if points <= 1 or top == 0:
        return [0]
    raw = [round(i * top / (points - 1) / BLOCK_SIZE) * BLOCK_SIZE for i in range(points)]
    return sorted(set(raw))
