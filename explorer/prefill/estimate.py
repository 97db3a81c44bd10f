"""What a prefix-cache hit should save, on paper (torch-free; the UI and the lessons call this).

Two views of the same arithmetic:

- the back-of-envelope estimate of the interview walkthrough: a prefill costs about
  2 x params FLOPs per prompt token, so at a fraction ``utilization`` of a peak of ``peak_flops``
  one token takes ``2 x params / (peak x utilization)`` seconds, and a hit of ``h`` tokens saves
  ``h`` of them. Optionally plus the attention term, which grows with the context;
- the FLOP count that the measurement reports against (design section 4): 2 x non-embedding
  parameters per computed token, plus 4 x layers x heads x head_dim per causal query-key pair
  (the diagonal included: QK^T and PV, a multiply and an add each), plus the LM head once (only
  the last token's logits are needed after a prefill).

``walkthrough_estimate()`` reproduces the walkthrough's table: 32.5 us per token, 39.0 ms for
1,200 tokens, 32.2 ms saved by a 992-token hit, 83%.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.prefill.configs import LLAMA3_8B_SHAPE, ModelConfig

# The walkthrough's assumptions: Llama 3.1 8B (8.03e9 parameters) on an H100 at 50% of its
# 989 TFLOP/s dense BF16 peak, a 1,200-token prompt of which 992 tokens (62 blocks) hit.
WALKTHROUGH_PARAMS = 8.03e9
WALKTHROUGH_PEAK_FLOPS = 989e12
WALKTHROUGH_UTILIZATION = 0.50
WALKTHROUGH_PROMPT = 1200
WALKTHROUGH_HIT = 992

# Dense BF16 tensor-core peaks (FLOP/s, no sparsity) from the vendors' data sheets, matched
# against torch.cuda.get_device_name() by substring, most specific first. Used for MFU only;
# an unknown GPU gets no MFU rather than a guessed one.
GPU_BF16_PEAK_FLOPS: tuple[tuple[str, float], ...] = (
    ("GB200", 2.5e15),
    ("B200", 2.25e15),
    ("GH200", 989e12),
    ("H200", 989e12),
    ("H100 PCIe", 756e12),
    ("H100", 989e12),
    ("H800", 989e12),
    ("A100", 312e12),
    ("A800", 312e12),
    ("L40S", 362e12),
    ("L40", 181e12),
    ("L4", 121e12),
    ("A10G", 70e12),
    ("A10", 125e12),
    ("RTX 4090", 165e12),
    ("RTX 3090", 71e12),
)


def gpu_peak_flops(device_name: str) -> float | None:
    """The dense BF16 peak of a GPU named like torch.cuda.get_device_name(), or None."""
    for key, peak in GPU_BF16_PEAK_FLOPS:
        if key in device_name:
            return peak
    return None


# ---- FLOP counts (design section 4) -------------------------------------------------------------


def causal_pairs(start: int, end: int) -> int:
    """Query-key pairs of queries at positions [start, end), each seeing keys 0..itself."""
    if not 0 <= start <= end:
        raise ValueError(f"need 0 <= start <= end, got {start}, {end}")
    return (end * (end + 1) - start * (start + 1)) // 2


def attention_flops_per_pair(cfg: ModelConfig) -> int:
    """QK^T and PV: 2 FLOPs each per head dimension, in every layer and query head."""
    return 4 * cfg.num_layers * cfg.num_heads * cfg.head_dim


def prefill_flops(cfg: ModelConfig, prompt_tokens: int, hit_tokens: int = 0) -> int:
    """FLOPs of a prefill that computes prompt positions [hit_tokens, prompt_tokens)."""
    if not 0 <= hit_tokens < prompt_tokens:
        raise ValueError(f"need 0 <= hit < prompt, got hit {hit_tokens}, prompt {prompt_tokens}")
    computed = prompt_tokens - hit_tokens
    dense = 2 * cfg.non_embedding_params * computed
    attention = attention_flops_per_pair(cfg) * causal_pairs(hit_tokens, prompt_tokens)
    lm_head = 2 * cfg.lm_head_params
    return dense + attention + lm_head


def flop_ideal_fraction(cfg: ModelConfig, prompt_tokens: int, hit_tokens: int) -> float:
    """The share of a full prefill's FLOPs that a hit removes: 1 - FLOPs(cached) / FLOPs(full)."""
    return 1.0 - prefill_flops(cfg, prompt_tokens, hit_tokens) / prefill_flops(cfg, prompt_tokens, 0)


# ---- time estimate (the walkthrough's arithmetic) ---------------------------------------------


def seconds_per_token(params: float, peak_flops: float, utilization: float) -> float:
    """2 x params / (peak x utilization): the dense cost of one prompt token."""
    if params <= 0 or peak_flops <= 0 or not 0 < utilization <= 1:
        raise ValueError("need params > 0, peak > 0 and 0 < utilization <= 1")
    return 2.0 * params / (peak_flops * utilization)


@dataclass(frozen=True, slots=True)
class PrefillEstimate:
    prompt_tokens: int
    hit_tokens: int
    per_token_s: float  # the dense term only
    full_s: float
    cached_s: float

    @property
    def saved_s(self) -> float:
        return self.full_s - self.cached_s

    @property
    def saved_fraction(self) -> float:
        return self.saved_s / self.full_s


def estimate_prefill(
    params: float,
    prompt_tokens: int,
    hit_tokens: int,
    peak_flops: float,
    utilization: float,
    attention: ModelConfig | None = None,
) -> PrefillEstimate:
    """Estimated full and cached prefill time of one prompt.

    Without ``attention`` this is the walkthrough's formula: every computed token costs
    ``2 x params`` FLOPs. With a config, its causal attention FLOPs (which a hit also skips, and
    which grow with the context) are added at the same utilization.
    """
    if not 0 <= hit_tokens < prompt_tokens:
        raise ValueError(f"need 0 <= hit < prompt, got hit {hit_tokens}, prompt {prompt_tokens}")
    rate = peak_flops * utilization
    per_token = seconds_per_token(params, peak_flops, utilization)

    def cost(start: int) -> float:
        t = (prompt_tokens - start) * per_token
        if attention is not None:
            t += attention_flops_per_pair(attention) * causal_pairs(start, prompt_tokens) / rate
        return t

    return PrefillEstimate(prompt_tokens, hit_tokens, per_token, cost(0), cost(hit_tokens))


def estimate_for_model(
    cfg: ModelConfig, prompt_tokens: int, hit_tokens: int, peak_flops: float, utilization: float
) -> PrefillEstimate:
    """Time = FLOPs / (peak x utilization) with the design's FLOP count, so the estimated saving
    is exactly ``flop_ideal_fraction``. (The walkthrough's 2 x all params per token also charges
    the embedding lookup and the LM head to every token: 8.03e9 instead of 6.98e9 for Llama 3.1
    8B, whose LM head runs once per prefill.)"""
    rate = peak_flops * utilization
    if rate <= 0 or not 0 < utilization <= 1:
        raise ValueError("need peak > 0 and 0 < utilization <= 1")
    return PrefillEstimate(
        prompt_tokens,
        hit_tokens,
        2.0 * cfg.non_embedding_params / rate,
        prefill_flops(cfg, prompt_tokens, 0) / rate,
        prefill_flops(cfg, prompt_tokens, hit_tokens) / rate,
    )


def format_seconds(s: float) -> str:
    """A duration in the unit that reads best: 12.3 ns, 4.56 us, 789 ms, 1.23 s."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def walkthrough_estimate(with_attention: bool = False) -> PrefillEstimate:
    """The interview walkthrough's numbers: 32.5 us/token, 39.0 ms, 32.2 ms saved, 83%."""
    return estimate_prefill(
        WALKTHROUGH_PARAMS,
        WALKTHROUGH_PROMPT,
        WALKTHROUGH_HIT,
        WALKTHROUGH_PEAK_FLOPS,
        WALKTHROUGH_UTILIZATION,
        attention=LLAMA3_8B_SHAPE if with_attention else None,
    )


def walkthrough_table(est: PrefillEstimate | None = None) -> list[tuple[str, str]]:
    """The walkthrough's table as (what, value) rows, formatted as it prints them."""
    e = est or walkthrough_estimate()
    return [
        ("prefill per token", f"{e.per_token_s * 1e6:.1f} us"),
        (f"{e.prompt_tokens:,}-token prompt", f"{e.full_s * 1e3:.1f} ms without the cache"),
        (f"{e.hit_tokens:,}-token hit ({e.hit_tokens // 16} blocks)", f"{e.saved_s * 1e3:.1f} ms saved"),
        ("share of prefill saved", f"{e.saved_fraction:.0%}"),
    ]
