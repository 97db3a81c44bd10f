"""The paged KV pool: one tensor whose block index is the BlockPool's block id.

Shape ``[layers, 2 (K and V), num_blocks, block_size, kv_heads, head_dim]``: block 7 of the
explorer's pool picture is ``pool.kv[:, :, 7]``. A request never owns memory of its own; its
block table (the block ids the KV cache manager gave it, in token order) says where its token
``p`` lives: block ``table[p // block_size]``, slot ``p % block_size``. That is the whole trick
of a prefix-cache hit: two requests whose tables start with the same ids read the same K and V.
"""

from __future__ import annotations

import torch


class PagedKVPool:
    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: str | torch.device,
    ) -> None:
        self.block_size = block_size
        self.num_blocks = num_blocks
        # NaN, not zeros: a slot read before it was written then poisons the logits instead of
        # passing for a plausible value, so a wrong block table cannot go unnoticed.
        self.kv = torch.full(
            (num_layers, 2, num_blocks, block_size, num_kv_heads, head_dim), float("nan"), dtype=dtype, device=device
        )

    def slot_ids(self, block_table: torch.Tensor, start: int, end: int) -> torch.Tensor:
        """Flat slot index (block id x block_size + offset) of token positions [start, end)."""
        pos = torch.arange(start, end, device=block_table.device)
        return block_table[pos // self.block_size] * self.block_size + pos % self.block_size

    def _flat(self, layer: int, which: int) -> torch.Tensor:
        # kv[layer, which] is one contiguous [num_blocks, block_size, heads, dim] chunk, so
        # this view aliases the pool: writes through it land in the pool.
        return self.kv[layer, which].view(-1, *self.kv.shape[-2:])

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store K and V ``[tokens, kv_heads, head_dim]`` of new tokens in their slots."""
        self._flat(layer, 0).index_copy_(0, slots, k)
        self._flat(layer, 1).index_copy_(0, slots, v)

    def read(self, layer: int, block_table: torch.Tensor, num_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V ``[num_tokens, kv_heads, head_dim]`` of positions 0..num_tokens-1, gathered
        block by block through the table (hit blocks exactly as they are in the pool)."""
        nblocks = -(-num_tokens // self.block_size)
        ids = block_table[:nblocks]
        k = self.kv[layer, 0].index_select(0, ids).flatten(0, 1)[:num_tokens]
        v = self.kv[layer, 1].index_select(0, ids).flatten(0, 1)[:num_tokens]
        return k, v
