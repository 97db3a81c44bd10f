"""A recorded replay's states without a snapshot per step: checkpoints and a cursor.

A recorded replay keeps every step's records (small, typed) and, every `spacing_for` steps, a
checkpoint: a copy of the engine. The state after step k is the nearest checkpoint at or
before k, copied and driven forward with the scenario's own ops (the engine is deterministic;
what the drive records is dropped, the trace keeps the first replay's steps). The number of
checkpoints is bounded (`MAX_CHECKPOINTS`), not only their spacing, so the memory does not grow
with steps x state; step 0 needs none (a fresh engine is the state before the first step).

Readers walk the states in order (the stage reads k - 1 and k for k = 0..n), so one cursor
engine moves forward and keeps the last two snapshots: a whole walk costs about one replay
more. A read behind the cursor starts again from the checkpoint before it. One `States` may be
read by several sessions at once: a lock guards the cursor.

What a checkpoint shares instead of copying (copy.deepcopy with a prepared memo): the scenario,
its ops and the hasher (immutable); block hashes (bytes); and a request's lists, which a
checkpoint keeps as a prefix of a list only this store ever extends (`_Prefix`): a request's
token ids and block hashes only grow, so the checkpoints of one request share one list, and a
list that did change is checked and kept afresh. A checkpoint's blocks carry no free-list
links (the queue is kept as its order, `_FreeOrder`), so a block that did not change since
the previous checkpoint is shared with it; a copy links the queue again.
"""

from __future__ import annotations

import copy
import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from explorer.core.kv_cache_utils import FreeKVCacheBlockQueue, KVCacheBlock
from explorer.core.request import Request
from explorer.scenario.ops import Arrival, Op
from explorer.scenario.snapshot import Snapshots
from explorer.scenario.spec import Scenario
from explorer.scenario.trace import Snapshot, Step, StepStats, Trace

MIN_SPACING = 16  # steps between checkpoints, at least
MAX_CHECKPOINTS = 8  # besides step 0, at most this many (a longer replay spaces them wider)


def spacing_for(num_steps: int) -> int:
    """Steps between two checkpoints of a replay of ``num_steps`` steps."""
    return max(MIN_SPACING, math.ceil(num_steps / MAX_CHECKPOINTS))


class Replayable(Protocol):
    """What both engines offer (ScenarioEngine, EngineStepReplay)."""

    scenario: Scenario
    snapshots: Snapshots
    recorder: Any
    manager: Any

    def apply(self, op: Op) -> Step: ...

    def snapshot(self) -> Snapshot: ...

    def live_requests(self) -> Iterable[Request]: ...

    def new_snapshots(self) -> Snapshots: ...

    def forget_step(self) -> None: ...


@dataclass(frozen=True, slots=True, eq=False)
class _Prefix:
    """A request's list as a checkpoint keeps it: the first ``n`` items of ``items``."""

    items: list[Any] | tuple[Any, ...]  # a tuple: an arrival's prompt in the scenario
    n: int

    def copy(self) -> list[Any]:
        return list(self.items[: self.n])


@dataclass(frozen=True, slots=True, eq=False)
class _FreeOrder:
    """A checkpoint's free queue: its blocks, head to tail (a copy links them again)."""

    blocks: tuple[KVCacheBlock, ...]


class _Lists:
    """What the checkpoints of one replay share: the lists per request id (a list is only ever
    extended here, so every `_Prefix` handed out stays what it was), and the blocks: a block no
    op changed since the last checkpoint is the same object in both (a checkpoint's blocks
    carry no free-list links and are never driven)."""

    def __init__(self, ops: tuple[Op, ...] = ()) -> None:
        self._by_request: dict[str, list[list[Any]]] = {}
        # the prompts of the scenario's arrivals, by request id: a request's prompt and, until
        # it samples, all its tokens are a prefix of one
        self._prompts: dict[str, list[tuple[int, ...]]] = {}
        for op in ops:
            if isinstance(op, Arrival):
                self._prompts.setdefault(op.id, []).append(op.prompt)
        self._blocks: dict[int, tuple[tuple[Any, ...], KVCacheBlock]] = {}

    def block(self, b: KVCacheBlock) -> KVCacheBlock:
        state = (b.ref_cnt, b.block_hash, b.block_hash_num_tokens, b.is_null)
        seen = self._blocks.get(b.block_id)
        if seen is not None and seen[0] == state:
            return seen[1]
        kept = copy.deepcopy(b, {})  # without links (KVCacheBlock.__deepcopy__)
        self._blocks[b.block_id] = (state, kept)
        return kept

    def prefix(self, request_id: str, live: list[Any]) -> _Prefix:
        kept = self._by_request.setdefault(request_id, [])
        n = len(live)
        for prompt in self._prompts.get(request_id, ()):
            if len(prompt) >= n and prompt[:n] == tuple(live):
                return _Prefix(prompt, n)
        for items in kept:
            m = len(items)
            if m >= n and items[:n] == live:
                return _Prefix(items, n)
            if m < n and live[:m] == items:
                items.extend(live[m:])
                return _Prefix(items, n)
        kept.append(list(live))
        return _Prefix(kept[-1], n)


def _shared(engine: Replayable) -> dict[int, Any]:
    """A memo that shares what no op changes: the scenario and the request hasher."""
    memo: dict[int, Any] = {id(engine.scenario): engine.scenario}
    for name in ("hasher", "ctx"):
        obj = getattr(engine, name, None)
        if obj is not None:
            memo[id(obj)] = obj
    memo[id(engine.snapshots)] = None  # each copy takes its own snapshots
    return memo


@dataclass(frozen=True, slots=True, eq=False)
class Checkpoint:
    """An engine as it was after ``step`` ops, with its requests' lists kept as prefixes."""

    step: int
    engine: Any  # the engine with `_Prefix` lists: never driven, only copied again
    requests: tuple[Request, ...]


def take_checkpoint(engine: Replayable, step: int, lists: _Lists) -> Checkpoint:
    engine.forget_step()
    memo = _shared(engine)
    pool = engine.manager.block_pool
    for b in pool.blocks:
        memo[id(b)] = lists.block(b)
    queue = pool.free_block_queue
    memo[id(queue)] = _FreeOrder(tuple(memo[id(b)] for b in queue.get_all_free_blocks()))
    requests = []
    for r in engine.live_requests():
        t = object.__new__(Request)
        memo[id(r)] = t
        state = {}
        for name, value in vars(r).items():
            if type(value) is list:
                kept = memo.get(id(value))
                if kept is None:
                    kept = memo[id(value)] = lists.prefix(r.request_id, value)
                state[name] = kept
            else:
                state[name] = copy.deepcopy(value, memo)
        vars(t).update(state)
        requests.append(t)
    return Checkpoint(step, copy.deepcopy(engine, memo), tuple(requests))


def engine_from(checkpoint: Checkpoint) -> Any:
    """A live engine in the checkpoint's state (the checkpoint stays as it was)."""
    template = checkpoint.engine
    memo = _shared(template)
    pool = template.manager.block_pool
    for b in pool.blocks:
        memo[id(b)] = copy.deepcopy(b, {})
    order = pool.free_block_queue
    memo[id(order)] = FreeKVCacheBlockQueue([memo[id(b)] for b in order.blocks])
    for t in checkpoint.requests:
        r = object.__new__(Request)
        memo[id(t)] = r
        state = {}
        for name, value in vars(t).items():
            if isinstance(value, _Prefix):
                live = memo.get(id(value))
                if live is None:
                    live = memo[id(value)] = value.copy()
                state[name] = live
            else:
                state[name] = copy.deepcopy(value, memo)
        vars(r).update(state)
    engine = copy.deepcopy(template, memo)
    engine.snapshots = engine.new_snapshots()
    return engine


class States:
    """The state after each step of one recorded replay, from its checkpoints (thread-safe)."""

    def __init__(
        self, ops: tuple[Op, ...], fresh: Callable[[], Replayable], checkpoints: list[Checkpoint], final: Snapshot
    ) -> None:
        self.ops = ops
        self._fresh = fresh  # a new engine before the first op
        self._checkpoints = checkpoints  # by step, ascending
        self._final = final  # the state after the last op, which the first replay took
        self._lock = threading.Lock()
        self._engine: Replayable | None = None
        self._at = -1  # the cursor engine's step
        self._kept: dict[int, Snapshot] = {}  # the cursor's last two snapshots

    @property
    def checkpoint_steps(self) -> tuple[int, ...]:
        return tuple(c.step for c in self._checkpoints)

    def at(self, k: int) -> Snapshot:
        """The state after ``k`` ops, 0 <= k <= len(ops)."""
        if not 0 <= k <= len(self.ops):
            raise IndexError(f"no step {k} in a replay of {len(self.ops)} steps")
        with self._lock:
            snap = self._kept.get(k)
            if snap is not None:
                return snap
            if k == len(self.ops):  # the end of a walk: the cursor's engine is not needed again
                snap = self._final
                if self._engine is not None and self._at == k - 1 and k - 1 in self._kept:
                    self.drive(self._engine, self.ops[k - 1])  # one op: a state sharing with k - 1's
                    snap = self._engine.snapshot()
                    self._kept = {k - 1: self._kept[k - 1]}
                else:
                    self._kept = {}
                self._kept[k] = snap
                self._engine, self._at = None, -1
                return snap
            base = max((c for c in self._checkpoints if c.step <= k), key=lambda c: c.step, default=None)
            start = 0 if base is None else base.step
            # Go on from the cursor when it is at or before k and no further behind than the
            # checkpoint's spacing (a walk reaching a checkpoint steps on rather than copying).
            near = self._engine is not None and self._at <= k and (self._at >= start or k - self._at <= MIN_SPACING)
            if not near:
                self._engine = self._fresh() if base is None else engine_from(base)
                self._at = start
                self._kept = {}
            engine = self._engine
            assert engine is not None
            while self._at < k:
                self.drive(engine, self.ops[self._at])
                self._at += 1
                if self._at >= k - 1:
                    self._keep(self._at, engine.snapshot())
            if k not in self._kept:  # at the checkpoint itself
                self._keep(k, engine.snapshot())
            return self._kept[k]

    def _keep(self, k: int, snap: Snapshot) -> None:
        self._kept = {j: s for j, s in self._kept.items() if j == k - 1}
        self._kept[k] = snap

    @staticmethod
    def drive(engine: Replayable, op: Op) -> None:
        """One op, as the first replay ran it; its step is dropped."""
        engine.apply(op)


class Engine(Replayable, Protocol):
    """An engine as a replay drives it: its trace's fields too, and its class's constructor."""

    ctx: Any
    reset_ok: list[bool]

    def __init__(self, scenario: Scenario, hash_seed: str | None = None, record: bool = True) -> None: ...

    def step_stats(self) -> StepStats: ...


def run_ops(engine: Engine, ops: tuple[Op, ...], catch: type[Exception] | None = None) -> tuple[Trace, str | None]:
    """Apply ``ops`` in order into a Trace. A recorded engine (one with a recorder) keeps a
    checkpoint every `spacing_for` steps and every step's stats. With ``catch``, an op that
    raises it ends the replay there: the steps before it are kept, and its message returned."""
    record = engine.recorder is not None
    initial = engine.snapshot()
    spacing = spacing_for(len(ops))
    lists = _Lists(ops)
    checkpoints: list[Checkpoint] = []
    stats = [engine.step_stats()] if record else []
    steps: list[Step] = []
    error = None
    stops: tuple[type[Exception], ...] = () if catch is None else (catch,)
    for i, op in enumerate(ops, start=1):
        try:
            steps.append(engine.apply(op))
        except stops as e:
            error = str(e)
            break
        if record:
            stats.append(engine.step_stats())
            if i % spacing == 0 and i < len(ops):
                checkpoints.append(take_checkpoint(engine, i, lists))
    states = None
    final = engine.snapshot()
    if record:
        ctx, scenario, kind = engine.ctx, engine.scenario, type(engine)
        seed = None if ctx is None else ctx.hash_seed
        ran = ops[: len(steps)]
        kept = [c for c in checkpoints if c.step < len(ran)]
        states = States(ran, lambda: kind(scenario, seed, record=False), kept, final)
    return trace_of(engine, initial, steps, states, tuple(stats), final), error


def trace_of(
    engine: Engine,
    initial: Snapshot,
    steps: list[Step],
    states: States | None,
    stats: tuple[StepStats, ...] = (),
    final: Snapshot | None = None,
) -> Trace:
    """The Trace of the steps ``engine`` applied: its final state, and with ``states`` (a
    recorded replay) every step's."""
    ctx = engine.ctx
    return Trace(
        scenario=engine.scenario,
        hash_seed=None if ctx is None else ctx.hash_seed,
        none_hash=None if ctx is None else bytes(ctx.none_hash),
        initial=initial,
        steps=tuple(steps),
        reset_ok=tuple(engine.reset_ok),
        final_snapshot=engine.snapshot() if final is None else final,
        states=states,
        stats=stats,
    )
