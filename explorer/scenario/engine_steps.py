"""Replay an engine-step scenario (design section 7) through the mirrored scheduler.

`EngineStepReplay` holds a KV cache manager, vLLM's `Scheduler` or `AsyncScheduler` on it and
the engine loop with its played model (explorer/core/sched/); each op is one call:
- `arrive`: ``EngineCore.add_request`` (the model is told the request's ``output``);
- `step`: ``EngineCore.step()`` (sync) or ``step_with_batch_queue()`` (async), recorded as the
  batch it scheduled, the outputs, preemptions and finished requests of the update it ran, the
  one KV event batch that update published, and that update's prefix-cache stats;
- `abort`: ``finish_requests(id, FINISHED_ABORTED)``; `reset`: ``reset_prefix_cache``.
Only `step` entries carry events: vLLM publishes inside ``update_from_output``, so what an
abort or a reset queues arrives with the next step. The stats totals count every admission
recorded so far, including those whose batch has not been updated yet.
"""

from __future__ import annotations

from typing import Any, assert_never

from explorer.core.errors import SchedulingError
from explorer.core.metrics import CachingMetrics, PrefixCacheStats
from explorer.core.request import EngineCoreEventType, LoRARequest, Request
from explorer.core.sched.config import SchedulerConfig
from explorer.core.sched.engine_core import EngineStep, make_engine_core
from explorer.core.sched.kv_connector.offloading import OffloadingConnector
from explorer.core.sched.kv_connector.static import StaticConnector
from explorer.core.sched.output import EngineCoreOutputs, KVEventCollector
from explorer.miss.reasons import MissTracker
from explorer.miss.tee import observer_of
from explorer.scenario.checkpoints import States, run_ops, trace_of
from explorer.scenario.connector import held, make_connector
from explorer.scenario.connector_reports import (
    ConnectorLoaded,
    ConnectorLoadFailed,
    ConnectorLookup,
    ConnectorReport,
    CpuJobsDone,
    CpuLoad,
    CpuStore,
)
from explorer.scenario.ops import (
    Abort,
    Admit,
    Arrive,
    Decode,
    EngineArrive,
    EngineReset,
    Finish,
    Generate,
    Op,
    OpBase,
    Preempt,
    Reset,
    Sample,
    StepOp,
)
from explorer.scenario.recorder import (
    GROUP_0,
    HybridLog,
    StepError,
    StepRecorder,
    block_hasher,
    hash_lookahead,
    hashed_since,
    new_manager,
    step_fields,
)
from explorer.scenario.snapshot import Snapshots
from explorer.scenario.spec import Scenario
from explorer.scenario.trace import EngineStepRecord, Scheduled, Snapshot, Step, StepStats, Trace, with_expectations


class SchedRecorder(StepRecorder):
    """The manager's reports plus the scheduler's: the batch and who was preempted, why."""

    def clear(self) -> None:
        super().clear()
        self.batch: list[Scheduled] = []
        self.preemptions: list[tuple[str, str]] = []
        self.connector: list[ConnectorReport] = []

    def on_scheduled(
        self, request_id: str, num_tokens: int, num_computed_tokens: int, is_prefill_chunk: bool, num_placeholders: int
    ) -> None:
        self.batch.append(Scheduled(request_id, num_tokens, num_computed_tokens, is_prefill_chunk, num_placeholders))

    def on_preempted(self, request_id: str, reason: str) -> None:
        self.preemptions.append((request_id, reason))

    def on_external_lookup(self, request_id: str, num_local: int, num_external: int | None, load_async: bool) -> None:
        self.connector.append(ConnectorLookup(request_id, num_local, num_external, load_async))

    def on_kv_load_done(self, request_id: str, num_computed_tokens: int, failed: bool) -> None:
        self.connector.append(ConnectorLoaded(request_id, num_computed_tokens, failed))

    def on_kv_load_failed(self, request_id: str, num_valid_tokens: int, evicted_block_ids: tuple[int, ...]) -> None:
        self.connector.append(ConnectorLoadFailed(request_id, num_valid_tokens, evicted_block_ids))

    def on_cpu_store(
        self, request_id: str, hashes: tuple[bytes, ...], evicted: tuple[bytes, ...], refused: bool
    ) -> None:
        self.connector.append(CpuStore(request_id, hashes, evicted, refused))

    def on_cpu_load(self, request_id: str, hashes: tuple[bytes, ...], block_ids: tuple[int, ...]) -> None:
        self.connector.append(CpuLoad(request_id, hashes, block_ids))

    def on_cpu_jobs_done(self, stored: tuple[bytes, ...], loaded: tuple[bytes, ...]) -> None:
        self.connector.append(CpuJobsDone(stored, loaded))


class ExportedTotals:
    """The counters vLLM's stat loggers add up from each update (design section 11), for the
    `expect` keys of a step; explorer/metrics exports them (tests/metrics check they agree)."""

    def __init__(self) -> None:
        self.queries = self.hits = self.preemptions = self.external_queries = self.external_hits = 0
        self.by_source = {"local_compute": 0, "local_cache_hit": 0, "external_kv_transfer": 0}

    def add(self, outs: EngineCoreOutputs) -> None:
        if outs.scheduler_stats is not None:
            self.queries += outs.scheduler_stats.prefix_cache_stats.queries
            self.hits += outs.scheduler_stats.prefix_cache_stats.hits
            connector = outs.scheduler_stats.connector_prefix_cache_stats
            if connector is not None:
                self.external_queries += connector.queries
                self.external_hits += connector.hits
        for o in outs.outputs:
            self.preemptions += sum(e == EngineCoreEventType.PREEMPTED for e in o.events or ())
            if o.prefill_stats is not None:  # the first output's: the first admission's split
                self.by_source["local_compute"] += o.prefill_stats.num_computed_tokens
                self.by_source["local_cache_hit"] += o.prefill_stats.num_local_cached_tokens
                self.by_source["external_kv_transfer"] += o.prefill_stats.num_external_cached_tokens

    def expectable(self, window: CachingMetrics) -> dict[str, Any]:
        return {
            "metric_queries": self.queries,
            "metric_hits": self.hits,
            "metric_external_queries": self.external_queries,
            "metric_external_hits": self.external_hits,
            "metric_preemptions": self.preemptions,
            "metric_prompt_tokens_by_source": dict(self.by_source),
            "log_hit_rate": "" if window.empty else f"{window.hit_rate * 100:.1f}%",
        }


class EngineStepReplay:
    """The engine of an engine-step scenario, driven op by op (same interface as
    `ScenarioEngine`: ``apply``, ``snapshot``, ``trace``)."""

    def __init__(self, scenario: Scenario, hash_seed: str | None = None, record: bool = True) -> None:
        assert scenario.sched is not None, "not an engine-step scenario"
        self.scenario = scenario
        self.record = record
        cfg, groups, s = scenario.engine, scenario.groups, scenario.sched
        la = hash_lookahead(scenario)
        self.ctx, self.hasher = block_hasher(
            cfg, hash_seed, scenario.hash_block_size, scenario.connector is not None, la
        )
        self.recorder = SchedRecorder(groups.groups[0].block_size if groups else cfg.block_size) if record else None
        # vLLM's max_in_flight_tokens: one budget per concurrent batch (2 with async scheduling)
        in_flight = (2 if s.scheduler == "async" else 1) * s.max_num_batched_tokens
        self.misses = MissTracker(scenario.hash_block_size)
        self.hybrid_log = HybridLog() if groups is not None else None
        observer = observer_of(self.recorder, self.misses, self.hybrid_log)
        self.manager = new_manager(cfg, observer, groups, in_flight, scenario.speculative, la, scenario.release)
        config = SchedulerConfig(
            s.max_num_batched_tokens,
            s.max_num_seqs,
            s.long_prefill_token_threshold,
            s.scheduler == "async",
            scenario.speculative,
            scenario.release,
        )
        self.publisher = KVEventCollector()
        self.connector, worker = make_connector(scenario.connector, cfg, scenario.release)
        self.engine_core = make_engine_core(self.manager, config, self.publisher, self.connector, worker)
        self.external_totals = PrefixCacheStats()  # the connector's, summed likewise
        self.snapshots = self.new_snapshots()
        self.scheduler = self.engine_core.scheduler
        self.arrived: set[str] = set()
        self.totals = PrefixCacheStats()  # summed over the SchedulerStats of every update
        self.window = CachingMetrics()
        self.exported = ExportedTotals()
        self.reset_ok: list[bool] = []
        self._cpu_tier: tuple[tuple[bytes, int, int], ...] | None = None

    # ---- one op ----------------------------------------------------------------------------

    def apply(self, op: Op) -> Step:
        if self.recorder is not None:
            self.recorder.clear()
        out: dict[str, Any] = {"ok": True}
        self.misses.step = op.index
        try:
            match op:
                case EngineArrive():
                    self._op_arrive(op, out)
                case StepOp():
                    self._op_step(out)
                case Abort():
                    self._op_abort(op, out)
                case EngineReset():
                    self._op_reset(op, out)
                case Arrive() | Admit() | Sample() | Decode() | Generate() | Finish() | Preempt() | Reset():
                    raise self._fail(op, "op", f"`{op.op}` is a manager-level op")
                case _:
                    assert_never(op)
        except SchedulingError as e:  # what vLLM would raise on, or cannot replay: bad input
            raise self._fail(op, op.op, str(e)) from None
        step = Step(
            index=op.index,
            op=op,
            ok=out["ok"],
            events=out.get("events", ()),
            records=() if self.recorder is None else self.recorder.records(),
            preempted=tuple(out.get("preempted", ())),
            engine_step=out.get("engine_step"),
            hybrid=out.get("hybrid"),
            misses=self.misses.take(),
        )
        return with_expectations(step, self.snapshot() if op.expect else None)

    def _fail(self, op: OpBase, field_name: str, msg: str) -> StepError:
        return StepError(f"{self.scenario.source}: {op.label}: {field_name}: {msg}")

    def _op_arrive(self, op: EngineArrive, out: dict[str, Any]) -> None:
        if op.id in self.scheduler.requests:
            raise self._fail(op, "id", f"request {op.id!r} is still held by the scheduler (it has not finished)")
        if self.engine_core.in_flight(op.id):
            raise self._fail(
                op, "id", f"request {op.id!r} is still in a batch in flight (step once more before reusing the id)"
            )
        lora = LoRARequest(op.lora.name, op.lora.id, op.lora.path) if op.lora else None
        req = Request(
            op.id, op.prompt, self.hasher, lora, op.cache_salt, (), op.prompt_logprobs, max_tokens=len(op.output)
        )
        if isinstance(self.connector, StaticConnector):  # a reused id holds only what it says now
            self.connector.hold(op.id, held(op.ext))
        self.engine_core.add_request(req, op.output, op.accepted or ())
        self.arrived.add(op.id)
        if self.recorder is not None:  # the block hashes it learned, after the core's reports
            self.recorder.add(hashed_since(req, 0, self.scenario.hash_block_size))

    def _op_step(self, out: dict[str, Any]) -> None:
        self.publisher.batches.clear()  # only this step's batches: a checkpoint copies no older one
        result: EngineStep = self.engine_core.step_fn()
        out["events"] = tuple(e for b in self.publisher.batches for e in b.events)
        self.publisher.batches.clear()
        scheduled = result.scheduler_output
        outs = result.engine_core_outputs
        step_stats = None
        if outs is not None and outs.scheduler_stats is not None:
            stats = outs.scheduler_stats.prefix_cache_stats
            self.totals.add(stats)
            self.window.observe(stats)
            step_stats = stats.as_dict()
            if outs.scheduler_stats.connector_prefix_cache_stats is not None:
                self.external_totals.add(outs.scheduler_stats.connector_prefix_cache_stats)
        if outs is not None:
            self.exported.add(outs)
        rec = self.recorder
        if self.hybrid_log is not None:
            out["hybrid"] = step_fields(self.manager, self.hybrid_log)
        out["preempted"] = () if scheduled is None else tuple(scheduled.preempted_reqs)
        out["engine_step"] = EngineStepRecord(
            scheduled={} if scheduled is None else dict(scheduled.num_scheduled_tokens),
            outputs={}
            if outs is None
            else {o.request_id: tuple(o.new_token_ids) for o in outs.outputs if o.new_token_ids},
            finished=() if outs is None else tuple(o.request_id for o in outs.outputs if o.finished),
            step_stats=step_stats,
            batch=() if rec is None else tuple(rec.batch),
            preemption_reasons=() if rec is None else tuple(rec.preemptions),
            external=None if self.connector is None else ({} if scheduled is None else dict(scheduled.external)),
            connector=() if rec is None else tuple(rec.connector),
            update=outs,
            metrics=self.exported.expectable(self.window),
        )

    def _op_abort(self, op: Abort, out: dict[str, Any]) -> None:
        if op.id not in self.arrived:
            raise self._fail(op, "id", f"no request {op.id!r} has arrived")
        self.engine_core.abort_requests([op.id])

    def _op_reset(self, op: EngineReset, out: dict[str, Any]) -> None:
        ok = self.engine_core.reset_prefix_cache(op.running, op.external)
        self.reset_ok.append(ok)
        out["ok"] = ok
        if self.recorder is not None:  # who the reset preempted, as the scheduler reported it
            out["preempted"] = [rid for rid, _ in self.recorder.preemptions]

    # ---- state -----------------------------------------------------------------------------

    def stats_so_far(self) -> dict[str, int]:
        """Every admission recorded so far: the updates' stats plus those not yet reported."""
        totals = PrefixCacheStats()
        totals.add(self.totals)
        pending = self.manager.prefix_cache_stats
        if pending is not None:
            totals.add(pending)
        if self.connector is None:
            return totals.as_dict()
        ext = PrefixCacheStats()
        ext.add(self.external_totals)
        if self.scheduler.connector_prefix_cache_stats is not None:
            ext.add(self.scheduler.connector_prefix_cache_stats)
        return {**totals.as_dict(), **{f"external_{k}": v for k, v in ext.as_dict().items()}}

    def snapshot(self) -> Snapshot:
        cpu_tier = None
        if isinstance(self.connector, OffloadingConnector):
            cpu_tier = tuple((c.key, c.chunk_id, c.ref_cnt) for c in self.connector.cpu_tier())
            if cpu_tier == self._cpu_tier:  # unchanged: the snapshots share one tuple
                cpu_tier = self._cpu_tier
            self._cpu_tier = cpu_tier
        return self.snapshots.take(self.scheduler.requests.values(), self.stats_so_far(), self.window, cpu_tier)

    def step_stats(self) -> StepStats:
        return StepStats(self.stats_so_far(), self.window.hit_rate, self.window.aggregated_requests)

    def new_snapshots(self) -> Snapshots:
        return Snapshots(self.manager, GROUP_0, self.scenario.groups is not None)

    def live_requests(self) -> list[Request]:
        return list(self.scheduler.requests.values())

    def forget_step(self) -> None:
        """Drop what the last op recorded (kept in its Step already), before a checkpoint."""
        if self.recorder is not None:
            self.recorder.clear()

    def trace(self, initial: Snapshot, steps: list[Step], states: States | None = None) -> Trace:
        return trace_of(self, initial, steps, states)


def replay_engine_steps(
    scenario: Scenario, hash_seed: str | None = None, upto: int | None = None, record: bool = True
) -> Trace:
    """`replay` for an engine-step scenario (see explorer.scenario.engine.replay)."""
    engine = EngineStepReplay(scenario, hash_seed, record=record)
    ops = scenario.ops if upto is None else scenario.ops[:upto]
    return run_ops(engine, ops)[0]
