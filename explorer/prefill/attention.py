"""Causal attention of a suffix over a cached prefix.

The queries are the last ``Lq`` of ``Lk`` positions: query ``i`` sits at position
``Lk - Lq + i`` and may see keys ``0 .. Lk - Lq + i``. That is the *lower-right* aligned causal
mask. SDPA's ``is_causal=True`` aligns the triangle to the upper left (query ``i`` sees keys
``0 .. i``), which is only right when ``Lq == Lk``; on a cached prefix it would hide almost the
whole prefix from the suffix, and the logits would silently be wrong.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def lower_right_mask(num_queries: int, num_keys: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Boolean [Lq, Lk] mask, True where a query may see a key (queries aligned to the end)."""
    ones = torch.ones(num_queries, num_keys, dtype=torch.bool, device=device)
    return ones.tril(diagonal=num_keys - num_queries)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Attention output ``[heads, Lq, head_dim]`` for q ``[heads, Lq, D]`` and k, v
    ``[kv_heads, Lk, D]`` (grouped-query: each KV head serves heads / kv_heads query heads)."""
    num_q, num_k = q.shape[1], k.shape[1]
    if num_q > num_k:
        raise ValueError(f"{num_q} queries cannot be the last positions of {num_k} keys")
    q, k, v = q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0)
    if q.is_cuda:
        # Fused kernels (flash / memory-efficient) keep a 32k-token prefill from materializing a
        # 32k x 32k score matrix. They want as many KV heads as query heads, and only the
        # CausalBias object reaches their lower-right variant.
        from torch.nn.attention.bias import causal_lower_right

        group = q.shape[1] // k.shape[1]
        if group > 1:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        if num_q == num_k:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(num_q, num_k))
    elif num_q == num_k:
        # Square: upper-left and lower-right coincide, and the CPU kernel skips masked tiles.
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    else:
        mask = lower_right_mask(num_q, num_k, q.device)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    return out.squeeze(0)
