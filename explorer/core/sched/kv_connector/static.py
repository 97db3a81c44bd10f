"""The `static` connector: an external store that holds given prefixes (design section 10).

`StaticConnector.hold` says the store holds the first N tokens of a request (given on its
arrival), loaded asynchronously or not, the load taking ``load_steps`` batch outputs, and
reporting some of the request's block-table indices invalid. It is the scenario's stand-in for
a real store, as a test connector is vLLM's: ``get_num_new_matched_tokens`` offers the held
tokens past the (block-aligned) local hit, ``update_state_after_alloc`` turns an allocation
with external tokens into a load job for the step's metadata, and `StaticWorker` plays the
worker: a sync load reports its invalid blocks with the batch that ran it, an async one
finishes (``finished_recving``, with its invalid blocks) in the ``load_steps``-th batch output
from the one that started it. ``reset_cache`` empties the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from explorer.core.sched.kv_connector.base import ConnectorWorker, KVConnectorBase, KVTransferConfig
from explorer.core.sched.output import KVConnectorOutput

if TYPE_CHECKING:
    from explorer.core.kv_cache_manager import KVCacheBlocks
    from explorer.core.request import Request
    from explorer.core.sched.output import SchedulerOutput


@dataclass(frozen=True)
class Held:
    """What the store holds for one request."""

    num_tokens: int
    load_async: bool
    load_steps: int = 1
    invalid_block_indices: tuple[int, ...] = ()


@dataclass(frozen=True)
class LoadJob:
    request_id: str
    load_async: bool
    load_steps: int
    invalid_block_ids: tuple[int, ...]


@dataclass
class StaticMetadata:
    loads: list[LoadJob] = field(default_factory=list)


class StaticConnector(KVConnectorBase):
    def __init__(self, config: KVTransferConfig) -> None:
        super().__init__(config)
        self.held: dict[str, Held] = {}
        self._loads: list[LoadJob] = []

    def hold(self, request_id: str, held: Held) -> None:
        self.held[request_id] = held

    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int) -> tuple[int | None, bool]:
        held = self.held.get(request.request_id)
        if held is None:
            return 0, False
        ext = max(0, min(held.num_tokens, request.num_tokens) - num_computed_tokens)
        return ext, held.load_async and ext > 0

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int) -> None:
        if num_external_tokens == 0:
            return
        held = self.held[request.request_id]
        table = blocks.blocks[0]
        invalid = tuple(table[i].block_id for i in held.invalid_block_indices if i < len(table))
        steps = held.load_steps if held.load_async else 1
        self._loads.append(LoadJob(request.request_id, held.load_async, steps, invalid))

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> StaticMetadata:
        meta, self._loads = StaticMetadata(self._loads), []
        return meta

    def request_finished(self, request: Request, block_ids: Sequence[list[int]]) -> bool:
        return False

    def reset_cache(self) -> bool:
        """The store forgets every request's tokens."""
        self.held = {rid: Held(0, h.load_async, h.load_steps, h.invalid_block_indices) for rid, h in self.held.items()}
        return True


class StaticWorker(ConnectorWorker):
    def __init__(self) -> None:
        # request id -> [batch outputs still to wait, invalid block ids], in start order
        self.pending: dict[str, tuple[int, tuple[int, ...]]] = {}

    def execute(self, metadata: object) -> KVConnectorOutput:
        out = KVConnectorOutput()
        assert isinstance(metadata, StaticMetadata)
        for job in metadata.loads:
            if job.load_async:
                self.pending[job.request_id] = (job.load_steps, job.invalid_block_ids)
            else:
                out.invalid_block_ids.update(job.invalid_block_ids)
        for rid, (left, invalid) in list(self.pending.items()):
            if left > 1:
                self.pending[rid] = (left - 1, invalid)
                continue
            del self.pending[rid]
            out.finished_recving.add(rid)
            out.invalid_block_ids.update(invalid)
        return out
