"""The `offloading` connector: vLLM 0.31.0's (or 0.33.0's) `OffloadingConnector`, scheduler
side (distributed/kv_transfer/kv_connector/v1/offloading_connector.py, offloading/scheduler.py),
over the CPU tier of cpu_tier.py; one GPU block per chunk, the LRU policy, prompt tokens only
(vLLM's defaults). With hybrid KV cache groups every group keys, looks up, loads and stores its
own chunks in the one tier (offload_groups.py).

- ``get_num_new_matched_tokens``: a request with a transfer job in flight waits (None);
  else the chunks after the block-aligned local hit are looked up group by group
  (offload_lookup.py): the hit is offered (loaded asynchronously); a chunk still being
  written (or, with prefix caching, being loaded by another request) makes it None.
- ``update_state_after_alloc`` with external tokens: one load job for every group's
  allocated blocks past the local hit (their chunks are pinned); the loaded blocks are not
  stored again.
- ``build_connector_meta``: the step's load jobs, and a store job per scheduled (or just
  finished) request for its prompt blocks that will be computed after this batch and are not
  stored yet (a window group: only those a later hit can reach, never a block it lost and the
  pool gave out again this step); the tier may refuse a store (too few evictable chunks), and
  the request tries again at its next step. A finished request's chunks become the most
  recently used.
- ``update_connector_output``: the worker's completed jobs: stores become ready (one
  BlockStored each, in token order, the lower group first), loads unpin.
- ``reset_cache`` forgets the tier; jobs in flight are dropped (their reports ignored).
- ``get_kv_connector_stats`` (each update): the stores refused since the last update, with
  the tier's own stats (``CPUOffloadingManager.get_stats``).
A `KVCacheObserver` hears each store, load and update (by block hash). `OffloadingWorker`
plays the worker: every job of a batch completes with that batch's output.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from explorer.core.errors import SchedulingError
from explorer.core.events import KVCacheEvent
from explorer.core.metrics import HOST
from explorer.core.release import VLLM_0_31, VllmRelease
from explorer.core.request import RequestStatus
from explorer.core.sched.kv_connector.base import ConnectorWorker, KVConnectorBase, KVTransferConfig
from explorer.core.sched.kv_connector.cpu_tier import CPUChunk, CPUOffloadingManager, OffloadKey, ReqContext
from explorer.core.sched.kv_connector.offload_groups import (
    RequestGroupState,
    RequestOffloadState,
    block_hashes_of,
    cdiv,
    cpu_kv_events,
    group_configs,
    offload_block_hash,
    offload_group_idx,
    offload_layout,
    single_group,
)
from explorer.core.sched.kv_connector.offload_lookup import lookup_complete_chunks
from explorer.core.sched.kv_connector.offload_store import (
    check_window_sources,
    forget_reallocated,
    store_candidates,
    store_sources,
)
from explorer.core.sched.output import KVConnectorOutput, OffloadingConnectorStats

if TYPE_CHECKING:
    from explorer.core.kv_cache_manager import KVCacheBlocks, KVCacheManager
    from explorer.core.kv_cache_observer import KVCacheObserver
    from explorer.core.request import Request
    from explorer.core.sched.output import SchedulerOutput


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
class JobStatus:
    req_id: str
    keys: tuple[OffloadKey, ...]
    is_store: bool
    window_block_ids: tuple[int, ...] = ()  # a store's window-group sources (vLLM fences them)


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
        self.layout = offload_layout(single_group(block_size), None)
        self._req_status: dict[str, RequestOffloadState] = {}
        self._current_batch_load_jobs: dict[int, TransferJob] = {}
        # GPU blocks the step's allocations handed out (a window group's stale ids are zeroed).
        self._current_batch_allocated_block_ids: set[int] = set()
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
        if kv_cache_manager.hybrid:
            self.layout = offload_layout(
                group_configs(kv_cache_manager.kv_cache_groups, kv_cache_manager.hash_block_size),
                kv_cache_manager.coordinator.retention_interval,
            )

    def _job_id(self) -> int:
        self._job_counter += 1
        return self._job_counter - 1

    # ---- admission ---------------------------------------------------------------------------

    def on_new_request(self, request: Request) -> None:
        ctx = ReqContext(request.request_id)
        self.manager.on_new_request(ctx)
        groups = tuple(RequestGroupState() for _ in self.layout.groups)
        self._req_status[request.request_id] = RequestOffloadState(request, ctx, groups)

    def still_tracks(self, request_id: str) -> bool:
        """A finished request's state lives until its last stores complete (its next step)."""
        return request_id in self._req_status

    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int) -> tuple[int | None, bool]:
        st = self._req_status[request.request_id]
        st.clear_block_ids()
        if self.release.lookup_restarts_stores:
            # 0.33.0 offers every chunk again from token 0 (offloading/scheduler.py:1243-1245 in 0.33.0).
            for gs in st.groups:
                gs.next_stored_chunk_idx = 0
        if st.transfer_jobs:
            return None, False  # a store or load of this request is still in flight
        st.update_offload_keys(self.layout.groups)
        st.num_locally_computed_tokens = num_computed_tokens
        hits = 0 if request.skip_reading_prefix_cache else self._lookup(st)
        return hits, bool(hits)

    def _lookup(self, st: RequestOffloadState) -> int | None:
        num_computed = st.num_locally_computed_tokens
        num_hit = lookup_complete_chunks(self.layout, st, self.manager.lookup)
        if not num_hit:
            return num_hit
        if self._chunks_being_loaded:
            end_tokens = num_computed + num_hit
            for gc, gs in zip(self.layout.groups, st.groups):
                keys = gs.offload_keys[num_computed // gc.tokens_per_chunk : cdiv(end_tokens, gc.tokens_per_chunk)]
                window = gc.load_window_size_in_chunks(end_tokens)
                if window is not None:
                    keys = keys[-window:]
                if any(k in self._chunks_being_loaded for k in keys):
                    return None
        return num_hit

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int) -> None:
        if num_external_tokens == 0:
            return
        st = self._req_status[request.request_id]
        local = st.num_locally_computed_tokens
        num_cached = local + num_external_tokens
        keys: list[OffloadKey] = []
        dst: list[int] = []
        for gc, gs in zip(self.layout.groups, st.groups):
            table = blocks.blocks[gc.group_idx]
            self._current_batch_allocated_block_ids.update(b.block_id for b in table if b.block_id != 0)
            bs = gc.tokens_per_chunk
            num_gpu_blocks = cdiv(num_cached, bs)
            start = next(
                (
                    i
                    for i in range(cdiv(local, bs), num_gpu_blocks)
                    if not table[i].is_null and table[i].block_hash is None
                ),
                num_gpu_blocks,
            )
            if num_gpu_blocks > start:
                keys += gs.offload_keys[start:num_gpu_blocks]
            dst += [b.block_id for b in table[start:num_gpu_blocks]]
            gs.next_stored_chunk_idx = num_gpu_blocks  # the loaded chunks are not stored again
        self.manager.prepare_load(keys, st.ctx)
        job_id = self._job_id()
        self._current_batch_load_jobs[job_id] = TransferJob(request.request_id, tuple(keys), tuple(dst))
        assert not st.transfer_jobs, "a load is issued only with no job in flight"
        st.transfer_jobs.add(job_id)
        self._jobs[job_id] = JobStatus(request.request_id, tuple(keys), is_store=False)
        if self._chunks_being_loaded is not None:
            self._chunks_being_loaded.update(keys)
        if self.observer is not None:
            self.observer.on_cpu_load(request.request_id, block_hashes_of(keys), tuple(dst))

    # ---- the step's metadata -----------------------------------------------------------------

    def _update_req_states(self, so: SchedulerOutput) -> None:
        """Every group's new blocks; then, in a window group, a pending chunk's block that the
        pool handed out again this step is forgotten (0: never stored from, ``_update_req_states``, offloading/scheduler.py:1212-1262)."""
        resumed = set(so.scheduled_resumed_reqs)
        ends: dict[str, tuple[int, ...]] = {}
        for rid in (*so.scheduled_new_reqs, *so.scheduled_running_reqs, *so.scheduled_resumed_reqs):
            st = self._req_status[rid]
            st.update_offload_keys(self.layout.groups)
            if rid in resumed:
                st.clear_block_ids()
            new = so.new_block_ids.get(rid)
            if new is None:
                continue
            ends[rid] = tuple(len(st.groups[g].block_ids) for g in self.layout.window_groups)
            for gc, gs in zip(self.layout.groups, st.groups):
                ids = new[gc.group_idx]
                gs.block_ids.extend(ids)
                self._current_batch_allocated_block_ids.update(b for b in ids if b != 0)
        forget_reallocated(
            self._req_status.values(), self.layout.window_groups, ends, self._current_batch_allocated_block_ids
        )

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> OffloadingMetadata:
        so = scheduler_output
        self._update_req_states(so)
        for rid in so.preempted_req_ids:
            # vLLM flushes a preempted request's jobs and asserts they are stores
            # (offloading/scheduler.py:1788-1794): a request the reset preempted that loads in
            # the same schedule trips it (refused); 0.33.0 leaves this step's new loads out of
            # the flush, so it runs that case (offloading/scheduler.py:2137-2151 in 0.33.0).
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
        self._current_batch_allocated_block_ids = set()
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
            num_offloadable = self._num_offloadable_tokens(req, after)
            prompt_offloadable = self._num_offloadable_tokens(req, req.num_prompt_tokens)
            keys, ranges = store_candidates(self.layout, st, num_offloadable, prompt_offloadable)
            if not keys:
                st.advance_stored(ranges)
                continue
            prepared = self.manager.prepare_store(keys, st.ctx)
            if prepared is None:  # too few evictable chunks: try again at the next step
                self._allocation_failures += 1
                if self.observer is not None:
                    self.observer.on_cpu_store(rid, block_hashes_of(keys), (), True)
                continue
            to_store, evicted = prepared
            if not to_store:
                st.advance_stored(ranges)
                continue
            src, window_src = store_sources(self.layout, st, ranges, set(to_store))
            st.advance_stored(ranges)
            job_id = self._job_id()
            if st.transfer_jobs:
                assert all(self._jobs[j].is_store for j in st.transfer_jobs), "a store is issued with no load pending"
            st.transfer_jobs.add(job_id)
            # Completed in token order, then by group (as the driver hands vLLM's key set over).
            positions = st.ctx.positions
            ordered = tuple(sorted(to_store, key=lambda k: (positions[k], offload_group_idx(k))))
            self._jobs[job_id] = JobStatus(rid, ordered, is_store=True, window_block_ids=window_src)
            jobs[job_id] = TransferJob(rid, tuple(to_store), src)
            if self.observer is not None:
                self.observer.on_cpu_store(rid, block_hashes_of(to_store), block_hashes_of(evicted), False)
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
                check_window_sources(job.req_id, job.window_block_ids)
            else:
                self.manager.complete_load(job.keys)
                loaded += job.keys
                if self._chunks_being_loaded:
                    self._chunks_being_loaded.difference_update(job.keys)
            st.transfer_jobs.remove(job_id)
            if st.finished_signaled and not st.transfer_jobs:
                del self._req_status[job.req_id]
        if self.observer is not None and (stored or loaded):
            self.observer.on_cpu_jobs_done(block_hashes_of(stored), block_hashes_of(loaded))

    def request_finished(self, request: Request, block_ids: Sequence[list[int]]) -> bool:
        """The last block's hash may be new; the store comes with the next step."""
        st = self._req_status.get(request.request_id)
        if st is not None:
            st.update_offload_keys(self.layout.groups)
        return False

    def take_events(self) -> list[KVCacheEvent]:
        """The tier's stores and evictions, medium CPU (``cpu_kv_events``)."""
        return cpu_kv_events(self.manager.take_events(), self.use_int_block_hashes)

    def reset_cache(self) -> bool:
        """Forget the tier; jobs in flight are dropped and their reports ignored."""
        for rid, st in list(self._req_status.items()):
            if st.req.is_finished():
                if not st.finished_signaled:
                    self.manager.on_request_finished(st.ctx)
                del self._req_status[rid]
        self.manager.reset_cache()
        for st in self._req_status.values():
            for gs in st.groups:
                gs.next_stored_chunk_idx = 0
            st.transfer_jobs.clear()
        self._stale_job_threshold = self._job_counter
        self._jobs.clear()
        if self._chunks_being_loaded is not None:
            self._chunks_being_loaded.clear()
        return True

    def cpu_tier(self) -> list[CPUChunk]:
        """The tier's chunks, least recently used first, each by its block hash."""
        return [CPUChunk(offload_block_hash(c.key), c.chunk_id, c.ref_cnt) for c in self.manager.lru_order()]


class OffloadingWorker(ConnectorWorker):
    """The played worker: every load and store job of a batch completes with that batch's
    output (in job order); a load also reports its request in ``finished_recving``."""

    def execute(self, metadata: object) -> KVConnectorOutput:
        assert isinstance(metadata, OffloadingMetadata)
        out = KVConnectorOutput()
        out.completed_jobs = sorted([*metadata.load_jobs, *metadata.store_jobs])
        out.finished_recving = {job.req_id for job in metadata.load_jobs.values()}
        return out
