"""A Llama-style decoder in plain torch whose KV cache is the paged pool.

RMSNorm, rotary position embeddings (the half-split layout: dimension i pairs with i + d/2),
grouped-query attention and a SwiGLU MLP: the architecture of SmolLM2 and Llama 3. There is no
cache of its own: ``forward`` computes the tokens at positions [start, start + n), writes their
K and V into the pool slots that the block table names, and attends over positions
[0, start + n) read back from the pool, cached prefix included. With ``start = hit`` that is a
prefill that reuses a prefix-cache hit; with ``start = 0`` a full prefill; with one token a
decode step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from explorer.prefill.attention import causal_attention
from explorer.prefill.configs import BLOCK_SIZE, ModelConfig
from explorer.prefill.paged_kv import PagedKVPool


@dataclass
class LayerWeights:
    attn_norm: torch.Tensor  # [hidden]
    wqkv: torch.Tensor  # [(heads + 2 kv_heads) * head_dim, hidden]: Q, K, V rows stacked, one matmul
    wo: torch.Tensor  # [hidden, heads * head_dim]
    ffn_norm: torch.Tensor  # [hidden]
    w_gate_up: torch.Tensor  # [2 * intermediate, hidden]: gate rows, then up rows
    w_down: torch.Tensor  # [hidden, intermediate]


@dataclass
class LlamaWeights:
    embed: torch.Tensor  # [vocab, hidden]
    layers: list[LayerWeights]
    norm: torch.Tensor  # [hidden]
    lm_head: torch.Tensor  # [vocab, hidden]; the embedding tensor itself when tied


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # Normalise in float32 even when the model runs in bf16: the mean of squares of a
    # 4096-wide row loses too much in 8 bits of mantissa.
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x ``[tokens, heads, d]``: the pair (i, i + d/2) turns by angle position x freq_i."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    return out.to(x.dtype)


class PagedLlama:
    def __init__(self, cfg: ModelConfig, weights: LlamaWeights, device: str | torch.device, dtype: torch.dtype):
        self.cfg = cfg
        self.w = weights
        self.device = torch.device(device)
        self.dtype = dtype
        half = torch.arange(0, cfg.head_dim, 2, dtype=torch.float32, device=self.device)
        self.inv_freq = 1.0 / (cfg.rope_theta ** (half / cfg.head_dim))  # [d/2], float32

    def new_pool(self, num_blocks: int, block_size: int = BLOCK_SIZE) -> PagedKVPool:
        c = self.cfg
        return PagedKVPool(c.num_layers, num_blocks, block_size, c.num_kv_heads, c.head_dim, self.dtype, self.device)

    def _rope_tables(self, start: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        pos = torch.arange(start, end, dtype=torch.float32, device=self.device)
        angles = torch.outer(pos, self.inv_freq)[:, None, :]  # [tokens, 1 (heads), d/2]
        return angles.cos(), angles.sin()

    @torch.inference_mode()
    def forward(
        self,
        token_ids: Sequence[int] | torch.Tensor,
        start: int,
        block_table: Sequence[int] | torch.Tensor,
        pool: PagedKVPool,
        all_logits: bool = False,
    ) -> torch.Tensor:
        """Float32 logits of the last token ``[vocab]`` (or of every computed token
        ``[n, vocab]``) for ``token_ids`` at positions [start, start + n).

        Positions [0, start) must already be in the pool under ``block_table``: that is the
        hit, read exactly as it is. ``block_table`` must cover positions up to start + n.
        """
        c = self.cfg
        ids = torch.as_tensor(token_ids, dtype=torch.long, device=self.device)
        table = torch.as_tensor(block_table, dtype=torch.long, device=self.device)
        n = ids.shape[0]
        end = start + n
        if n == 0 or start < 0:
            raise ValueError(f"need at least one token at a position >= 0, got {n} at {start}")
        if table.shape[0] * pool.block_size < end:
            raise ValueError(f"block table covers {table.shape[0] * pool.block_size} positions, need {end}")
        slots = pool.slot_ids(table, start, end)
        cos, sin = self._rope_tables(start, end)
        nq, nkv, d = c.num_heads, c.num_kv_heads, c.head_dim

        x = self.w.embed[ids]  # [n, hidden]
        for i, lw in enumerate(self.w.layers):
            h = rms_norm(x, lw.attn_norm, c.rms_norm_eps)
            q, k, v = F.linear(h, lw.wqkv).split((nq * d, nkv * d, nkv * d), dim=-1)
            q = apply_rope(q.view(n, nq, d), cos, sin)
            k = apply_rope(k.view(n, nkv, d), cos, sin)
            pool.write(i, slots, k, v.view(n, nkv, d))
            keys, values = pool.read(i, table, end)  # [end, kv_heads, d], prefix from the pool
            attn = causal_attention(q.transpose(0, 1), keys.transpose(0, 1), values.transpose(0, 1))
            x = x + F.linear(attn.transpose(0, 1).reshape(n, nq * d), lw.wo)

            h = rms_norm(x, lw.ffn_norm, c.rms_norm_eps)
            gate, up = F.linear(h, lw.w_gate_up).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, lw.w_down)

        if not all_logits:
            x = x[-1:]  # a prefill needs the last token's logits only: the LM head runs once
        logits = F.linear(rms_norm(x, self.w.norm, c.rms_norm_eps), self.w.lm_head).float()
        return logits if all_logits else logits[0]
