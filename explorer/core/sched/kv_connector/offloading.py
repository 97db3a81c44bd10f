"""The `offloading` connector: vLLM 0.31.0's (or 0.33.0's) `OffloadingConnector`, scheduler
side (distributed/kv_transfer/kv_connector/v1/offloading_connector.py, offloading/scheduler.py),
over the CPU tier of cpu_tier.py; one KV cache group of full attention, one GPU block per
chunk, the LRU policy, prompt tokens only (vLLM's defaults).

- ``get_num_new_matched_tokens``: a request with a transfer job in flight waits (None);
  else the chunks after the block-aligned local hit are looked up in order, up to the
  request's last full block: the run of hits is offered (loaded asynchronously), and a chunk
  still being written (or, with prefix caching, being loaded by another request) makes the
  answer None: ask again next step. Less than one chunk is no hit.
- ``update_state_after_alloc`` with external tokens: a load job for the allocated blocks
  past the local hit (their chunks are pinned); the loaded blocks are not stored again.
- ``build_connector_meta``: the step's load jobs, and a store job per scheduled (or just
  finished) request for its prompt blocks that will be computed after this batch and are not
  stored yet; the tier may refuse a store (too few evictable chunks), and the request tries
  again at its next step. A finished request's chunks become the most recently used.
- ``update_connector_output``: the worker's completed jobs: stores become ready, loads unpin.
- ``reset_cache`` forgets the tier; jobs in flight are dropped (their reports ignored).
- ``get_kv_connector_stats`` (each update): the stores refused since the last update, with
  the tier's own stats (``CPUOffloadingManager.get_stats``).
A `KVCacheObserver` hears each store (with what it evicted, or that it was refused), each
load, and what each update completed. `OffloadingWorker` plays the worker: every job of a
batch completes with that batch's output.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from explorer.core.errors import SchedulingError
from explorer.core.events import BlockRemoved, BlockStored, KVCacheEvent
from explorer.core.hashing import BlockHash, maybe_convert_block_hash
from explorer.core.metrics import HOST
from explorer.core.release import VLLM_0_31, VllmRelease
from explorer.core.request import RequestStatus
from explorer.core.sched.kv_connector.base import ConnectorWorker, KVConnectorBase, KVTransferConfig
from explorer.core.sched.kv_connector.cpu_tier import (
    CPUChunk,
    CPUOffloadingManager,
    LookupResult,
    OffloadKey,
    ReqContext,
)
from explorer.core.sched.output import KVConnectorOutput, OffloadingConnectorStats

if TYPE_CHECKING:
    from explorer.core.kv_cache_manager import KVCacheBlocks, KVCacheManager
    from explorer.core.kv_cache_observer import KVCacheObserver
    from explorer.core.request import Request
    from explorer.core.sched.output import SchedulerOutput

MEDIUM_CPU = "CPU"


@dataclass(frozen=True)
class TransferJob:
    req_id: str
    keys: tuple[OffloadKey, ...]
    block_ids: tuple[int, ...]  # GPU blocks: a load's destinations, a store's sources


@dataclass
class OffloadingMetadata:
    load_jobs: dict[int, TransferJob] = field(default_factory=dict)
    store_jobs: dict[int, TransferJob] = field(default_factory=dict)


@dataclass
class RequestOffloadState:
    req: Request
    ctx: ReqContext
    offload_keys: list[OffloadKey] = field(default_factory=list)
    block_ids: list[int] = field(default_factory=list)  # the request's GPU blocks, as scheduled
    next_stored_chunk_idx: int = 0
    num_locally_computed_tokens: int = 0
    transfer_jobs: set[int] = field(default_factory=set)
    finished_signaled: bool = False

    def update_offload_keys(self, block_size: int) -> None:
        for i in range(len(self.offload_keys), len(self.req.block_hashes)):
            key = bytes(self.req.block_hashes[i])
            self.offload_keys.append(key)
            self.ctx.positions[key] = (i + 1) * block_size


@dataclass
class JobStatus:
    req_id: str
    keys: tuple[OffloadKey, ...]
    is_store: bool


class OffloadingConnector(KVConnectorBase):
    # 0.33.0 attributes the hits to the tier each loaded chunk came from, the CPU here: every
    # external token lies in a loaded chunk (CPUOffloadingManager.get_load_source,
    # cpu/manager.py:208-211 in 0.33.0).
    cache_hit_source = HOST

    def __init__(
        self,
        config: KVTransferConfig,
        cpu_blocks: int,
        block_size: int,
        enable_prefix_caching: bool = True,
        enable_events: bool = True,
        use_int_block_hashes: bool = True,
        release: VllmRelease = VLLM_0_31,
    ) -> None:
        super().__init__(config)
        self.block_size = block_size
        self.release = release
        self.manager = CPUOffloadingManager(cpu_blocks, enable_events, release.request_scoped_cpu_lru)
        self.use_int_block_hashes = use_int_block_hashes
        self.observer: KVCacheObserver | None = None
        self._req_status: dict[str, RequestOffloadState] = {}
        self._current_batch_load_jobs: dict[int, TransferJob] = {}
        # With prefix caching, chunks being loaded: another request hitting them waits.
        self._chunks_being_loaded: set[OffloadKey] | None = set() if enable_prefix_caching else None
        self._job_counter = 0
        self._stale_job_threshold = 0
        self._jobs: dict[int, JobStatus] = {}
        self._allocation_failures = 0  # stores the tier refused since the last get_kv_connector_stats

    @property
    def requires_kv_delivery(self) -> bool:
        """A best-effort cache: a dropped store is a later miss (offloading_connector.py)."""
        return False

    def bind_kv_cache_manager(self, kv_cache_manager: KVCacheManager) -> None:
        self.observer = kv_cache_manager.observer

    def _job_id(self) -> int:
        self._job_counter += 1
        return self._job_counter - 1

    # ---- admission ---------------------------------------------------------------------------

    def on_new_request(self, request: Request) -> None:
        ctx = ReqContext(request.request_id)
        self.manager.on_new_request(ctx)
        self._req_status[request.request_id] = RequestOffloadState(request, ctx)

    def still_tracks(self, request_id: str) -> bool:
        """A finished request's state lives until its last stores complete (its next step)."""
        return request_id in self._req_status

    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int) -> tuple[int | None, bool]:
        st = self._req_status[request.request_id]
        st.block_ids.clear()
        if self.release.lookup_restarts_stores:
            # 0.33.0 offers every chunk again from token 0 (offloading/scheduler.py:1243-1245 in 0.33.0).
            st.next_stored_chunk_idx = 0
        if st.transfer_jobs:
            return None, False  # a store or load of this request is still in flight
        st.update_offload_keys(self.block_size)
        st.num_locally_computed_tokens = num_computed_tokens
        hits = 0 if request.skip_reading_prefix_cache else self._lookup(st, num_computed_tokens)
        return hits, bool(hits)

    def _lookup(self, st: RequestOffloadState, num_computed: int) -> int | None:
        bs = self.block_size
        max_hit = min(st.req.num_tokens, len(st.offload_keys) * bs)
        if max_hit - num_computed < bs:
            return 0
        start = num_computed // bs
        hit_chunks, pending = 0, False
        for key in st.offload_keys[start : -(-max_hit // bs)]:
            result = self.manager.lookup(key)
            if result == LookupResult.MISS:
                break
            pending = pending or result == LookupResult.HIT_PENDING
            hit_chunks += 1
        if pending:
            return None
        if hit_chunks == 0:
            return 0
        num_hit = min(max_hit, bs * (start + hit_chunks)) - num_computed
        if num_hit < bs:
            return 0
        if self._chunks_being_loaded:
            end = -(-(num_computed + num_hit) // bs)
            if any(k in self._chunks_being_loaded for k in st.offload_keys[start:end]):
                return None
        return num_hit

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int) -> None:
        if num_external_tokens == 0:
            return
        st = self._req_status[request.request_id]
        bs = self.block_size
        local = st.num_locally_computed_tokens
        num_cached = local + num_external_tokens
        table = blocks.blocks[0]
        num_gpu_blocks = -(-num_cached // bs)
        start = next(
            (i for i in range(-(-local // bs), num_gpu_blocks) if not table[i].is_null and table[i].block_hash is None),
            num_gpu_blocks,
        )
        keys = tuple(st.offload_keys[start:num_gpu_blocks]) if num_gpu_blocks > start else ()
        st.next_stored_chunk_idx = num_gpu_blocks  # the loaded chunks are not stored again
        self.manager.prepare_load(keys, st.ctx)
        job_id = self._job_id()
        dst = tuple(b.block_id for b in table[start:num_gpu_blocks])
        self._current_batch_load_jobs[job_id] = TransferJob(request.request_id, keys, dst)
        assert not st.transfer_jobs, "a load is issued only with no job in flight"
        st.transfer_jobs.add(job_id)
        self._jobs[job_id] = JobStatus(request.request_id, keys, is_store=False)
        if self._chunks_being_loaded is not None:
            self._chunks_being_loaded.update(keys)
        if self.observer is not None:
            self.observer.on_cpu_load(request.request_id, keys, dst)

    # ---- the step's metadata -----------------------------------------------------------------

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> OffloadingMetadata:
        so = scheduler_output
        resumed = set(so.scheduled_resumed_reqs)
        for rid in (*so.scheduled_new_reqs, *so.scheduled_running_reqs, *so.scheduled_resumed_reqs):
            st = self._req_status[rid]
            st.update_offload_keys(self.block_size)
            if rid in resumed:
                st.block_ids.clear()
            st.block_ids.extend(so.new_block_ids.get(rid, ()))
        for rid in so.preempted_req_ids:
            # vLLM flushes a preempted request's jobs and asserts they are stores
            # (offloading/scheduler.py:1788-1794): a request the reset preempted that loads
            # from the CPU tier in the same schedule trips it. Refused, as vLLM cannot run it.
            # 0.33.0 leaves this step's new loads out of the flush, so it runs that case
            # (offloading/scheduler.py:2137-2151 in 0.33.0).
            pending = self._req_status.get(rid)
            if pending is None:
                continue
            flushed = pending.transfer_jobs
            if self.release.flush_skips_new_loads:
                flushed = flushed - self._current_batch_load_jobs.keys()
            if any(not self._jobs[j].is_store for j in flushed):
                raise SchedulingError(
                    f"request {rid!r} was preempted (by a reset with running) and loads from the CPU "
                    "tier in the same step: vLLM's offloading connector asserts there"
                )
        meta = OffloadingMetadata(self._current_batch_load_jobs, self._build_store_jobs(so))
        for rid in so.finished_req_ids:
            st_or_none = self._req_status.get(rid)
            if st_or_none is None:
                continue
            st_or_none.finished_signaled = True
            self.manager.on_request_finished(st_or_none.ctx)
            if not st_or_none.transfer_jobs:
                del self._req_status[rid]
        self._current_batch_load_jobs = {}
        return meta

    def _num_offloadable_tokens(self, req: Request, num_tokens: int) -> int:
        return min(num_tokens, req.num_tokens, req.num_prompt_tokens)  # offload_prompt_only

    def _build_store_jobs(self, so: SchedulerOutput) -> dict[int, TransferJob]:
        jobs: dict[int, TransferJob] = {}
        for rid in (*so.num_scheduled_tokens, *so.finished_req_ids):
            st = self._req_status.get(rid)
            if st is None:
                continue
            req = st.req
            if req.status == RequestStatus.FINISHED_ABORTED:
                after = req.num_computed_tokens
            elif req.is_finished():
                after = max(req.num_prompt_tokens, req.num_tokens - 1)
            else:
                after = req.num_computed_tokens + so.num_scheduled_tokens[rid]
            num_chunks = min(
                self._num_offloadable_tokens(req, after) // self.block_size, len(st.block_ids), len(st.offload_keys)
            )
            start = st.next_stored_chunk_idx
            keys = [k for k, b in zip(st.offload_keys[start:num_chunks], st.block_ids[start:num_chunks]) if b != 0]
            if not keys:
                st.next_stored_chunk_idx = max(start, num_chunks)
                continue
            prepared = self.manager.prepare_store(keys, st.ctx)
            if prepared is None:  # too few evictable chunks: try again at the next step
                self._allocation_failures += 1
                if self.observer is not None:
                    self.observer.on_cpu_store(rid, tuple(keys), (), True)
                continue
            to_store, evicted = prepared
            if not to_store:
                st.next_stored_chunk_idx = max(start, num_chunks)
                continue
            chosen = set(to_store)
            src = tuple(
                b for k, b in zip(st.offload_keys[start:num_chunks], st.block_ids[start:num_chunks]) if k in chosen
            )
            st.next_stored_chunk_idx = max(start, num_chunks)
            job_id = self._job_id()
            if st.transfer_jobs:
                assert all(self._jobs[j].is_store for j in st.transfer_jobs), "a store is issued with no load pending"
            st.transfer_jobs.add(job_id)
            self._jobs[job_id] = JobStatus(rid, tuple(to_store), is_store=True)
            jobs[job_id] = TransferJob(rid, tuple(to_store), src)
            if self.observer is not None:
                self.observer.on_cpu_store(rid, tuple(to_store), tuple(evicted), False)
        return jobs

    def get_kv_connector_stats(self) -> OffloadingConnectorStats:
        """The update's stats: the refused stores since the last call, and the tier's."""
        stats = self.manager.get_stats()
        stats.allocation_failures, self._allocation_failures = self._allocation_failures, 0
        return stats

    def has_pending_push_work(self) -> bool:
        """Jobs in flight keep the engine stepping."""
        return bool(self._jobs)

    # ---- the worker's report -----------------------------------------------------------------

    def update_connector_output(self, connector_output: KVConnectorOutput) -> None:
        stored: list[OffloadKey] = []
        loaded: list[OffloadKey] = []
        for job_id in connector_output.completed_jobs:
            if job_id < self._stale_job_threshold:
                continue  # a job from before a reset
            job = self._jobs.pop(job_id)
            st = self._req_status[job.req_id]
            if job.is_store:
                stored += self.manager.complete_store(job.keys)
            else:
                self.manager.complete_load(job.keys)
                loaded += job.keys
                if self._chunks_being_loaded:
                    self._chunks_being_loaded.difference_update(job.keys)
            st.transfer_jobs.remove(job_id)
            if st.finished_signaled and not st.transfer_jobs:
                del self._req_status[job.req_id]
        if self.observer is not None and (stored or loaded):
            self.observer.on_cpu_jobs_done(tuple(stored), tuple(loaded))

    def request_finished(self, request: Request, block_ids: Sequence[list[int]]) -> bool:
        """The last block's hash may be new; the store comes with the next step."""
        st = self._req_status.get(request.request_id)
        if st is not None:
            st.update_offload_keys(self.block_size)
        return False

    def take_events(self) -> list[KVCacheEvent]:
        """Each stored chunk one BlockStored, each eviction one BlockRemoved: medium CPU, the
        placeholder payload (one hash, no tokens, block_size 0, group 0)."""
        out: list[KVCacheEvent] = []
        for ev in self.manager.take_events():
            if ev.metadata_only:
                continue  # metadata_only: a failed store's chunks, no public removal (offloading/events.py:438-441 in 0.33.0)
            hashes = [maybe_convert_block_hash(BlockHash(k), self.use_int_block_hashes) for k in ev.keys]
            if ev.removed:
                out.append(BlockRemoved(hashes, MEDIUM_CPU, group_idx=0))
            else:
                out.extend(BlockStored([h], None, [], 0, None, MEDIUM_CPU, None, group_idx=0) for h in hashes)
        return out

    def reset_cache(self) -> bool:
        """Forget the tier; jobs in flight are dropped and their reports ignored."""
        for rid, st in list(self._req_status.items()):
            if st.req.is_finished():
                if not st.finished_signaled:
                    self.manager.on_request_finished(st.ctx)
                del self._req_status[rid]
        self.manager.reset_cache()
        for st in self._req_status.values():
            st.next_stored_chunk_idx = 0
            st.transfer_jobs.clear()
        self._stale_job_threshold = self._job_counter
        self._jobs.clear()
        if self._chunks_being_loaded is not None:
            self._chunks_being_loaded.clear()
        return True

    def cpu_tier(self) -> list[CPUChunk]:
        """The tier's chunks, least recently used first."""
        return self.manager.lru_order()


class OffloadingWorker(ConnectorWorker):
    """The played worker: every load and store job of a batch completes with that batch's
    output (in job order); a load also reports its request in ``finished_recving``."""

    def execute(self, metadata: object) -> KVConnectorOutput:
        assert isinstance(metadata, OffloadingMetadata)
        out = KVConnectorOutput()
        out.completed_jobs = sorted([*metadata.load_jobs, *metadata.store_jobs])
        out.finished_recving = {job.req_id for job in metadata.load_jobs.values()}
        return out
