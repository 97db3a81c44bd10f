"""The scheduler side of a KV connector (vllm/distributed/kv_transfer/kv_connector/v1/base.py).

A connector holds KV outside the engine. The scheduler asks it, after the local prefix-cache
hit, how many more tokens it can supply (``get_num_new_matched_tokens``), tells it what was
allocated (``update_state_after_alloc``), hands its per-step metadata to the worker
(``build_connector_meta``), hears the worker's report (``update_connector_output``), and tells
it when a request finishes (``request_finished``). The worker side (the copies) is played:
`ConnectorWorker.execute` turns a step's metadata into the `KVConnectorOutput` that batch's
``update_from_output`` reads, as vLLM's model runner does even for a batch with no tokens.

`KVTransferConfig` is the part of vLLM's config/kv_transfer.py the scheduler reads:
``kv_role = "kv_both"`` (a producer and a consumer) and the load failure policy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from explorer.core.events import KVCacheEvent
from explorer.core.metrics import EXTERNAL_UNSPECIFIED
from explorer.core.sched.output import KVConnectorOutput, OffloadingConnectorStats, SchedulerOutput

if TYPE_CHECKING:
    from explorer.core.kv_cache_manager import KVCacheBlocks, KVCacheManager
    from explorer.core.request import Request

FAILURE_POLICIES = ("fail", "recompute")


@dataclass(frozen=True)
class KVTransferConfig:
    """kv_role is "kv_both" (vLLM's roles: kv_producer, kv_consumer, kv_both)."""

    kv_role: str = "kv_both"
    kv_load_failure_policy: str = "fail"  # vLLM's default (config/kv_transfer.py:103)

    @property
    def is_kv_producer(self) -> bool:
        return self.kv_role in ("kv_producer", "kv_both")

    @property
    def is_kv_consumer(self) -> bool:
        return self.kv_role in ("kv_consumer", "kv_both")


class KVConnectorBase:
    """The scheduler-side interface, with vLLM's defaults."""

    # The tier this connector's hits count under in 0.33.0's prompt_tokens_cached_by_source
    # (base.py:184-186 in 0.33.0: unattributed unless a connector says otherwise).
    cache_hit_source = EXTERNAL_UNSPECIFIED

    def __init__(self, config: KVTransferConfig) -> None:
        self.config = config

    def get_external_cache_hit_sources(self, request: Request, num_external_tokens: int) -> dict[str, int]:
        """``num_external_tokens`` split by the tier that supplied them, once the load plan
        exists (0.33.0, base.py:550-566): all of them under ``cache_hit_source``."""
        return {self.cache_hit_source: num_external_tokens} if num_external_tokens else {}

    @property
    def requires_kv_delivery(self) -> bool:
        """A producer hands KV off when a request completes, so a preemption drops the
        request's in-flight output (base.py:192-201)."""
        return self.config.is_kv_producer

    def bind_kv_cache_manager(self, kv_cache_manager: KVCacheManager) -> None:
        """Right after the manager is built (scheduler.py:332-334)."""
        return None

    def on_new_request(self, request: Request) -> None:
        return None

    def still_tracks(self, request_id: str) -> bool:
        """Whether state of an earlier request with this id is still held (a new request with
        the id would meet it: vLLM's connectors key their state by request id)."""
        return False

    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int) -> tuple[int | None, bool]:
        """(tokens the connector holds past ``num_computed_tokens``, load asynchronously?);
        None: it cannot tell yet, and the request waits a step. Side-effect free."""
        raise NotImplementedError

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int) -> None:
        raise NotImplementedError

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> object:
        raise NotImplementedError

    def update_connector_output(self, connector_output: KVConnectorOutput) -> None:
        return None

    def request_finished(self, request: Request, block_ids: Sequence[list[int]]) -> bool:
        """True: the connector still reads the blocks; the scheduler frees them later."""
        return False

    def take_events(self) -> list[KVCacheEvent]:
        return []

    def has_pending_block_frees(self) -> bool:
        return False

    def has_pending_push_work(self) -> bool:
        """True keeps the engine stepping with no request (scheduler.py:2759-2772)."""
        return False

    def get_kv_connector_stats(self) -> OffloadingConnectorStats | None:
        """The connector's scheduler-side stats of one update (None: it keeps none)."""
        return None

    def reset_cache(self) -> bool | None:
        """None (the base class's answer) counts as success (base.py:741-753)."""
        return None


class ConnectorWorker:
    """The played worker side: one report per executed batch, from that batch's metadata."""

    def execute(self, metadata: object) -> KVConnectorOutput:
        raise NotImplementedError
