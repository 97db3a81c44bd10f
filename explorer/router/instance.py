"""One simulated instance: a vLLM-like engine (the mirrored scheduler loop, `EngineCore` over a
`KVCacheManager` with events on: explorer/core/sched/), its publisher side, and the router's
bookkeeping of it.

`step` is one call of the engine loop (``step()``, or ``step_with_batch_queue()`` under the
async scheduler): the token budget, chunked prefill, FCFS admission, preemption and each
request's stop at its ``max_tokens`` are vLLM's. The KV event batch the scheduler publishes in
that step's update (at most one) goes out with the instance's own sequence number
(``encode_batch``: vLLM's msgpack payload), and the frames go through the same subscriber
state machine as the live page (`explorer.events.stream.KVEventStream`, no sockets). A
request's hit is what vLLM reports for it: the prefill stats its first output carries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from explorer.core.events import BlockStored, KVEventBatch, encode_batch
from explorer.core.hashing import BlockHash, external_block_hash, get_block_hash, init_none_hash
from explorer.core.kv_cache_manager import KVCacheManager
from explorer.core.kv_cache_utils import get_request_block_hasher
from explorer.core.metrics import PrefixCacheStats
from explorer.core.request import Request
from explorer.core.sched.config import SchedulerConfig
from explorer.core.sched.engine_core import make_engine_core
from explorer.events.stream import KVEventStream
from explorer.events.wire import live_frames
from explorer.prefill.configs import LLAMA3_8B_SHAPE
from explorer.prefill.estimate import estimate_prefill
from explorer.router.config import FleetConfig, FleetSpec, PrefillSpec
from explorer.router.hashing import HashMemo, MemoHasher
from explorer.router.results import InstanceResult
from explorer.router.stream import StreamRequest

MAX_MODEL_LEN = 1 << 20
MAX_NUM_SEQS = 64  # vLLM's max_num_seqs here (design section 7)


def footprint(req: StreamRequest) -> int:
    """Slots a request holds at its largest: the prompt plus every output token but the last."""
    return len(req.tokens) + max(len(req.output) - 1, 0)


def is_skipped(req: StreamRequest, fl: FleetSpec) -> bool:
    """A request that could not fit even in an empty instance is skipped before routing (alone,
    it would preempt itself forever)."""
    return -(-footprint(req) // fl.block_size) > fl.num_blocks - 1


class PrefillEstimator:
    """The walkthrough's prefill-time estimate, memoized per (prompt, hit)."""

    def __init__(self, p: PrefillSpec) -> None:
        self.p = p
        self.memo: dict[tuple[int, int], tuple[float, float]] = {}

    def __call__(self, prompt: int, hit: int) -> tuple[float, float]:
        """(full ms, computed ms) of one prefill."""
        got = self.memo.get((prompt, hit))
        if got is None:
            p = self.p
            e = estimate_prefill(
                p.params, prompt, hit, p.peak_tflops * 1e12, p.utilization, LLAMA3_8B_SHAPE if p.attention else None
            )
            got = self.memo[(prompt, hit)] = (e.full_s * 1e3, e.cached_s * 1e3)
        return got


class Outbox:
    """The scheduler's KV event publisher: keeps the step's batch until the instance sends it."""

    def __init__(self) -> None:
        self.batches: list[KVEventBatch] = []

    def publish(self, batch: KVEventBatch) -> None:
        self.batches.append(batch)


@dataclass
class StepReport:
    """What one engine step told the router: stream indices with the hit the engine reported,
    those that finished, and those that arrived before it but were not admitted by it."""

    hits: list[tuple[int, int]] = field(default_factory=list)
    finished: list[int] = field(default_factory=list)
    waited: list[int] = field(default_factory=list)


class Instance:
    """One simulated instance: an engine, its publisher side, and the router's bookkeeping."""

    def __init__(
        self,
        i: int,
        cfg: FleetConfig,
        algo: str,
        seed: str | None,
        stream: KVEventStream,
        drop: Callable[[], bool],
        memo: HashMemo | None,
        published: set[Any],
    ) -> None:
        fl = cfg.fleet
        self.index = i
        self.name = f"instance-{i}"
        self.topic = self.name.encode()
        self.block_size = fl.block_size
        ctx = init_none_hash(algo, seed)
        self.seed = ctx.hash_seed
        self.hasher: Callable[[Request], list[BlockHash]] = get_request_block_hasher(fl.block_size, ctx)
        if memo is not None:
            table = memo.table(ctx, fl.block_size, cfg.failures.tenant_salt)
            self.hasher = MemoHasher(self.hasher, table, memo)
        self.manager = KVCacheManager(
            fl.num_blocks,
            fl.block_size,
            MAX_MODEL_LEN,
            enable_caching=True,
            enable_kv_cache_events=True,
            log_stats=True,
            use_int_block_hashes=fl.int_block_hashes,
        )
        self.outbox = Outbox()
        sched = SchedulerConfig(fl.max_num_batched_tokens, MAX_NUM_SEQS, 0, fl.scheduler == "async")
        self.core = make_engine_core(self.manager, sched, self.outbox)
        self.totals = PrefixCacheStats()  # summed over the SchedulerStats of every update
        self.stream = stream  # the subscriber every instance publishes to
        self.drop = drop
        self.published = published
        self.seq = 0
        self.live: dict[str, tuple[int, Request, int]] = {}  # id -> (stream index, request, tenant)
        self.arrived: list[str] = []  # added since the last step
        self.busy = False  # the engine may have work (it had some at its last step)
        self.in_flight = 0
        self.routed = 0
        self.max_queue = 0
        self.full_ms = 0.0
        self.computed_ms = 0.0
        self.first_tenant: dict[bytes, int] = {}
        self.cross_tenant_hit_tokens = 0

    def add(self, req: StreamRequest, cache_salt: str | None) -> None:
        """The routed request arrives (``EngineCore.add_request``): it generates its output,
        or one token when it has none (vLLM's smallest ``max_tokens``)."""
        rid = f"r{req.index}"
        output = req.output or (0,)
        r = Request(rid, req.tokens, self.hasher, cache_salt=cache_salt, max_tokens=len(output))
        self.core.add_request(r, output)
        self.live[rid] = (req.index, r, req.tenant)
        self.arrived.append(rid)
        self.busy = True
        self.in_flight += 1
        self.max_queue = max(self.max_queue, self.core.scheduler.get_request_counts()[1])

    def step(self, now_ms: float, est: PrefillEstimator, prompt_len: Sequence[int]) -> StepReport:
        """One call of the engine loop at ``now_ms``, then its event batch goes out."""
        report = StepReport()
        result = self.core.step_fn()
        so, outs = result.scheduler_output, result.engine_core_outputs
        if so is None and outs is None:
            self.busy = False
            return report
        admitted = set(so.scheduled_new_reqs) if so is not None else set()
        report.waited = [self.live[rid][0] for rid in self.arrived if rid not in admitted and rid in self.live]
        self.arrived = []
        if outs is not None:
            if outs.scheduler_stats is not None:
                self.totals.add(outs.scheduler_stats.prefix_cache_stats)
            for out in outs.outputs:
                k, r, tenant = self.live[out.request_id]
                if out.prefill_stats is not None:
                    hit = out.prefill_stats.num_cached_tokens
                    report.hits.append((k, hit))
                    full, done = est(prompt_len[k], hit)
                    self.full_ms += full
                    self.computed_ms += done
                    self._count_cross_tenant(r.block_hashes, tenant, hit)
                if out.finished:
                    del self.live[out.request_id]
                    self.in_flight -= 1
                    report.finished.append(k)
        self.publish(now_ms)
        return report

    def _count_cross_tenant(self, hashes: Sequence[BlockHash], tenant: int, hit: int) -> None:
        """Who cached what first, to tell cross-tenant hits apart."""
        bs = self.block_size
        ft = self.first_tenant
        for h in hashes[: hit // bs]:
            if ft.get(h, tenant) != tenant:
                self.cross_tenant_hit_tokens += bs
        for h in hashes:
            ft.setdefault(h, tenant)

    def publish(self, now_ms: float) -> None:
        """The step's event batch (none when the step's update queued no event), stamped with
        the simulated time; the frames reach the subscriber unless this batch is dropped."""
        batches, self.outbox.batches = self.outbox.batches, []
        for published in batches:
            for ev in published.events:
                if isinstance(ev, BlockStored):
                    self.published.update(ev.block_hashes)
            batch = KVEventBatch(now_ms / 1000.0, published.events, 0)
            seq, self.seq = self.seq, self.seq + 1
            if self.drop():
                continue
            self.stream.feed_live(live_frames(self.topic, seq, encode_batch(batch)), now=0.0)

    def view(self) -> dict[Any, int] | None:
        """The router's view of this instance: the subscriber's hash multiset (None: nothing
        received yet)."""
        inst = self.stream.instances.get((self.name, 0))
        return inst.hashes if inst is not None else None

    def engine_keys(self, form: str) -> set[int | bytes]:
        """The hashes the engine holds cached, in the events' ``form``."""
        out: set[int | bytes] = set()
        for key, _blocks in self.manager.block_pool.cached_block_hash_to_block.items():
            h = get_block_hash(key)
            out.add(external_block_hash(h) if form == "int64" else bytes(h))
        return out

    def stats(self) -> PrefixCacheStats:
        """The engine's own prefix-cache stats: every update's, and any recorded since."""
        totals = PrefixCacheStats()
        totals.add(self.totals)
        if self.manager.prefix_cache_stats is not None:
            totals.add(self.manager.prefix_cache_stats)
        return totals

    def result(self, event_form: str) -> InstanceResult:
        """This instance's numbers at the end of a run: the engine's own stats, and the router's
        view against what the engine really holds."""
        view = self.view() or {}
        truth = self.engine_keys(event_form)
        vk = {h for h, c in view.items() if c > 0}
        sub = self.stream.instances.get((self.name, 0))
        return InstanceResult(
            name=self.name,
            routed=self.routed,
            stats=self.stats().as_dict(),
            prefill_full_ms=self.full_ms,
            prefill_ms=self.computed_ms,
            max_queue=self.max_queue,
            subscriber=sub.counters() if sub is not None else {"batches": 0, "gaps": 0, "lost": 0},
            view_hashes=len(vk),
            engine_hashes=len(truth),
            phantom=len(vk - truth),
            missing=len(truth - vk),
            seed=self.seed,
        )
