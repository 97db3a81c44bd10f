"""A plain reference forward for the tests: one contiguous sequence, no pool, no SDPA.

Written the textbook way (explicit scores, an additive -inf mask, softmax, KV heads repeated
for grouped-query attention, rotary embeddings through rotate_half) so that it shares no
attention or cache code with the paged model it checks.
"""

from __future__ import annotations

import math

import torch

from explorer.prefill.configs import ModelConfig
from explorer.prefill.model import LlamaWeights


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return w * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


@torch.no_grad()
def reference_logits(cfg: ModelConfig, w: LlamaWeights, token_ids: list[int]) -> torch.Tensor:
    """Float32 logits of every position ``[n, vocab]``."""
    n, H, G, d = len(token_ids), cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    pos = torch.arange(n, dtype=torch.float32)
    inv = 1.0 / cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    ang = torch.cat([pos[:, None] * inv[None, :]] * 2, dim=-1)  # [n, d]
    cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
    mask = torch.full((n, n), float("-inf")).triu(1)  # query i sees keys 0..i

    x = w.embed[torch.tensor(token_ids)].float()
    for lw in w.layers:
        h = _rms(x, lw.attn_norm.float(), cfg.rms_norm_eps)
        qkv = h @ lw.wqkv.float().T
        q = qkv[:, : H * d].view(n, H, d)
        k = qkv[:, H * d : (H + G) * d].view(n, G, d)
        v = qkv[:, (H + G) * d :].view(n, G, d)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        k = k.repeat_interleave(H // G, dim=1)
        v = v.repeat_interleave(H // G, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(d) + mask
        out = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(n, H * d)
        x = x + out @ lw.wo.float().T
        h = _rms(x, lw.ffn_norm.float(), cfg.rms_norm_eps)
        gate, up = (h @ lw.w_gate_up.float().T).chunk(2, dim=-1)
        x = x + (torch.nn.functional.silu(gate) * up) @ lw.w_down.float().T
    return _rms(x, w.norm.float(), cfg.rms_norm_eps) @ w.lm_head.float().T
