"""Drafts in the scheduler: vLLM's Scheduler with a SpeculativeConfig (vllm/v1/core/sched/
scheduler.py, 0.31.0; spec part 2, rules 72-74), as a mixin of the mirrored `Scheduler`.

One decode step of a request with drafts, in the synchronous scheduler:
1. after the step that sampled its last token, the drafter proposes k drafts
   (``update_draft_token_ids``, called by the engine's ``post_step``; prefill chunks get none);
2. the running loop schedules ``num_tokens_with_spec - num_computed_tokens`` tokens (1 + the
   drafts), fewer when the budget or ``max_model_len`` cuts them, and the drafts that fit go
   into ``scheduled_spec_decode_tokens``; ``allocate_slots`` adds ``num_lookahead_tokens``
   slots and caches only up to ``request.num_tokens``: draft positions are never hashed;
3. ``_update_after_schedule`` moves ``num_computed_tokens`` past the drafts;
4. the model answers with the accepted drafts plus one bonus token, and ``update_from_output``
   rolls ``num_computed_tokens`` back by the rejected ones before appending the tokens.
A request admitted from the waiting queue with exactly one token to compute is padded to
1 + k tokens with k placeholder drafts (``-1``), so that the batch stays uniform; none of them
can be accepted (``pad_spec_decode``, scheduler.py:1086-1108, 1317-1321).

Under the AsyncScheduler the drafts never reach the scheduler: the worker proposes them on the
device and puts them into the next batch itself. The scheduler holds k placeholders (``-1``) in
``spec_token_ids`` for every scheduled request that samples (`_set_placeholder_drafts`), so the
running loop schedules them as drafts, and counts the step's 1 + drafts as output placeholders
(async_scheduler.py); rejections then roll both ``num_computed_tokens`` and the placeholders
back. A verified batch's drafts are an admission's padding when the waiting loop admitted it
(`is_padding`): the only ``-1`` drafts no drafter stands behind.

Each scheduled request also costs the step's input budget ``max_num_new_slots_for_drafting``
slots beyond its tokens (draft models: 1); `_input_room` is what is left of both budgets.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from explorer.core.errors import ConfigError
from explorer.core.kv_cache_manager import KVCacheManager
from explorer.core.kv_cache_observer import KVCacheObserver
from explorer.core.request import Request
from explorer.core.sched.output import SchedulerOutput, SpecDecodingStats
from explorer.core.sched.speculative import SpeculativeConfig

# A placeholder draft: scheduled to keep the batch uniform, never accepted.
PLACEHOLDER = -1


@dataclass
class DraftTokenIds:
    """The drafter's proposals after a step (vllm/v1/outputs.py:361-365)."""

    req_ids: list[str] = field(default_factory=list)
    draft_token_ids: list[list[int]] = field(default_factory=list)


def is_padding(scheduler_output: SchedulerOutput, req_id: str) -> bool:
    """Whether the request's drafts in this batch are an admission's padding: only the waiting
    loop pads, and a request admitted in a step has no drafter's proposals yet."""
    return req_id in scheduler_output.scheduled_new_reqs or req_id in scheduler_output.scheduled_resumed_reqs


class SpecDecodeMixin:
    """The draft-token parts of `Scheduler`; with no SpeculativeConfig every hook is a no-op."""

    # Provided by Scheduler.
    requests: dict[str, Request]
    observer: KVCacheObserver | None
    max_model_len: int
    kv_cache_manager: KVCacheManager

    def _init_spec_decode(self, speculative_config: SpeculativeConfig | None) -> None:
        """scheduler.py:274-318: the numbers the scheduler reads off the config (num_spec_tokens,
        num_lookahead_tokens, use_eagle_block_drop); the manager
        (built by the caller here, by the scheduler in vLLM) must drop what the config drops."""
        spec = speculative_config
        self.speculative_config = spec
        self.num_spec_tokens = 0 if spec is None else spec.num_speculative_tokens
        self.num_lookahead_tokens = 0 if spec is None else spec.num_lookahead_tokens
        self.num_prefill_lookahead = 0 if spec is None else spec.num_prefill_lookahead_tokens
        self.draft_slots = 0 if spec is None else spec.max_num_new_slots_for_drafting
        mgr = self.kv_cache_manager
        # vLLM 0.33's lookahead hashes clear the drop (scheduler.py:342-345 in 0.33.0).
        use_eagle = spec is not None and spec.use_eagle_block_drop() and not mgr.block_pool.num_hash_lookahead_tokens
        if mgr.use_eagle != use_eagle or mgr.num_prefill_lookahead != self.num_prefill_lookahead:
            raise ConfigError(
                f"the KV cache manager was built with use_eagle={mgr.use_eagle}, num_prefill_lookahead="
                f"{mgr.num_prefill_lookahead}; the speculative config needs {use_eagle}, {self.num_prefill_lookahead}"
            )
        # This schedule()'s scheduled_spec_decode_tokens, until its SchedulerOutput takes them.
        self._scheduled_spec_tokens: dict[str, list[int]] = {}
        # This schedule()'s running loop, as the waiting loop's padding rule reads it.
        self._pad_context = (False, False)

    # ---- schedule ------------------------------------------------------------------------

    def _input_room(self, token_budget: int, num_scheduled_tokens: dict[str, int]) -> int:
        """``min(token_budget, input_budget - draft_slots)`` (scheduler.py:632, 682, 888, 1073):
        the input budget starts equal to the token budget and each scheduled request takes its
        tokens plus ``draft_slots`` from it. Scheduling stops when it is not positive."""
        return token_budget - self.draft_slots * (len(num_scheduled_tokens) + 1)

    def _reserve_prefill_lookahead(self, request: Request, num_computed_tokens: int, num_new_tokens: int) -> int:
        """Multi-module MTP never ends a prefill chunk within num_prefill_lookahead of the
        prefill's end (scheduler.py:541-560); a no-op for the rest of the EAGLE family."""
        remaining = request.num_tokens - num_computed_tokens - num_new_tokens
        if 0 < remaining < self.num_prefill_lookahead:
            num_new_tokens -= self.num_prefill_lookahead - remaining
        return max(num_new_tokens, 0)

    def _schedule_spec_tokens(self, request: Request, num_new_tokens: int) -> None:
        """The running loop's drafts that fit in the scheduled tokens (scheduled_spec_decode_tokens,
        scheduler.py:829-845);
        the request's drafts are used up either way. What the waiting loop's padding reads of
        the running loop is noted too: someone was scheduled, and whether a prefill chunk was
        (prefill_scheduled, scheduler.py:596, 821; ``is_prefill_chunk`` still says what the last step left)."""
        self._pad_context = (True, self._pad_context[1] or request.is_prefill_chunk)
        if not request.spec_token_ids:
            return
        num_scheduled_spec_tokens = (
            num_new_tokens + request.num_computed_tokens - request.num_tokens - request.num_output_placeholders
        )
        if num_scheduled_spec_tokens > 0:
            self._scheduled_spec_tokens[request.request_id] = request.spec_token_ids[:num_scheduled_spec_tokens]
        request.spec_token_ids = []

    def _pad_spec_decode(self, num_computed_tokens: int, num_new_tokens: int, room: int) -> int | None:
        """An admission with one token to compute is padded to 1 + k (``pad_spec_decode``,
        scheduler.py:1086-1108);
        None when the padded tokens do not fit: vLLM then schedules no more waiting requests
        rather than an unpadded one (the caller ends the waiting pass). The padding itself is
        noted by `_note_padding`."""
        k = self.num_spec_tokens
        any_running, prefill_scheduled = self._pad_context
        if not (k > 0 and num_new_tokens == 1 and not prefill_scheduled and (any_running or num_computed_tokens > 0)):
            return num_new_tokens
        if num_computed_tokens + 1 + k + 1 > self.max_model_len:
            return num_new_tokens
        return None if 1 + k > room else 1 + k

    def _note_padding(self, request: Request, num_new_tokens: int, num_computed_tokens: int) -> None:
        """An admitted request scheduled past its tokens was padded: k placeholder drafts."""
        if self.num_spec_tokens and num_computed_tokens + num_new_tokens > request.num_tokens:
            self._scheduled_spec_tokens[request.request_id] = [PLACEHOLDER] * self.num_spec_tokens

    def _take_spec_tokens(self) -> dict[str, list[int]]:
        taken, self._scheduled_spec_tokens = self._scheduled_spec_tokens, {}
        self._pad_context = (False, False)
        return taken

    # ---- update --------------------------------------------------------------------------

    def _roll_back_rejected(
        self,
        request: Request,
        scheduler_output: SchedulerOutput,
        generated: list[int],
        is_stale: bool,
        stats: SpecDecodingStats | None,
    ) -> SpecDecodingStats | None:
        """Rejected drafts leave ``num_computed_tokens`` (scheduler.py:2051-2069): the model
        returns the accepted drafts plus one bonus token. The update's `SpecDecodingStats`
        (made at its first verified request, with stats logged) observe each request's drafts,
        placeholders and stale outputs included (make_spec_decoding_stats)."""
        spec = scheduler_output.scheduled_spec_decode_tokens.get(request.request_id)
        if not spec or not generated:
            return stats
        num_accepted = max(len(generated) - 1, 0)
        num_rejected = len(spec) - num_accepted
        if not is_stale:
            if request.num_computed_tokens > 0:
                request.num_computed_tokens -= num_rejected
            if request.num_output_placeholders > 0:
                request.num_output_placeholders -= num_rejected
        if self.kv_cache_manager.log_stats:
            stats = stats or SpecDecodingStats.new(self.num_spec_tokens)
            stats.observe_draft(len(spec), num_accepted)
        if self.observer is not None:
            self.observer.on_drafts_verified(
                request.request_id,
                len(spec),
                num_accepted,
                is_padding(scheduler_output, request.request_id),
                request.num_computed_tokens,
            )
        return stats

    def _set_placeholder_drafts(self, request: Request) -> None:
        """Async: the worker proposes the next drafts on the device, so the scheduler holds k
        placeholders (``-1``) in their stead, scheduled like drafts next step
        (AsyncScheduler._update_after_schedule, async_scheduler.py:27-50; no dynamic k here, so always ``num_speculative_tokens``)."""
        if not self.num_spec_tokens:
            return
        request.spec_token_ids = [PLACEHOLDER] * self.num_spec_tokens
        if self.observer is not None:
            self.observer.on_drafts_proposed(request.request_id, self.num_spec_tokens)

    def update_draft_token_ids(self, draft_token_ids: DraftTokenIds) -> None:
        """The drafter's proposals become the requests' next drafts; a prefill chunk or a
        finished request gets none (scheduler.py:2491-2510)."""
        for req_id, spec_token_ids in zip(draft_token_ids.req_ids, draft_token_ids.draft_token_ids, strict=True):
            request = self.requests.get(req_id)
            if request is None or request.is_finished():
                continue
            if request.is_prefill_chunk:
                request.spec_token_ids = []
                continue
            request.spec_token_ids = list(spec_token_ids)
            if self.observer is not None:
                self.observer.on_drafts_proposed(req_id, len(spec_token_ids))
