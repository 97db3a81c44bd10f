"""What one engine step passes around: the scheduler's batch, the model's answer, the outputs.

vLLM spreads these over several files; here they sit together, with vLLM's names and only the
fields prefix caching touches:
- `SchedulerOutput` (vllm/v1/core/sched/output.py:231-329): the batch ``schedule()`` built;
- `ModelRunnerOutput` (vllm/v1/outputs.py): the sampled tokens of that batch, and the KV
  connector worker's report;
- `EngineCoreOutput` / `EngineCoreOutputs` (vllm/v1/engine/__init__.py): what
  ``update_from_output`` reports per request and per step;
- `SchedulerStats` (vllm/v1/metrics/stats.py:186-216) with its `PrefixCacheStats`,
  `SpecDecodingStats` (vllm/v1/spec_decode/metrics.py) and the offloading connector's
  scheduler-side `OffloadingConnectorStats` (kv_connector/v1/offloading/metrics.py);
- `KVEventPublisher`: where ``update_from_output`` publishes its one `KVEventBatch` per step
  (vllm/distributed/kv_events.py); `KVEventCollector` keeps them, as a test harness does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from explorer.core.events import KVEventBatch
from explorer.core.metrics import PrefillStats, PrefixCacheStats
from explorer.core.request import EngineCoreEventType


@dataclass
class SchedulerOutput:
    """The batch of one ``schedule()`` call. Requests are named by id; vLLM sends the worker
    the new requests' data (``NewRequestData``) and the cached ones' diff instead."""

    # Admitted from the waiting queue: first time / after a preemption (resumed).
    scheduled_new_reqs: list[str]
    scheduled_resumed_reqs: list[str]
    # From the running queue: decodes and later prefill chunks.
    scheduled_running_reqs: list[str]
    # req_id -> tokens scheduled, in scheduling order (running queue first, then waiting).
    num_scheduled_tokens: dict[str, int]
    total_num_scheduled_tokens: int
    # Requests that finished between the previous schedule() and this one (vLLM: a set).
    finished_req_ids: list[str]
    # Requests preempted since the previous schedule(), a reset's included (vLLM: a set).
    preempted_req_ids: list[str]
    # Not a field of vLLM's output: the preemptions this schedule() made, in order (its local
    # ``preempted_reqs``, scheduler.py:578); the replay reports them.
    preempted_reqs: list[str] = field(default_factory=list)
    # What the KV connector's worker side reads this step (build_connector_meta).
    kv_connector_metadata: object | None = None
    # Not vLLM's either: every connector allocation of this schedule() (update_state_after_alloc
    # with its num_external_tokens, 0 for the admission after a load), in order.
    external: dict[str, int] = field(default_factory=dict)
    # vLLM's req_to_new_blocks, every group: a request admitted from the waiting queue, its
    # whole block table; a running one, the blocks allocate_slots added (NewRequestData.block_ids,
    # CachedRequestData.new_block_ids); filled only with a KV connector.
    new_block_ids: dict[str, tuple[list[int], ...]] = field(default_factory=dict)
    # req_id -> the drafts scheduled with it (placeholders -1 for a padded admission).
    scheduled_spec_decode_tokens: dict[str, list[int]] = field(default_factory=dict)


@dataclass
class KVConnectorOutput:
    """What the worker side reports with a batch's output (vllm/v1/outputs.py)."""

    finished_sending: set[str] = field(default_factory=set)
    finished_recving: set[str] = field(default_factory=set)
    invalid_block_ids: set[int] = field(default_factory=set)
    # the offloading worker's completed job ids (OffloadingWorkerMetadata.completed_jobs)
    completed_jobs: list[int] = field(default_factory=list)


@dataclass
class ModelRunnerOutput:
    """The model's answer for a batch: one list of sampled tokens per scheduled request, empty
    for a prefill chunk (the runner discards a partial prefill's sample)."""

    req_ids: list[str]
    req_id_to_index: dict[str, int]
    sampled_token_ids: list[list[int]]
    kv_connector_output: KVConnectorOutput | None = None


@dataclass
class EngineCoreOutput:
    request_id: str
    new_token_ids: list[int]
    finish_reason: str | None = None  # "stop", "length", "abort", "error" (FinishReason)
    prefill_stats: PrefillStats | None = None  # with the request's first output only
    events: list[EngineCoreEventType] | None = None  # the request's events since its last output

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class SpecDecodingStats:
    """One update's drafts, summed over the requests that verified drafts in it."""

    num_spec_tokens: int
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_accepted_tokens_per_pos: list[int] = field(default_factory=list)
    num_draft_tokens_per_pos: list[int] = field(default_factory=list)

    @classmethod
    def new(cls, num_spec_tokens: int) -> SpecDecodingStats:
        return cls(num_spec_tokens, 0, 0, 0, [0] * num_spec_tokens, [0] * num_spec_tokens)

    def observe_draft(self, num_draft_tokens: int, num_accepted_tokens: int) -> None:
        """One request's verified drafts: the first ``num_accepted_tokens`` positions hit."""
        self.num_drafts += 1
        self.num_draft_tokens += num_draft_tokens
        self.num_accepted_tokens += num_accepted_tokens
        for pos in range(num_accepted_tokens):
            self.num_accepted_tokens_per_pos[pos] += 1
        for pos in range(num_draft_tokens):
            self.num_draft_tokens_per_pos[pos] += 1


@dataclass
class OffloadingConnectorStats:
    """The offloading connector's scheduler-side stats of one update (its ``get_stats``, the
    part that is no transfer and no clock): the stores the CPU tier refused since the last
    update, the chunks each store asked the tier for since then, and the tier's usage now
    (chunks pinned by in-flight stores and loads, by stores alone, by loads alone, over its size)."""

    allocation_failures: int = 0
    cpu_allocation_sizes: list[int] = field(default_factory=list)
    cpu_cache_usage: float = 0.0
    cpu_cache_write_usage: float = 0.0
    cpu_cache_read_usage: float = 0.0


# 0.33.0's stages of an async KV load (v1/metrics/stats.py:212-219 in 0.33.0): the load is needed but not
# started (the allocation failed), started and not reported done, done and the request not yet
# running.
KV_FETCH_WAITING_TO_START = "waiting_to_start"
KV_FETCH_IN_PROGRESS = "in_progress"
KV_FETCH_COMPLETED_WAITING = "completed_waiting"
KV_FETCH_STAGES = (KV_FETCH_WAITING_TO_START, KV_FETCH_IN_PROGRESS, KV_FETCH_COMPLETED_WAITING)


@dataclass
class SchedulerStats:
    num_running_reqs: int = 0
    num_waiting_reqs: int = 0
    kv_cache_usage: float = 0.0
    prefix_cache_stats: PrefixCacheStats = field(default_factory=PrefixCacheStats)
    # With a KV connector: its tokens after the local hit (queries) and those it supplied.
    connector_prefix_cache_stats: PrefixCacheStats | None = None
    # Waiting requests deferred by a transient constraint (num_waiting_reqs excludes them).
    num_skipped_waiting_reqs: int = 0
    # With speculative decoding: the drafts this update verified (None when it verified none).
    spec_decoding_stats: SpecDecodingStats | None = None
    # With the offloading connector: its scheduler-side stats (vLLM: kv_connector_stats).
    kv_connector_stats: OffloadingConnectorStats | None = None
    # 0.33.0 with a KV connector: the requests at each stage of an async load (KV_FETCH_STAGES).
    num_kv_fetch_reqs_by_stage: dict[str, int] = field(default_factory=dict)


@dataclass
class EngineCoreOutputs:
    """One ``update_from_output``: the per-request outputs in batch order (errors after them)
    and the step's stats (None when the scheduler logs no stats)."""

    outputs: list[EngineCoreOutput] = field(default_factory=list)
    scheduler_stats: SchedulerStats | None = None


class KVEventPublisher(Protocol):
    def publish(self, batch: KVEventBatch) -> None: ...


class KVEventCollector:
    """A publisher that keeps every batch (vLLM's default is the NullEventPublisher)."""

    def __init__(self) -> None:
        self.batches: list[KVEventBatch] = []

    def publish(self, batch: KVEventBatch) -> None:
        self.batches.append(batch)
