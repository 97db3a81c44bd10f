"""The frontend's side of vLLM's metrics (vllm/v1/engine/output_processor.py and
vllm/v1/metrics/stats.py, 0.31.0): what the OutputProcessor records from each update's outputs.

The engine core reports, per update, an ``EngineCoreOutputs``: one output per request that
produced tokens or finished, carrying its first prefill's stats and its events since its last
output, and the step's ``SchedulerStats``. The frontend keeps one state per live request and
turns a batch of outputs into an ``IterationStats``: prompt tokens by source (from the first
output only), generation tokens, preemptions (a PREEMPTED event counts when the request's next
output arrives) and the stats of each request that finished. A request the user aborts is
dropped here first, as ``AsyncLLM.abort`` drops it: it never appears among the finished, and
events still pending for it are never counted. Timing (TTFT, latencies) is left out: it is wall
clock, not a prefix-cache fact.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from explorer.core.metrics import PrefillStats
from explorer.core.request import EngineCoreEventType
from explorer.core.sched.output import EngineCoreOutputs

# FinishReason's strings (vllm/v1/engine/__init__.py), in the enum's order.
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")


@dataclass
class PromptTokenStats:
    """Prompt tokens by source, summed over the first outputs of one batch (stats.py)."""

    computed: int = 0
    local_cache_hit: int = 0
    external_kv_transfer: int = 0
    cached_tokens: int = 0
    total: int = 0

    def update_from_output(self, prefill_stats: PrefillStats) -> None:
        self.computed += prefill_stats.num_computed_tokens
        self.cached_tokens += prefill_stats.num_cached_tokens
        self.total += prefill_stats.num_prompt_tokens
        self.local_cache_hit += prefill_stats.num_local_cached_tokens
        self.external_kv_transfer += prefill_stats.num_external_cached_tokens

    def get_by_source(self, source: str) -> int:
        return {
            "local_compute": self.computed,
            "local_cache_hit": self.local_cache_hit,
            "external_kv_transfer": self.external_kv_transfer,
        }[source]


@dataclass(frozen=True)
class FinishedRequestStats:
    finish_reason: str
    num_prompt_tokens: int
    num_preemptions: int
    num_generation_tokens: int
    max_tokens_param: int | None
    num_cached_tokens: int


@dataclass
class IterationStats:
    """What one batch of outputs adds to the counters (stats.py: IterationStats)."""

    num_generation_tokens: int = 0
    prompt_token_stats: PromptTokenStats = field(default_factory=PromptTokenStats)
    num_preempted_reqs: int = 0
    finished_requests: list[FinishedRequestStats] = field(default_factory=list)
    max_num_generation_tokens_iter: list[int] = field(default_factory=list)
    n_params_iter: list[int] = field(default_factory=list)

    @property
    def num_prompt_tokens(self) -> int:
        return self.prompt_token_stats.total


@dataclass
class RequestState:
    prompt_len: int
    max_tokens_param: int | None
    is_prefilling: bool = True
    num_cached_tokens: int = 0
    num_generation_tokens: int = 0
    num_preemptions: int = 0


class OutputProcessor:
    """One state per request the frontend knows; ``process_outputs`` returns the batch's stats
    (None for a batch without outputs, as AsyncLLM's output handler builds none)."""

    def __init__(self) -> None:
        self.request_states: dict[str, RequestState] = {}

    def add_request(self, request_id: str, prompt_len: int, max_tokens: int | None) -> None:
        self.request_states[request_id] = RequestState(prompt_len, max_tokens)

    def abort_request(self, request_id: str) -> bool:
        """The user's abort: forget the request (no finished stats). False if unknown."""
        return self.request_states.pop(request_id, None) is not None

    def process_outputs(self, engine_core_outputs: EngineCoreOutputs) -> IterationStats | None:
        if not engine_core_outputs.outputs:
            return None
        stats = IterationStats()
        for output in engine_core_outputs.outputs:
            state = self.request_states.get(output.request_id)
            if state is None:
                continue  # already aborted by the user
            num_new = len(output.new_token_ids)
            stats.num_generation_tokens += num_new
            if state.is_prefilling and output.prefill_stats is not None:
                stats.prompt_token_stats.update_from_output(output.prefill_stats)
            state.num_generation_tokens += num_new
            for event in output.events or ():
                if event == EngineCoreEventType.PREEMPTED:
                    stats.num_preempted_reqs += 1
                    state.num_preemptions += 1
            if state.is_prefilling:
                if output.prefill_stats is not None:
                    state.num_cached_tokens = output.prefill_stats.num_cached_tokens
                state.is_prefilling = False
            if output.finish_reason is not None:
                del self.request_states[output.request_id]
                stats.finished_requests.append(
                    FinishedRequestStats(
                        output.finish_reason,
                        state.prompt_len,
                        state.num_preemptions,
                        state.num_generation_tokens,
                        state.max_tokens_param,
                        state.num_cached_tokens,
                    )
                )
                # A request with n = 1 is its own parent (parallel_sampling.py:137-152).
                stats.max_num_generation_tokens_iter.append(state.num_generation_tokens)
                stats.n_params_iter.append(1)
        return stats
