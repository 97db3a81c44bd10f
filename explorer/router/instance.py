"""One simulated instance: its own engine (`ScenarioEngine`: a `KVCacheManager` with events on),
its publisher side, and the router's bookkeeping of it.

After every engine step the instance's queued events become one batch (``encode_batch``:
vLLM's msgpack payload) with the instance's own sequence number, and the frames go through
the same subscriber state machine as the live page (`explorer.events.stream.KVEventStream`, no
sockets).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from explorer.core.events import BlockStored, KVEventBatch, encode_batch
from explorer.core.hashing import BlockHash, external_block_hash, get_block_hash
from explorer.events.stream import KVEventStream
from explorer.events.wire import live_frames
from explorer.prefill.configs import LLAMA3_8B_SHAPE
from explorer.prefill.estimate import estimate_prefill
from explorer.router.config import FleetConfig, FleetSpec, PrefillSpec
from explorer.router.hashing import HashMemo, MemoHasher
from explorer.router.results import InstanceResult
from explorer.router.stream import StreamRequest
from explorer.scenario.engine import ScenarioEngine
from explorer.scenario.spec import EngineConfig, Op, Scenario
from explorer.scenario.trace import Step

MAX_MODEL_LEN = 1 << 20


def footprint(req: StreamRequest) -> int:
    """Slots a request holds at its largest: the prompt plus every output token but the last."""
    return len(req.tokens) + max(len(req.output) - 1, 0)


def is_skipped(req: StreamRequest, fl: FleetSpec) -> bool:
    """A request that could not fit even in an empty instance is skipped before routing."""
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
        engine_cfg = EngineConfig(
            block_size=fl.block_size,
            num_blocks=fl.num_blocks,
            max_model_len=MAX_MODEL_LEN,
            hash_algo=algo,
            hash_seed=seed or "",
            enable_prefix_caching=True,
            events=True,
            int_block_hashes=fl.int_block_hashes,
        )
        self.engine = ScenarioEngine(
            Scenario(self.name, engine_cfg, (), source=self.name), hash_seed=seed, record=False
        )
        self.seed = self.engine.ctx.hash_seed if self.engine.ctx else None
        if memo is not None and self.engine.ctx is not None and self.engine.hasher is not None:
            table = memo.table(self.engine.ctx, fl.block_size, cfg.failures.tenant_salt)
            self.engine.hasher = MemoHasher(self.engine.hasher, table, memo)
        self.stream = stream  # the subscriber every instance publishes to
        self.drop = drop
        self.published = published
        self.seq = 0
        self.pending_events: list[Any] = []
        self.waiting: deque[int] = deque()
        self.in_flight = 0
        self.routed = 0
        self.max_queue = 0
        self.full_ms = 0.0
        self.computed_ms = 0.0
        self.first_tenant: dict[bytes, int] = {}
        self.cross_tenant_hit_tokens = 0
        self.ops = 0

    def apply(self, op: str, rid: str, **kw: Any) -> Step:
        self.ops += 1
        step = self.engine.apply(Op(self.ops, op, id=rid, **kw))
        if step.events:
            self.pending_events.extend(step.events)
        return step

    def fits(self, rid: str, num_tokens: int) -> bool:
        """Whether the waiting request ``rid`` can be admitted now with room for ``num_tokens``
        slots (its whole footprint), as a scheduler checks before it admits."""
        eng = self.engine
        # A hit never needs more blocks than computing everything would, so a lookup is
        # only needed to decide when the room is tight.
        if -(-num_tokens // self.block_size) <= eng.pool.get_num_free_blocks():
            return True
        return eng.sched.fits(eng.requests[rid], num_tokens)

    def admit(self, rid: str, req: StreamRequest, est: PrefillEstimator) -> int:
        """Admit a request that `fits` (lookup + allocate_slots for the whole prompt), then
        compute its output in one engine step; the local hit in tokens."""
        r = self.engine.requests[rid]
        step = self.apply("admit", rid)
        assert step.ok, "admission was checked to fit"
        hit = step.hit_tokens or 0
        full, done = est(len(req.tokens), hit)
        self.full_ms += full
        self.computed_ms += done
        out = req.output
        if len(out) > 1:
            # `sample` all but the last output token at once (append_output_token_ids takes
            # a list; the hasher then hashes the newly full blocks), compute them in one
            # step, then sample the last one, which stays pending as in vLLM.
            r.append_output_token_ids(list(out[:-1]))
            step = self.apply("decode", rid)
            assert step.ok, "the footprint was checked to fit"
        if out:
            r.append_output_token_ids(out[-1])
        self._count_cross_tenant(r.block_hashes, req.tenant, hit)
        return hit

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
        """One engine step's events as one batch (none when there are none), as the scheduler
        publishes them; the frames reach the subscriber unless this batch is dropped."""
        if not self.pending_events:
            return
        for ev in self.pending_events:
            if isinstance(ev, BlockStored):
                self.published.update(ev.block_hashes)
        batch = KVEventBatch(now_ms / 1000.0, self.pending_events, 0)
        self.pending_events = []
        seq, self.seq = self.seq, self.seq + 1
        if self.drop():
            return
        self.stream.feed_live(live_frames(self.topic, seq, encode_batch(batch)), now=0.0)

    def view(self) -> dict[Any, int] | None:
        """The router's view of this instance: the subscriber's hash multiset (None: nothing
        received yet)."""
        inst = self.stream.instances.get((self.name, 0))
        return inst.hashes if inst is not None else None

    def engine_keys(self, form: str) -> set[int | bytes]:
        """The hashes the engine holds cached, in the events' ``form``."""
        out: set[int | bytes] = set()
        for key, _blocks in self.engine.pool.cached_block_hash_to_block.items():
            h = get_block_hash(key)
            out.add(external_block_hash(h) if form == "int64" else bytes(h))
        return out

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
            stats=self.engine.totals.as_dict(),
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
