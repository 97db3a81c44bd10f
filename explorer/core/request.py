"""A request as the KV cache manager sees it (vllm/v1/request.py).

Its block hashes are computed when it is built and extended whenever appended output tokens
complete a block: a request knows a block's hash as soon as the block's tokens are known, long
before the pool caches it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from explorer.core.errors import RequestError
from explorer.core.hashing import BlockHash
from explorer.core.metrics import PrefillStats


class EngineCoreEventType(enum.IntEnum):
    """The request events vLLM attaches to a request's next output (vllm/v1/engine/__init__.py:
    EngineCoreEventType). Only PREEMPTED is recorded here: QUEUED and SCHEDULED carry
    timestamps and LoRA states, which no prefix-cache metric reads."""

    QUEUED = 1
    SCHEDULED = 2
    PREEMPTED = 3


class RequestStatus(enum.Enum):
    """vLLM's statuses (vllm/v1/request.py:370-393) that the mirrored scheduler reaches (no
    grammar, no streaming input); the value is the name in lower case."""

    WAITING = "waiting"
    WAITING_FOR_REMOTE_KVS = "waiting_for_remote_kvs"  # an async KV connector load in flight
    RUNNING = "running"
    PREEMPTED = "preempted"
    # Everything below is a finished status.
    FINISHED_STOPPED = "finished_stopped"
    FINISHED_LENGTH_CAPPED = "finished_length_capped"
    FINISHED_ABORTED = "finished_aborted"
    FINISHED_ERROR = "finished_error"

    @staticmethod
    def is_finished(status: RequestStatus) -> bool:
        return status not in _UNFINISHED


_UNFINISHED = frozenset(
    {RequestStatus.WAITING, RequestStatus.WAITING_FOR_REMOTE_KVS, RequestStatus.RUNNING, RequestStatus.PREEMPTED}
)

# RequestStatus -> the finish reason vLLM reports (request.py:404-412).
FINISH_REASONS = {
    RequestStatus.FINISHED_STOPPED: "stop",
    RequestStatus.FINISHED_LENGTH_CAPPED: "length",
    RequestStatus.FINISHED_ABORTED: "abort",
    RequestStatus.FINISHED_ERROR: "error",
}


@dataclass(frozen=True, slots=True)
class LoRARequest:
    """A LoRA adapter: the name and path go into every block's extra keys, the integer id into
    BlockStored.lora_id."""

    lora_name: str
    lora_int_id: int
    lora_path: str

    def __post_init__(self) -> None:
        if not self.lora_name:
            raise RequestError("a LoRA needs a non-empty name")
        if not self.lora_path:
            raise RequestError(f"LoRA {self.lora_name!r} needs a non-empty path (vLLM refuses an empty one)")
        if self.lora_int_id < 1:
            raise RequestError(f"LoRA {self.lora_name!r} needs an integer id >= 1")

    @property
    def name(self) -> str:
        return self.lora_name

    @property
    def adapter_id(self) -> int:
        return self.lora_int_id


@dataclass(frozen=True, slots=True)
class MultiModalFeature:
    """An image (or other item) placeholder: ``identifier`` is vLLM's content hash of the
    item, and it covers prompt tokens [offset, offset + length)."""

    identifier: str
    offset: int
    length: int


def check_mm_features(features: Sequence[MultiModalFeature], num_prompt_tokens: int) -> None:
    """Items must be sorted by offset, inside the prompt, at least one token long and must not
    overlap: vLLM's extra-key walk assumes all of that."""
    prev_end = 0
    for i, f in enumerate(features):
        if not f.identifier:
            raise RequestError(f"image #{i} needs a non-empty id")
        if f.length < 1:
            raise RequestError(f"image {f.identifier!r} has length {f.length}; it must be >= 1")
        if f.offset < 0 or f.offset + f.length > num_prompt_tokens:
            raise RequestError(
                f"image {f.identifier!r} covers tokens [{f.offset}, {f.offset + f.length}), "
                f"outside the {num_prompt_tokens}-token prompt"
            )
        if f.offset < prev_end:
            raise RequestError(
                f"image {f.identifier!r} at offset {f.offset} overlaps the previous image "
                "(items must be sorted by offset and must not overlap)"
            )
        prev_end = f.offset + f.length


class Request:
    def __init__(
        self,
        request_id: str,
        prompt_token_ids: Sequence[int],
        block_hasher: Callable[[Request], list[BlockHash]] | None = None,
        lora_request: LoRARequest | None = None,
        cache_salt: str | None = None,
        mm_features: Sequence[MultiModalFeature] = (),
        prompt_logprobs: bool = False,
        max_tokens: int | None = None,
    ) -> None:
        if len(prompt_token_ids) == 0:
            raise RequestError(f"request {request_id!r} has an empty prompt")
        mm_features = sorted(mm_features, key=lambda f: f.offset)
        check_mm_features(mm_features, len(prompt_token_ids))
        self.request_id = request_id
        self.prompt_token_ids = list(prompt_token_ids)
        self.all_token_ids = list(prompt_token_ids)
        self.output_token_ids: list[int] = []
        self.num_prompt_tokens = len(self.prompt_token_ids)
        self.lora_request = lora_request
        self.cache_salt = cache_salt
        self.mm_features = mm_features
        self.mm_ends = [f.offset + f.length for f in mm_features]  # sorted: no overlaps
        self.prompt_logprobs = prompt_logprobs
        # vLLM sets this from SamplingParams: prompt logprobs need every prompt token computed.
        self.skip_reading_prefix_cache = prompt_logprobs
        self.status = RequestStatus.WAITING
        self.num_computed_tokens = 0
        self.num_preemptions = 0
        # What only vLLM's Scheduler uses (a manager-level scenario leaves them alone):
        # SamplingParams.max_tokens (None: the caller decides when the request ends);
        self.max_tokens = max_tokens
        # async scheduling: tokens scheduled whose sampled token has not arrived yet;
        self.num_output_placeholders = 0
        # tokens scheduled in batches whose output has not been processed yet;
        self.num_in_flight_tokens = 0
        # in-flight tokens scheduled before a preemption, and whether their output is dropped;
        self.num_stale_output_tokens = 0
        self.drop_stale_output = False
        # where a lagging window group's shared prefix ends, set at each lookup (scheduler L930-937);
        self.shared_prefix_boundary = 0
        # whether the last scheduled step left prompt tokens to compute;
        self.is_prefill_chunk = False
        # deferred block frees (a KV connector under async scheduling): the last non-empty step
        # that scheduled it (request.py's last_sched_seq);
        self.last_sched_seq = 0
        # the first prefill's stats, until its first output reports them (request.py:218, 350-355).
        self.prefill_stats: PrefillStats | None = PrefillStats()
        # speculative decoding: the drafts proposed for its next step, not tokens yet.
        self.spec_token_ids: list[int] = []
        # events since the last output, which carries them (request.py:337-348).
        self.events: list[EngineCoreEventType] = []
        self.block_hashes: list[BlockHash] = []
        self._block_hasher = block_hasher
        self._hashes_without_extra_keys: list[BlockHash] = []  # filled only when asked
        self.update_block_hashes()

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def num_tokens_with_spec(self) -> int:
        return len(self.all_token_ids) + len(self.spec_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    def append_output_token_ids(self, token_ids: int | Sequence[int]) -> None:
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        self.output_token_ids.extend(token_ids)
        self.all_token_ids.extend(token_ids)
        self.update_block_hashes()

    def update_block_hashes(self) -> None:
        """Hash any newly full blocks (none when prefix caching is off: no hasher)."""
        if self._block_hasher is not None:
            self.block_hashes.extend(self._block_hasher(self))

    @property
    def has_extra_keys(self) -> bool:
        """Whether a LoRA, an image or a cache salt enters its hashes (an empty salt adds none)."""
        return self.lora_request is not None or bool(self.mm_features) or bool(self.cache_salt)

    def block_hashes_without_extra_keys(self) -> list[BlockHash]:
        """Its block hashes as they would be with no extra keys: the explorer's addition, asked
        only by an observer (the miss reason ``other_keys``), computed lazily and kept."""
        if not self.has_extra_keys:
            return self.block_hashes
        without = getattr(self._block_hasher, "without_extra_keys", None)
        if without is not None and len(self._hashes_without_extra_keys) < len(self.block_hashes):
            self._hashes_without_extra_keys.extend(without(self, self._hashes_without_extra_keys))
        return self._hashes_without_extra_keys

    def take_prefill_stats(self) -> PrefillStats | None:
        prefill_stats, self.prefill_stats = self.prefill_stats, None
        return prefill_stats

    def record_event(self, event_type: EngineCoreEventType) -> None:
        self.events.append(event_type)

    def take_events(self) -> list[EngineCoreEventType] | None:
        if not self.events:
            return None
        events, self.events = self.events, []
        return events

    def is_finished(self) -> bool:
        return RequestStatus.is_finished(self.status)

    def get_finished_reason(self) -> str | None:
        return FINISH_REASONS.get(self.status)

    def __repr__(self) -> str:
        return (
            f"Request({self.request_id!r}, tokens={self.num_tokens}, "
            f"computed={self.num_computed_tokens}, {self.status.value})"
        )
