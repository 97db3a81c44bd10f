"""The scheduler settings prefix caching feels (vllm/config/scheduler.py, 0.31.0)."""

from __future__ import annotations

from dataclasses import dataclass

from explorer.core.errors import ConfigError
from explorer.core.release import VLLM_0_31, VllmRelease
from explorer.core.sched.speculative import SpeculativeConfig


@dataclass(frozen=True)
class SchedulerConfig:
    """vLLM's SchedulerConfig fields that change a prefix-cache decision; the rest keep their
    defaults (chunked prefill on, FCFS, scheduler_reserve_full_isl on, watermark 0)."""

    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 64
    long_prefill_token_threshold: int = 0
    async_scheduling: bool = True
    # vLLM's VllmConfig.speculative_config (None: no drafts), kept here beside the settings it
    # constrains; see core/sched/speculative.py.
    speculative_config: SpeculativeConfig | None = None
    # The release whose behaviour the scheduler follows where 0.31.0 and 0.33.0 differ.
    release: VllmRelease = VLLM_0_31

    def check(self, max_model_len: int) -> None:
        """vLLM's own refusals (SchedulerConfig.verify_max_model_len, config/scheduler.py:315-360),
        plus a budget of at least one."""
        if self.max_num_batched_tokens < 1 or self.max_num_seqs < 1:
            raise ConfigError("max_num_batched_tokens and max_num_seqs must be at least 1")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ConfigError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be greater than "
                f"or equal to max_num_seqs ({self.max_num_seqs})"
            )
        if not 0 <= self.long_prefill_token_threshold <= max_model_len:
            raise ConfigError(
                f"long_prefill_token_threshold ({self.long_prefill_token_threshold}) must be in "
                f"[0, max_model_len = {max_model_len}]"
            )
        if self.speculative_config is not None:
            self.speculative_config.check(
                self.max_num_batched_tokens, self.async_scheduling, self.long_prefill_token_threshold
            )
