"""What a replay keeps: frozen steps with the core's reports, the states and the replay JSON.

A `Step` holds what one op did as the core reported it (kv_cache_observer.py): its typed
records (records.py: the lookup and its probes, the admission checks, the touched, popped,
cached and freed blocks...) in one tuple in report order, which a panel selects by kind with
`Step.of`. Nothing here works out what the engine would do; it only stores what it was told.
A step keeps no snapshot: `Trace.snapshot_at(k)` gives the state after step k from the
replay's checkpoints (checkpoints.py).
`Trace.to_json()` is the replay JSON of design section 5, which holds none of the records.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from explorer.core.events import KVCacheEvent, event_to_json
from explorer.core.sched.output import EngineCoreOutputs
from explorer.miss.reasons import Miss
from explorer.scenario.connector_reports import ConnectorReport
from explorer.scenario.records import Popped, Record
from explorer.scenario.spec import Op, Scenario

R = TypeVar("R", bound=Record)


@dataclass(frozen=True)
class RequestView:
    request_id: str
    status: str
    num_tokens: int
    num_prompt_tokens: int
    num_computed_tokens: int
    block_ids: tuple[int, ...]
    block_hashes: tuple[bytes, ...]
    lora: str | None
    cache_salt: str | None
    prompt_logprobs: bool
    num_preemptions: int
    num_output_tokens: int = 0
    block_ids_by_group: tuple[tuple[int, ...], ...] = ()  # with hybrid groups (0 = the null block)


@dataclass(frozen=True)
class Snapshot:
    """The pool and requests after a step. ``blocks[i]`` = (ref_cnt, hash or None) of block i."""

    blocks: tuple[tuple[int, bytes | None], ...]
    free_queue: tuple[int, ...]
    cached: tuple[tuple[bytes, tuple[int, ...]], ...]  # hash -> block ids, insertion order
    requests: tuple[RequestView, ...]  # live requests, in arrival order
    stats: Mapping[str, int]
    window_hit_rate: float
    window_requests: int
    # with hybrid groups: (group id, hash, block ids) for every group; `cached` is group 0's
    cached_by_group: tuple[tuple[int, bytes, tuple[int, ...]], ...] = ()
    # With the offloading connector: its CPU tier, least recently used first, as
    # (block hash, CPU chunk id, ref_cnt: -1 while being written, else the loads reading it).
    cpu_tier: tuple[tuple[bytes, int, int], ...] | None = None

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_queue)

    def request(self, request_id: str) -> RequestView | None:
        return next((r for r in self.requests if r.request_id == request_id), None)


@dataclass(frozen=True)
class Scheduled:
    """One request of an engine step's batch, as the scheduler reported it."""

    request_id: str
    num_tokens: int
    num_computed_tokens: int  # after scheduling, placeholders included
    is_prefill_chunk: bool
    num_placeholders: int  # async output tokens in flight


@dataclass(frozen=True)
class EngineStepRecord:
    """What a `step` op did (design section 7): the batch this call scheduled, the outputs of
    the update it ran, who finished, the update's prefix-cache stats (None: no update ran),
    and, in a recorded replay, the scheduler's reports."""

    scheduled: Mapping[str, int]
    outputs: Mapping[str, tuple[int, ...]]
    finished: tuple[str, ...]
    step_stats: Mapping[str, int] | None
    batch: tuple[Scheduled, ...] = ()
    preemption_reasons: tuple[tuple[str, str], ...] = ()  # (request id, why), in order
    # With a KV connector: every connector allocation of the step, {id: external tokens}.
    external: Mapping[str, int] | None = None
    connector: tuple[ConnectorReport, ...] = ()  # in a recorded replay, in report order
    # The update's own report (EngineCoreOutputs: per-request outputs with their prefill stats
    # and events, and the SchedulerStats); None when no update ran. Metrics are recorded from it.
    update: EngineCoreOutputs | None = None
    # What the metrics export after this step (the METRIC_EXPECT_TYPES keys), for `expect`.
    metrics: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Step:
    index: int
    op: Op
    ok: bool
    events: tuple[KVCacheEvent, ...]
    hit_tokens: int | None = None  # admit only
    new_block_ids: tuple[int, ...] | None = None  # admit, decode, generate
    num_sampled: int | None = None  # sample, generate: tokens appended (a failed generate stops early)
    # What the core reported during the op (records.py), in report order; select with `of`.
    # Not in the replay JSON: a lean replay (record=False) records none.
    records: tuple[Record, ...] = ()
    preempted: tuple[str, ...] = ()
    engine_step: EngineStepRecord | None = None  # a `step` op of an engine-step scenario
    # hybrid groups (design section 8): the JSON fields
    hybrid: Mapping[str, Any] | None = None
    expect_failures: tuple[str, ...] = ()
    # Why the lookups missed (design section 14): an admit's own, a `step`'s by request id.
    miss: Miss | None = None
    misses: Mapping[str, Miss] | None = None

    def of(self, kind: type[R]) -> tuple[R, ...]:
        """The step's records of one kind, in the order the core reported them."""
        return tuple(r for r in self.records if isinstance(r, kind))

    def first(self, kind: type[R]) -> R | None:
        """The first record of a kind, or None (an admit's own admission check is its first)."""
        return next((r for r in self.records if isinstance(r, kind)), None)

    def evictions(self) -> tuple[Popped, ...]:
        """The pops of blocks that still held a hash (an eviction each: the hash is lost, one
        BlockRemoved), in pop order."""
        return tuple(r for r in self.records if isinstance(r, Popped) and r.evicted_hash is not None)

    def last(self, kind: type[R]) -> R | None:
        """The last record of a kind, or None. The lookup the panels draw is the op's last
        `Lookup`: an admit makes one, an engine step one per request it looked up."""
        return next((r for r in reversed(self.records) if isinstance(r, kind)), None)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "op": self.op.op,
            "id": self.op.id,
            "ok": self.ok,
            "events": [event_to_json(e) for e in self.events],
        }
        if self.hit_tokens is not None:
            d["hit_tokens"] = self.hit_tokens
        if self.new_block_ids is not None:
            d["new_block_ids"] = list(self.new_block_ids)
        if self.op.op == "admit":
            d["miss"] = None if self.miss is None else self.miss.to_json()
        es = self.engine_step
        if es is not None:
            d["misses"] = {} if self.misses is None else {k: m.to_json() for k, m in self.misses.items()}
            d["scheduled"] = dict(es.scheduled)
            d["outputs"] = {k: list(v) for k, v in es.outputs.items()}
            d["preempted"] = list(self.preempted)
            d["finished"] = list(es.finished)
            d["step_stats"] = None if es.step_stats is None else dict(es.step_stats)
            if es.external is not None:
                d["external"] = dict(es.external)
        if self.hybrid is not None:
            d.update(self.hybrid)
        return d


class StateSource(Protocol):
    """Where a recorded replay's states come from (checkpoints.States)."""

    def at(self, k: int) -> Snapshot: ...


@dataclass(frozen=True)
class StepStats:
    """The prefix-cache stats after a step, as its snapshot holds them (kept for every step of a
    recorded replay: the hit-rate chart reads them all at each step)."""

    stats: Mapping[str, int]
    window_hit_rate: float
    window_requests: int


@dataclass(frozen=True)
class Trace:
    scenario: Scenario
    hash_seed: str | None
    none_hash: bytes | None
    initial: Snapshot
    steps: tuple[Step, ...]
    reset_ok: tuple[bool, ...]
    # The state after the last step.
    final_snapshot: Snapshot | None = None
    # A recorded replay's states (checkpoints.py); None in a lean replay (record=False).
    states: StateSource | None = field(default=None, compare=False, repr=False)
    # A recorded replay's stats after each step (0 = before the first).
    stats: tuple[StepStats, ...] = field(default=(), compare=False, repr=False)

    @property
    def final(self) -> Snapshot:
        if self.final_snapshot is not None:
            return self.final_snapshot
        return self.snapshot_at(len(self.steps))

    @property
    def expect_failures(self) -> list[str]:
        return [f for s in self.steps for f in s.expect_failures]

    def snapshot_at(self, k: int) -> Snapshot:
        """The state after k steps (k = 0: before the first), from the replay's checkpoints."""
        if k == 0:
            return self.initial
        if self.states is None:
            if k == len(self.steps) and self.final_snapshot is not None:
                return self.final_snapshot
            raise ValueError("a lean replay (record=False) keeps no per-step snapshots")
        return self.states.at(k)

    def stats_at(self, k: int) -> StepStats:
        """The stats after k steps, without the state (every step's are kept)."""
        if self.stats:
            return self.stats[k]
        snap = self.snapshot_at(k)
        return StepStats(snap.stats, snap.window_hit_rate, snap.window_requests)

    def to_json(self) -> dict[str, Any]:
        """The replay JSON of design section 5."""
        f = self.final
        engine_steps = self.scenario.sched is not None
        groups = self.scenario.groups
        hybrid: dict[str, Any] = {}
        if groups is not None:
            by_group: dict[str, dict[str, list[int]]] = {str(g): {} for g in range(len(groups.groups))}
            for gid, h, ids in f.cached_by_group:
                by_group[str(gid)][h.hex()] = list(ids)
            hybrid["cached_by_group"] = by_group
        out = {
            "steps": [s.to_json() for s in self.steps],
            "final": {
                "free_queue": list(f.free_queue),
                "blocks": [
                    {"id": i, "ref_cnt": rc, "hash": None if h is None else h.hex()}
                    for i, (rc, h) in enumerate(f.blocks)
                    if i != 0
                ],
                "cached": {h.hex(): list(ids) for h, ids in f.cached},
                "requests": {
                    r.request_id: {
                        "block_ids": list(r.block_ids),
                        "num_computed_tokens": r.num_computed_tokens,
                        "block_hashes": [h.hex() for h in r.block_hashes],
                        **({"status": r.status, "num_output_tokens": r.num_output_tokens} if engine_steps else {}),
                        **({"block_ids_by_group": [list(g) for g in r.block_ids_by_group]} if groups else {}),
                    }
                    for r in f.requests
                },
                "stats": dict(f.stats),
                **({} if f.cpu_tier is None else {"cpu_tier": [h.hex() for h, _, _ in f.cpu_tier]}),
                "reset_ok": list(self.reset_ok),
                "none_hash": None if self.none_hash is None else self.none_hash.hex(),
                "hash_seed": self.hash_seed,
                "vllm": self.scenario.vllm,
                **hybrid,
            },
        }
        return out


def with_expectations(step: Step, snap: Snapshot | None) -> Step:
    """Compare the step's `expect` table with the step and the state after it (``snap``, given
    when the step has an `expect`); failures are recorded, the replay goes on."""
    if not step.op.expect:
        return step
    assert snap is not None, "a step with `expect` is compared with the state after it"
    actual: dict[str, Any] = {
        "ok": step.ok,
        "hit_tokens": step.hit_tokens,
        "new_block_ids": list(step.new_block_ids) if step.new_block_ids is not None else None,
        "num_free_blocks": snap.num_free_blocks,
        "free_queue": list(snap.free_queue),
        "event_types": [type(e).__name__ for e in step.events],
        **{f"stats_{k}": v for k, v in snap.stats.items()},
    }
    if step.hybrid is not None:
        actual.update(step.hybrid)
    if step.engine_step is not None:
        actual["scheduled"] = dict(step.engine_step.scheduled)
        actual["preempted"] = list(step.preempted)
        actual["finished"] = list(step.engine_step.finished)
        actual.update(step.engine_step.metrics or {})
    failures = tuple(
        f"{step.op.label}: expected {key} = {_shown(want)}, got {_shown(actual[key])}"
        for key, want in step.op.expect.items()
        if actual[key] != want
    )
    return replace(step, expect_failures=failures) if failures else step


MAX_SHOWN = 200  # characters of one value in an expect failure (a table may hold 100,000 entries)


def _shown(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= MAX_SHOWN else f"{shown[: MAX_SHOWN - 3]}... ({len(shown):,} characters)"
