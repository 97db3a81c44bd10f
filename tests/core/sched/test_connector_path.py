"""The scheduler's KV connector path in the core (spec part 2 rules 52-59), with connectors the
scenarios cannot express: one that cannot tell yet (None), one whose reset fails."""

from __future__ import annotations

from explorer.core.hashing import init_none_hash
from explorer.core.kv_cache_manager import KVCacheManager
from explorer.core.kv_cache_utils import get_request_block_hasher
from explorer.core.request import Request, RequestStatus
from explorer.core.sched.config import SchedulerConfig
from explorer.core.sched.engine_core import make_engine_core
from explorer.core.sched.kv_connector.base import KVTransferConfig
from explorer.core.sched.kv_connector.static import Held, StaticConnector, StaticWorker
from tests.core.invariants import check_invariants


class NotYet(StaticConnector):
    """Cannot tell for the first ``pending`` asks of each request (rule 52, item 4)."""

    def __init__(self, config: KVTransferConfig, pending: int) -> None:
        super().__init__(config)
        self.pending = pending
        self.asked: list[tuple[str, int]] = []

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        self.asked.append((request.request_id, num_computed_tokens))
        if sum(1 for rid, _ in self.asked if rid == request.request_id) <= self.pending:
            return None, False
        return super().get_num_new_matched_tokens(request, num_computed_tokens)


class ResetFails(StaticConnector):
    def reset_cache(self) -> bool:
        return False


def engine(connector, async_sched=False, num_blocks=64):
    ctx = init_none_hash("sha256", None)
    mgr = KVCacheManager(num_blocks, 16, enable_kv_cache_events=True)
    core = make_engine_core(
        mgr, SchedulerConfig(async_scheduling=async_sched), connector=connector, connector_worker=StaticWorker()
    )
    return core, get_request_block_hasher(16, ctx)


def add(core, hasher, rid, n, out=2):
    core.add_request(Request(rid, list(range(n)), hasher, max_tokens=out), [7] * out)


def test_none_skips_the_request_with_nothing_allocated_or_recorded():
    conn = NotYet(KVTransferConfig(), pending=2)
    core, hasher = engine(conn)
    add(core, hasher, "A", 100)
    conn.hold("A", Held(64, True))
    for _ in range(2):
        result = core.step_fn()
        a = core.scheduler.requests["A"]
        assert a.status == RequestStatus.WAITING and a.num_computed_tokens == 0
        assert core.scheduler.kv_cache_manager.get_block_ids("A") == ([],)
        stats = result.engine_core_outputs.scheduler_stats
        assert stats.prefix_cache_stats.requests == 0 and stats.connector_prefix_cache_stats.requests == 0
    core.step_fn()  # now it tells: 64, async
    assert core.scheduler.requests["A"].status == RequestStatus.WAITING_FOR_REMOTE_KVS
    assert conn.asked == [("A", 0)] * 3


def test_the_connector_is_asked_with_the_block_aligned_local_hit_and_stats_count_after_it():
    conn = StaticConnector(KVTransferConfig())
    core, hasher = engine(conn)
    add(core, hasher, "X", 70, out=1)
    core.step_fn()
    core.step_fn()
    add(core, hasher, "B", 100)
    conn.hold("B", Held(96, False))
    result = core.step_fn()
    assert result.scheduler_output.external == {"B": 32}  # local 64 (4 blocks), store 96
    ext = result.engine_core_outputs.scheduler_stats.connector_prefix_cache_stats
    assert (ext.requests, ext.queries, ext.hits) == (1, 36, 32)
    check_invariants(core.scheduler.kv_cache_manager, list(core.scheduler.requests.values()))


def test_a_failed_connector_reset_fails_the_reset_and_keeps_the_window():
    conn = ResetFails(KVTransferConfig())
    core, _ = engine(conn)
    assert core.reset_prefix_cache(False, True) is False
    assert core.scheduler.connector_prefix_cache_stats.reset is False
    ok = StaticConnector(KVTransferConfig())
    core2, _ = engine(ok)
    assert core2.reset_prefix_cache(False, True) is True
    assert core2.scheduler.connector_prefix_cache_stats.reset is True


def test_async_kv_both_defers_the_free_of_an_aborted_request_until_its_step_is_processed():
    conn = StaticConnector(KVTransferConfig())
    core, hasher = engine(conn, async_sched=True)
    sched = core.scheduler
    assert sched.defer_block_free and sched.requires_kv_delivery
    add(core, hasher, "A", 40, out=3)
    free_before = sched.kv_cache_manager.block_pool.get_num_free_blocks()
    core.step_fn()  # batch 1 (A's whole prompt) scheduled; no update yet
    core.abort_requests(["A"])  # batch 1 may still write A's blocks: their free waits
    assert "A" not in sched.requests and sched.deferred_frees
    assert sched.kv_cache_manager.block_pool.get_num_free_blocks() == free_before - 3
    core.step_fn()
    core.step_fn()  # batch 1's update: processed_step_seq reaches A's fence
    assert not sched.deferred_frees
    assert sched.kv_cache_manager.block_pool.get_num_free_blocks() == free_before
    check_invariants(sched.kv_cache_manager)


def test_sync_scheduling_frees_at_once():
    core, hasher = engine(StaticConnector(KVTransferConfig()), async_sched=False)
    assert not core.scheduler.defer_block_free
