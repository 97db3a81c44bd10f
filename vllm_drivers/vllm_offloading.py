"""vLLM 0.31.0's own OffloadingConnector in the conformance driver (design section 10).

Imported by ``vllm_sched_driver.py`` inside vLLM's virtualenv: it must not import ``explorer``.
``kind = "offloading", cpu_blocks = N`` is vLLM's real ``OffloadingConnector`` (scheduler side,
``OffloadingConnectorScheduler`` over ``CPUOffloadingManager`` with the LRU policy), built by
vLLM's connector factory with ``cpu_bytes_to_use`` = N aligned chunks for the driver's KV spec
(one layer, one KV head of size 1, float32: ``2 * block_size * 4`` bytes per block, rounded up
to the CPU region's page alignment). The driver plays the worker side (`OffloadingWorker`).

What the driver adds around vLLM's classes, without changing a decision:
- every ``update_state_after_alloc`` is recorded (the replay's ``external`` entry);
- ``SchedulerOutput.finished_req_ids`` is a set: the connector makes the store jobs of
  requests that finished since the last step, and moves their chunks to the most recently used
  end, in that set's order. The driver hands them over in the order they finished
  (``_free_request`` calls), the order the explorer's scheduler keeps;
- ``CPUOffloadingManager.complete_store`` receives a job's keys as a Python set (the job's
  ``keys``), so the order of its ``BlockStored`` events is the set's order, which depends on the
  process's hash randomization. The driver hands them over in prefix order (each key's position
  in its request), the order the store job was prepared in. Nothing else depends on that order.
"""

from __future__ import annotations

import mmap

from vllm.config import KVTransferConfig
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import OffloadingWorkerMetadata
from vllm.v1.kv_offload.base import get_offload_block_hash
from vllm.v1.outputs import KVConnectorOutput

BYTES_PER_TOKEN = 2 * 1 * 1 * 4  # K and V, one head of size 1, float32, one layer


def chunk_bytes(block_size: int) -> int:
    per_block = BYTES_PER_TOKEN * block_size
    return -(-per_block // mmap.PAGESIZE) * mmap.PAGESIZE


def transfer_config(policy: str, cpu_blocks: int, block_size: int) -> KVTransferConfig:
    return KVTransferConfig(
        kv_connector="OffloadingConnector",
        kv_role="kv_both",
        kv_load_failure_policy=policy,
        kv_connector_extra_config={"cpu_bytes_to_use": cpu_blocks * chunk_bytes(block_size)},
    )


def instrument(sched, cpu_blocks: int) -> None:
    """Check the tier's size, record allocations, fix the two orders taken from sets."""
    connector = sched.connector
    inner = connector.connector_scheduler
    manager = inner.manager
    if manager._num_chunks != cpu_blocks:
        raise RuntimeError(f"vLLM built {manager._num_chunks} CPU chunks for cpu_blocks = {cpu_blocks}")
    connector.allocs = []
    update_state_after_alloc = connector.update_state_after_alloc

    def recorded(request, blocks, num_external_tokens):
        connector.allocs.append((request.request_id, int(num_external_tokens)))
        return update_state_after_alloc(request, blocks, num_external_tokens)

    connector.update_state_after_alloc = recorded
    complete_store = manager.complete_store

    def in_prefix_order(keys, req_context, success=True):
        ordered = sorted(keys, key=req_context.get_offload_key_position)
        return complete_store(ordered, req_context, success)

    manager.complete_store = in_prefix_order

    finish_order: list[str] = []
    free_request = sched._free_request

    def recorded_free(request, *args, **kwargs):
        finish_order.append(request.request_id)
        return free_request(request, *args, **kwargs)

    sched._free_request = recorded_free
    build_connector_meta = connector.build_connector_meta

    def finished_in_order(scheduler_output):
        finished = scheduler_output.finished_req_ids
        ordered = dict.fromkeys(r for r in finish_order if r in finished)
        assert len(ordered) == len(finished), (ordered, finished)
        scheduler_output.finished_req_ids = ordered
        finish_order.clear()
        return build_connector_meta(scheduler_output)

    connector.build_connector_meta = finished_in_order


def cpu_tier(connector) -> list[str]:
    """The tier's block hashes, least recently used first (the LRU policy's ranks)."""
    policy = connector.connector_scheduler.manager._policy
    keys = sorted(policy.chunks, key=policy._ranks.__getitem__)
    return [bytes(get_offload_block_hash(k)).hex() for k in keys]


class OffloadingWorker:
    """The played worker: every load and store job in a batch's metadata completes with that
    batch's output (``completed_jobs`` in job order), and a load reports its request in
    ``finished_recving`` (offloading/worker.py get_finished)."""

    def execute(self, meta) -> KVConnectorOutput:
        jobs = sorted([*meta.load_jobs, *meta.store_jobs])
        worker_meta = OffloadingWorkerMetadata(completed_jobs={j: 1 for j in jobs}) if jobs else None
        finished = {job.req_id for job in meta.load_jobs.values()}
        return KVConnectorOutput(finished_recving=finished, kv_connector_worker_meta=worker_meta)
