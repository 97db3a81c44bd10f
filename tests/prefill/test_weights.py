"""Weight handling: llama.cpp's Q/K row order, and seeded random weights."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from explorer.prefill.configs import TINY  # noqa: E402
from explorer.prefill.model import apply_rope  # noqa: E402
from explorer.prefill.weights import random_weights, unpermute_rope_rows  # noqa: E402


def llama_cpp_order(w: torch.Tensor, heads: int) -> torch.Tensor:
    """What the GGUF converter does, written from its description: within each head, output row
    2i + j is input row j * d/2 + i (the two rotary halves interleaved)."""
    rows, cols = w.shape
    d = rows // heads
    out = torch.empty_like(w)
    for h in range(heads):
        for i in range(d // 2):
            for j in range(2):
                out[h * d + 2 * i + j] = w[h * d + j * d // 2 + i]
    return out


def interleaved_rope(x: torch.Tensor, pos: int, theta: float) -> torch.Tensor:
    """llama.cpp's rotation: pairs (2i, 2i+1) of x [heads, d] turn by pos x theta^(-2i/d)."""
    d = x.shape[-1]
    ang = pos / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    a, b = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = a * ang.cos() - b * ang.sin()
    out[..., 1::2] = a * ang.sin() + b * ang.cos()
    return out


def test_unpermute_undoes_the_converter(fresh_seed):
    g = torch.Generator().manual_seed(fresh_seed)
    for heads, d in [(3, 64), (9, 64), (2, 8)]:
        w = torch.randn(heads * d, 5, generator=g)
        assert torch.equal(unpermute_rope_rows(llama_cpp_order(w, heads), heads), w)


def test_same_rotation_in_either_layout(fresh_seed):
    """Interleaved rope on GGUF rows = half-split rope on our rows, reordered the same way."""
    g = torch.Generator().manual_seed(fresh_seed)
    heads, d, hidden, pos, theta = 3, 16, 12, 37, 10000.0
    w_hf = torch.randn(heads * d, hidden, generator=g, dtype=torch.float64)
    w_gguf = llama_cpp_order(w_hf, heads)
    x = torch.randn(hidden, generator=g, dtype=torch.float64)
    rot_gguf = interleaved_rope((w_gguf @ x).view(heads, d), pos, theta)
    ours = unpermute_rope_rows(w_gguf, heads) @ x
    ang = pos / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    rot_ours = apply_rope(ours.view(1, heads, d), ang.cos(), ang.sin())[0]
    back = unpermute_rope_rows(rot_gguf.reshape(heads * d, 1), heads).view(heads, d)
    # apply_rope computes in float32 (as the model does), so compare at float32 precision.
    torch.testing.assert_close(rot_ours, back, rtol=1e-5, atol=1e-4)


def test_random_weights_are_seeded():
    a = random_weights(TINY, "cpu", torch.float32, seed=3)
    b = random_weights(TINY, "cpu", torch.float32, seed=3)
    c = random_weights(TINY, "cpu", torch.float32, seed=4)
    assert torch.equal(a.layers[1].wqkv, b.layers[1].wqkv)
    assert not torch.equal(a.layers[1].wqkv, c.layers[1].wqkv)
    assert a.layers[0].wqkv.shape == ((4 + 2 * 2) * 16, 64)
    assert a.lm_head.shape == (512, 64) and a.lm_head is not a.embed  # tiny is untied
