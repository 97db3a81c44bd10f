"""The suffix-over-prefix causal mask, against explicit attention on random inputs."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from explorer.prefill.attention import causal_attention, lower_right_mask  # noqa: E402


def explicit_attention(q, k, v):
    """Textbook attention; query i of Lq sits at position Lk - Lq + i."""
    heads, lq, d = q.shape
    lk = k.shape[1]
    group = heads // k.shape[0]
    k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
    scores = q @ k.transpose(1, 2) / math.sqrt(d)
    qpos = torch.arange(lq)[:, None] + (lk - lq)
    scores = scores.masked_fill(torch.arange(lk)[None, :] > qpos, float("-inf"))
    return scores.softmax(-1) @ v


@pytest.mark.parametrize("lq, lk", [(1, 1), (7, 7), (1, 50), (20, 53), (33, 33), (16, 200)])
@pytest.mark.parametrize("heads, kv_heads", [(4, 4), (4, 2), (9, 3)])
def test_matches_explicit_attention(fresh_seed, lq, lk, heads, kv_heads):
    g = torch.Generator().manual_seed(fresh_seed)
    q = torch.randn(heads, lq, 16, generator=g)
    k = torch.randn(kv_heads, lk, 16, generator=g)
    v = torch.randn(kv_heads, lk, 16, generator=g)
    got = causal_attention(q, k, v)
    torch.testing.assert_close(got, explicit_attention(q, k, v), rtol=1e-5, atol=1e-5)


def test_upper_left_mask_would_be_wrong_for_a_suffix(fresh_seed):
    """SDPA's is_causal aligns to the top left: on a suffix it hides the cached prefix."""
    g = torch.Generator().manual_seed(fresh_seed)
    q, k, v = (torch.randn(2, n, 8, generator=g) for n in (5, 20, 20))
    wrong = torch.nn.functional.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True)[0]
    assert (causal_attention(q, k, v) - wrong).abs().max() > 1e-2


def test_lower_right_mask_shape():
    m = lower_right_mask(3, 5)
    assert m.tolist() == [
        [True, True, True, False, False],
        [True, True, True, True, False],
        [True, True, True, True, True],
    ]


def test_more_queries_than_keys_is_refused():
    with pytest.raises(ValueError):
        causal_attention(torch.randn(1, 4, 8), torch.randn(1, 3, 8), torch.randn(1, 3, 8))
