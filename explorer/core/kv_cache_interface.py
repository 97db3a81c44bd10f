"""What a KV cache group is (vllm/v1/kv_cache_interface.py): its kind, block size and window.

A model's attention layers fall into KV cache groups; each group has one spec, and one
per-group manager (single_type_kv_cache_manager.py) keeps its block tables. Only what a
prefix-cache decision reads is modelled: the kind, the block size, and a sliding window's size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from explorer.core.errors import ConfigError

FULL_ATTENTION = "full_attention"
SLIDING_WINDOW = "sliding_window"


@dataclass(frozen=True, slots=True)
class KVCacheSpec:
    """One group's spec; ``kind`` is BlockStored.kv_cache_spec_kind (KVCacheSpecKind.value)."""

    block_size: int
    kind: str = FULL_ATTENTION
    sliding_window: int | None = None  # SlidingWindowSpec.sliding_window; None for full attention

    def __post_init__(self) -> None:
        if not isinstance(self.block_size, int) or self.block_size < 1:
            raise ConfigError(f"block_size must be a positive integer, got {self.block_size!r}")
        if self.kind == FULL_ATTENTION:
            if self.sliding_window is not None:
                raise ConfigError("a full-attention group has no sliding_window")
        elif self.kind == SLIDING_WINDOW:
            w = self.sliding_window
            if isinstance(w, bool) or not isinstance(w, int) or w < 1:
                raise ConfigError(f"sliding_window must be a positive integer, got {w!r}")
        else:
            raise ConfigError(f"unknown KV cache group kind {self.kind!r}")

    def max_admission_blocks_per_request(self, max_in_flight_tokens: int, max_model_len: int) -> int | None:
        """A sliding window's per-request cap for the admission gate (kv_cache_interface.py:840-866):
        the window plus the tokens in flight, +1 block for a window that starts mid-block."""
        if self.sliding_window is None:
            return None
        num_tokens = min(self.sliding_window - 1 + max_in_flight_tokens, max_model_len)
        return -(-num_tokens // self.block_size) + 1


def full_attention(block_size: int) -> KVCacheSpec:
    return KVCacheSpec(block_size)


def sliding_window(block_size: int, window: int) -> KVCacheSpec:
    return KVCacheSpec(block_size, SLIDING_WINDOW, window)


def default_hash_block_size(specs: Sequence[KVCacheSpec]) -> int:
    """The engine's hash block size: the GCD of the group block sizes (rule 69)."""
    return math.gcd(*(s.block_size for s in specs))


def scheduler_block_size(specs: Sequence[KVCacheSpec]) -> int:
    """The scheduling granularity: the LCM of the group block sizes (rule 69)."""
    return math.lcm(*(s.block_size for s in specs))


def check_retention_interval(
    retention_interval: int | None, sched_block_size: int, specs: Sequence[KVCacheSpec]
) -> None:
    """vLLM's ValueErrors for ``prefix_cache_retention_interval`` (coordinator.py:34-63)."""
    if retention_interval is None:
        return
    if not any(s.kind == SLIDING_WINDOW for s in specs):
        if retention_interval == 0:
            return
        raise ConfigError(
            "prefix_cache_retention_interval is set but this model has no sliding-window KV cache "
            "group, so retention has no effect (set it to 0)"
        )
    if retention_interval < 0 or retention_interval % sched_block_size != 0:
        raise ConfigError(
            f"prefix_cache_retention_interval ({retention_interval}) must be non-negative and a "
            f"multiple of the scheduler block size ({sched_block_size})"
        )
