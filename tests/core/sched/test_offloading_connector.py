"""The offloading connector in the core (core/sched/kv_connector/offloading.py): vLLM 0.31.0's
OffloadingConnector scheduler side over its CPU tier, with the played worker, through the
mirrored engine core."""

from __future__ import annotations

from explorer.core.hashing import init_none_hash
from explorer.core.kv_cache_manager import KVCacheManager
from explorer.core.kv_cache_utils import get_request_block_hasher
from explorer.core.request import Request, RequestStatus
from explorer.core.sched.config import SchedulerConfig
from explorer.core.sched.engine_core import make_engine_core
from explorer.core.sched.kv_connector.base import KVTransferConfig
from explorer.core.sched.kv_connector.offloading import OffloadingConnector, OffloadingWorker


def engine(cpu_blocks=16, num_blocks=10, async_sched=False, caching=True):
    ctx = init_none_hash("sha256", None)
    mgr = KVCacheManager(num_blocks, 16, enable_caching=caching, enable_kv_cache_events=True)
    conn = OffloadingConnector(KVTransferConfig(), cpu_blocks, 16, enable_prefix_caching=caching)
    core = make_engine_core(
        mgr, SchedulerConfig(async_scheduling=async_sched), connector=conn, connector_worker=OffloadingWorker()
    )
    return core, conn, get_request_block_hasher(16, ctx)


def add(core, hasher, rid, tokens, out=1):
    req = Request(rid, list(tokens), hasher, max_tokens=out)
    core.add_request(req, [7] * out)
    return req


def run(core):
    while core.scheduler.has_requests():
        core.step_fn()


def test_only_full_prompt_blocks_are_stored_and_loaded_blocks_are_not_stored_again():
    core, conn, hasher = engine()
    a = add(core, hasher, "A", range(100), out=40)  # 6 full prompt blocks; the outputs are never stored
    run(core)
    assert [c.key for c in conn.cpu_tier()] == [bytes(h) for h in a.block_hashes[:6]][::-1]
    add(core, hasher, "X", range(500, 639))  # evicts A's blocks from the GPU cache
    run(core)
    b = add(core, hasher, "B", [*range(100), *([9] * 20)])
    core.step_fn()
    assert b.status == RequestStatus.WAITING_FOR_REMOTE_KVS and b.num_computed_tokens == 96
    run(core)
    tier = {c.key for c in conn.cpu_tier()}
    assert bytes(b.block_hashes[6]) in tier and len(tier) == 6 + 8 + 1


def test_less_than_a_block_past_the_local_hit_is_no_hit():
    core, conn, hasher = engine(num_blocks=64)
    add(core, hasher, "A", range(40))  # 2 full blocks stored; still cached on the GPU
    run(core)
    b = add(core, hasher, "B", range(40))
    assert conn.get_num_new_matched_tokens(b, 32) == (0, False)  # the GPU holds both blocks
    assert conn.get_num_new_matched_tokens(b, 16) == (16, True)
    assert conn.get_num_new_matched_tokens(b, 0) == (32, True)


def test_a_request_with_a_transfer_in_flight_cannot_be_answered_yet():
    core, conn, hasher = engine(async_sched=True, caching=False, num_blocks=32)
    a = add(core, hasher, "A", range(64), out=3)
    core.step_fn()  # A's first batch: its store job is in flight
    assert conn.has_pending_push_work()
    assert conn.get_num_new_matched_tokens(a, 0) == (None, False)  # its own store
    b = add(core, hasher, "B", range(64))
    assert conn.get_num_new_matched_tokens(b, 0) == (None, False)  # chunks being written
    core.step_fn()  # B is skipped; A's batch is updated: the chunks are ready
    assert b.status == RequestStatus.WAITING and b.num_computed_tokens == 0
    assert conn.get_num_new_matched_tokens(b, 0) == (64, True)  # a full external hit


def test_a_store_the_tier_cannot_hold_is_refused_and_nothing_is_stored():
    core, conn, hasher = engine(cpu_blocks=4)
    add(core, hasher, "A", range(100), out=3)
    run(core)
    assert conn.cpu_tier() == [] and not conn.has_pending_push_work()


def test_reset_drops_the_tier_and_the_jobs_in_flight():
    core, conn, hasher = engine(async_sched=True)
    add(core, hasher, "A", range(64), out=3)
    core.step_fn()
    assert conn.has_pending_push_work() and conn.cpu_tier()
    assert conn.reset_cache() is True
    assert conn.cpu_tier() == [] and not conn.has_pending_push_work()
    run(core)  # the dropped job's report is ignored; A's later blocks start from chunk 0 again
    assert len(conn.cpu_tier()) == 4
