"""The estimate and the FLOP count (torch-free)."""

from __future__ import annotations

import pytest

from explorer.prefill.configs import LLAMA3_8B_SHAPE, MODELS, SMOLLM2_135M, TINY
from explorer.prefill.estimate import (
    causal_pairs,
    estimate_prefill,
    flop_ideal_fraction,
    gpu_peak_flops,
    prefill_flops,
    walkthrough_estimate,
    walkthrough_table,
)


def test_walkthrough_numbers():
    e = walkthrough_estimate()
    assert round(e.per_token_s * 1e6, 1) == 32.5
    assert round(e.full_s * 1e3, 1) == 39.0
    assert round(e.saved_s * 1e3, 1) == 32.2
    assert round(e.saved_fraction * 100) == 83
    assert walkthrough_table(e) == [
        ("prefill per token", "32.5 us"),
        ("1,200-token prompt", "39.0 ms without the cache"),
        ("992-token hit (62 blocks)", "32.2 ms saved"),
        ("share of prefill saved", "83%"),
    ]


def test_attention_term_adds_cost_that_a_hit_also_saves():
    plain, attn = walkthrough_estimate(), walkthrough_estimate(with_attention=True)
    assert attn.full_s > plain.full_s and attn.saved_s > plain.saved_s
    pairs = 1200 * 1201 // 2
    extra = 4 * 32 * 32 * 128 * pairs / (989e12 * 0.5)
    assert attn.full_s == pytest.approx(plain.full_s + extra)


def test_parameter_counts():
    assert LLAMA3_8B_SHAPE.total_params == 8_030_261_248  # Llama-3.1-8B
    assert SMOLLM2_135M.total_params == 134_515_008  # SmolLM2-135M, tied embeddings
    for cfg in MODELS.values():
        assert cfg.total_params > cfg.non_embedding_params > 0


def test_causal_pairs_counts_the_diagonal():
    assert causal_pairs(0, 1) == 1
    assert causal_pairs(0, 3) == 1 + 2 + 3
    assert causal_pairs(2, 3) == 3  # position 2 sees keys 0, 1, 2
    assert causal_pairs(0, 1200) == causal_pairs(0, 992) + causal_pairs(992, 1200)
    with pytest.raises(ValueError):
        causal_pairs(3, 2)


def test_prefill_flops_by_hand_for_tiny():
    c = TINY
    per_layer = 64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128 + 2 * 64
    non_emb = 2 * per_layer + 64
    assert c.non_embedding_params == non_emb
    pairs = sum(p + 1 for p in range(96, 200))
    want = 2 * non_emb * 104 + 4 * 2 * 4 * 16 * pairs + 2 * 512 * 64
    assert prefill_flops(c, 200, 96) == want
    assert flop_ideal_fraction(c, 200, 0) == 0.0
    assert 0 < flop_ideal_fraction(c, 200, 96) < 96 / 200  # the LM head and long rows remain


def test_estimate_rejects_nonsense():
    with pytest.raises(ValueError):
        estimate_prefill(1e9, 100, 100, 1e12, 0.5)  # the last token always runs
    with pytest.raises(ValueError):
        estimate_prefill(1e9, 100, 0, 1e12, 0.0)


def test_gpu_peaks():
    assert gpu_peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert gpu_peak_flops("NVIDIA H100 PCIe") == 756e12
    assert gpu_peak_flops("NVIDIA A100-SXM4-80GB") == 312e12
    assert gpu_peak_flops("Some Future Accelerator") is None


def test_estimate_for_model_saves_exactly_the_flop_ideal():
    from explorer.prefill.estimate import estimate_for_model

    e = estimate_for_model(LLAMA3_8B_SHAPE, 1200, 992, 989e12, 0.5)
    assert e.saved_fraction == pytest.approx(flop_ideal_fraction(LLAMA3_8B_SHAPE, 1200, 992))
    assert e.full_s == pytest.approx(prefill_flops(LLAMA3_8B_SHAPE, 1200, 0) / (989e12 * 0.5))
    # 2 x non-embedding params only: a little under the walkthrough's 2 x 8.03e9 per token
    assert e.per_token_s < walkthrough_estimate().per_token_s


def test_format_seconds():
    from explorer.prefill.estimate import format_seconds

    assert format_seconds(0.0325e-3) == "32.5 us"
    assert format_seconds(0.039) == "39 ms"
    assert format_seconds(2.5) == "2.5 s"
    assert format_seconds(5e-9) == "5 ns"
