"""An engine core over a small pool, for the scheduler's unit tests."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from explorer.core.hashing import init_none_hash
from explorer.core.kv_cache_manager import KVCacheManager
from explorer.core.kv_cache_observer import KVCacheObserver
from explorer.core.kv_cache_utils import get_request_block_hasher
from explorer.core.request import Request, RequestStatus
from explorer.core.sched.config import SchedulerConfig
from explorer.core.sched.engine_core import EngineCore, EngineStep, make_engine_core
from explorer.core.sched.output import KVEventCollector
from tests.core.invariants import EventMirror, check_invariants


class Log(KVCacheObserver):
    """Keeps the cache and scheduler reports, in order."""

    def __init__(self) -> None:
        self.cached: list[int] = []  # block indices given a hash
        self.scheduled: list[tuple[str, int, bool, int]] = []
        self.preempted: list[tuple[str, str]] = []
        self.finished: list[tuple[str, str]] = []

    def on_cache(self, block_id, block_index, block_hash, duplicates):
        self.cached.append(block_index)

    def on_scheduled(self, request_id, num_tokens, num_computed_tokens, is_prefill_chunk, num_placeholders):
        self.scheduled.append((request_id, num_tokens, is_prefill_chunk, num_placeholders))

    def on_preempted(self, request_id, reason):
        self.preempted.append((request_id, reason))

    def on_finished(self, request_id, status):
        self.finished.append((request_id, status))


class Engine:
    """EngineCore + its manager, publisher and observer; every step is checked."""

    def __init__(
        self,
        num_blocks: int = 64,
        block_size: int = 16,
        budget: int = 2048,
        max_num_seqs: int = 64,
        threshold: int = 0,
        async_scheduling: bool = False,
        max_model_len: int = 1 << 20,
        caching: bool = True,
    ) -> None:
        self.ctx = init_none_hash("sha256", None)
        self.hasher = get_request_block_hasher(block_size, self.ctx) if caching else None
        self.log = Log()
        self.mgr = KVCacheManager(
            num_blocks,
            block_size,
            max_model_len,
            enable_caching=caching,
            enable_kv_cache_events=True,
            observer=self.log,
        )
        self.publisher = KVEventCollector()
        config = SchedulerConfig(budget, max_num_seqs, threshold, async_scheduling)
        self.core: EngineCore = make_engine_core(self.mgr, config, self.publisher)
        self.sched = self.core.scheduler
        self.mirror = EventMirror()

    def arrive(self, rid: str, prompt: Sequence[int], output: Sequence[int]) -> Request:
        req = Request(rid, list(prompt), self.hasher, max_tokens=len(output))
        self.core.add_request(req, list(output))
        return req

    def step(self) -> EngineStep:
        n = len(self.publisher.batches)
        result = self.core.step_fn()
        for batch in self.publisher.batches[n:]:
            self.mirror.apply(batch.events)
        self.check()
        return result

    def scheduled(self, result: EngineStep) -> dict[str, int]:
        return {} if result.scheduler_output is None else dict(result.scheduler_output.num_scheduled_tokens)

    def check(self) -> None:
        """The manager's invariants, the event stream, and the scheduler's own."""
        sched = self.sched
        check_invariants(self.mgr, sched.requests.values())
        # What a subscriber heard, plus what the next update will publish, is what the pool caches.
        heard = EventMirror()
        heard.stored = Counter(self.mirror.stored)
        heard.apply(self.mgr.block_pool.kv_event_queue)
        heard.check(self.mgr)
        assert len(sched.running) <= sched.max_num_running_reqs
        queued = [*sched.running, *sched.waiting]
        assert len({id(r) for r in queued}) == len(queued), "a request is queued twice"
        assert {r.request_id for r in queued} == set(sched.requests), "queues and requests disagree"
        for r in sched.running:
            assert r.status == RequestStatus.RUNNING
        for r in sched.waiting:
            assert r.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED)
            assert r.num_computed_tokens == 0 and not self.mgr.get_block_ids(r.request_id)[0]
        for r in sched.requests.values():
            assert r.num_output_placeholders >= 0 and r.num_in_flight_tokens >= 0
            assert r.num_output_tokens <= (r.max_tokens or 0)
