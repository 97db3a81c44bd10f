"""Speculative decoding's settings, as prefix caching feels them (vllm/config/speculative.py and
the properties of vllm/config/vllm.py that read it, 0.31.0; spec part 2, rules 72-74).

A drafter proposes ``num_speculative_tokens`` (k) tokens after each decode step; the next step
verifies them. Three numbers reach the KV cache:

- ``use_eagle_block_drop()``: the EAGLE family (eagle, eagle3, mtp, dflash, dspark) drops the
  last block of every prefix-cache hit, because the drafter needs the hidden state of the last
  matched position (speculative.py:1938-1946);
- ``num_lookahead_tokens``: slots every ``allocate_slots`` adds past the scheduled tokens, for
  the drafter's KV: k for the EAGLE family and draft models, k + 1 for DFlash, 0 otherwise
  (ngram, vllm.py:629-654); they are never hashed, since the cache cap stays ``request.num_tokens``;
- ``num_prefill_lookahead_tokens``: prefill tokens past the computed range the drafter reads: k
  for multi-module MTP, 1 for the rest of the EAGLE family, 0 otherwise (vllm.py:656-677); the
  manager never caches the last ``num_prefill_lookahead - 1`` computed tokens, and multi-module
  MTP with prefix caching needs a block size of at least k (kv_cache_coordinator.py:112-132).

``max_num_new_slots_for_drafting`` is what each scheduled request costs the step's input budget
beyond its tokens (speculative.py:1882-1918).
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.core.errors import ConfigError

# The methods modelled, by vLLM's names. vLLM knows more (medusa, suffix, ...), none of which
# changes a prefix-cache decision beyond these.
SPEC_METHODS = ("eagle", "eagle3", "mtp", "dflash", "dspark", "draft_model", "ngram")
# SpeculativeConfig.use_eagle(): "speculative decoding using target model hidden states".
EAGLE_METHODS = frozenset({"eagle", "eagle3", "mtp", "dflash", "dspark"})
# The drafters vLLM's V1 model runner runs under async scheduling (ngram's runs on the CPU).
ASYNC_METHODS = EAGLE_METHODS | {"draft_model"}


@dataclass(frozen=True)
class SpeculativeConfig:
    method: str
    num_speculative_tokens: int
    disable_eagle_block_drop: bool = False
    # The draft's num_nextn_predict_layers (mtp only): more than one module is multi-module MTP.
    num_mtp_modules: int = 1
    parallel_drafting: bool = False

    def __post_init__(self) -> None:
        if self.method not in SPEC_METHODS:
            raise ConfigError(f"unknown speculative method {self.method!r} (modelled: {', '.join(SPEC_METHODS)})")
        if isinstance(self.num_speculative_tokens, bool) or self.num_speculative_tokens < 1:
            raise ConfigError(f"num_speculative_tokens must be at least 1, got {self.num_speculative_tokens!r}")
        if self.num_mtp_modules < 1:
            raise ConfigError(f"num_mtp_modules must be at least 1, got {self.num_mtp_modules!r}")

    def use_eagle(self) -> bool:
        return self.method in EAGLE_METHODS

    def use_eagle_block_drop(self) -> bool:
        """Whether a prefix-cache hit loses its last block (the scheduler's ``use_eagle``)."""
        return self.use_eagle() and not self.disable_eagle_block_drop

    def num_hash_lookahead_tokens(self, lookahead_hashes: bool, enable_caching: bool, has_connector: bool) -> int:
        """Tokens past each block its hash covers: vLLM 0.33's EAGLE lookahead hashes
        (``lookahead_hashes``, a release switch) for the dropping family with caching on and no
        KV connector, else 0, the legacy hashes (config/vllm.py:677-692 in 0.33.0)."""
        if not (lookahead_hashes and enable_caching and self.use_eagle_block_drop()) or has_connector:
            return 0
        return self.num_prefill_lookahead_tokens

    def use_dflash(self) -> bool:
        return self.method == "dflash"

    def uses_draft_model(self) -> bool:
        return self.method == "draft_model"

    def use_multi_module_mtp(self) -> bool:
        return self.method == "mtp" and min(self.num_mtp_modules, self.num_speculative_tokens) > 1

    @property
    def num_lookahead_tokens(self) -> int:
        k = self.num_speculative_tokens
        if self.use_dflash():
            return k + 1
        if self.use_eagle() or self.uses_draft_model():
            return k
        return 0

    @property
    def num_prefill_lookahead_tokens(self) -> int:
        if not self.use_eagle():
            return 0
        return self.num_speculative_tokens if self.use_multi_module_mtp() else 1

    @property
    def max_num_new_slots_for_drafting(self) -> int:
        k = self.num_speculative_tokens
        if self.use_dflash():
            return k
        if self.parallel_drafting:
            return k if self.uses_draft_model() else k - 1
        return 1 if self.uses_draft_model() else 0

    def check(self, max_num_batched_tokens: int, async_scheduling: bool, long_prefill_token_threshold: int) -> None:
        """vLLM's refusals for the scheduler settings. A ``long_prefill_token_threshold`` of at
        most k is no refusal: vLLM asserts only when it cuts a padded admission, which the
        waiting pass reports as that step's error. Under the async scheduler (modelled: it holds
        placeholder drafts, async_scheduler.py) vLLM's V1 model runner takes only the drafters
        that run on the device, so ngram is refused (its speculative_config check,
        config/vllm.py:1554-1566; 0.33.0: 1651-1680)."""
        slots = self.max_num_new_slots_for_drafting
        if max_num_batched_tokens <= slots:
            raise ConfigError(
                "not enough slots to schedule a token and support the speculative decoding settings: "
                f"max_num_batched_tokens = {max_num_batched_tokens}, draft slots = {slots} (vllm.py:2381-2386)"
            )
        if async_scheduling and self.method not in ASYNC_METHODS:
            raise ConfigError(
                f"vLLM refuses async scheduling with {self.method!r} speculative decoding: it takes only "
                "EAGLE/MTP/Draft Model/NGram GPU/DSpark/DFlash drafters there"
            )
