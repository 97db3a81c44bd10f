"""Replay a scenario through the engine core into a `Trace`.

`ScenarioEngine` turns each op of design section 3 into the manager-level calls of
`RequestSteps` (explorer/request_steps.py), the one place outside the scheduler that makes them in vLLM's
scheduler order. An engine-step scenario (design section 7) is replayed by engine_steps.py. With ``record=True`` a `StepRecorder` observes the core and keeps what it
reports for the panels, and the replay keeps checkpoints from which `Trace.snapshot_at(k)`
gives the state after any step (checkpoints.py); with ``record=False`` (tools, `run --json`,
benchmarks) there is no observer and only the final state is kept (a step with an `expect` is
compared with the state after it as the replay runs). The web app never mutates the replay's
engine: it reads the state after step k and renders it.
"""

from __future__ import annotations

from typing import Any, assert_never

from explorer.core.kv_cache_manager import KVCacheBlocks
from explorer.core.metrics import CachingMetrics, PrefixCacheStats
from explorer.core.request import LoRARequest, MultiModalFeature, Request, RequestStatus
from explorer.miss.reasons import MissTracker
from explorer.miss.tee import observer_of
from explorer.request_steps import RequestSteps
from explorer.scenario.budget import check_replay_budget
from explorer.scenario.checkpoints import States, run_ops, trace_of
from explorer.scenario.engine_steps import EngineStepReplay, replay_engine_steps
from explorer.scenario.ops import (
    Abort,
    Admit,
    Arrive,
    Decode,
    EngineArrive,
    Finish,
    Generate,
    Op,
    OpBase,
    Preempt,
    RequestOp,
    Reset,
    Sample,
    StepOp,
)
from explorer.scenario.recorder import (
    GROUP_0,
    HybridLog,
    StepError,
    StepRecorder,
    admit_fields,
    block_hasher,
    hash_lookahead,
    hashed_since,
    new_manager,
)
from explorer.scenario.snapshot import Snapshots
from explorer.scenario.spec import CLI_LIMITS, Limits, Scenario
from explorer.scenario.trace import Snapshot, Step, StepStats, Trace, with_expectations


class ScenarioEngine:
    """A KV cache manager plus the requests of a scenario, driven op by op."""

    def __init__(self, scenario: Scenario, hash_seed: str | None = None, record: bool = True) -> None:
        if scenario.sched is not None:
            raise ValueError("an engine-step scenario is replayed by EngineStepReplay (see engine_for)")
        self.scenario = scenario
        self.record = record
        cfg = scenario.engine
        groups = scenario.groups
        la = hash_lookahead(scenario)
        self.ctx, self.hasher = block_hasher(cfg, hash_seed, scenario.hash_block_size, False, la)
        self.recorder = StepRecorder(groups.groups[0].block_size if groups else cfg.block_size) if record else None
        spec = scenario.speculative
        self.misses = MissTracker(scenario.hash_block_size)
        self.hybrid_log = HybridLog() if groups is not None else None
        self.manager = new_manager(
            cfg,
            observer_of(self.recorder, self.misses, self.hybrid_log),
            groups,
            speculative=spec,
            num_hash_lookahead_tokens=la,
            release=scenario.release,
        )
        self.sched = RequestSteps(self.manager, 0 if spec is None else spec.num_lookahead_tokens)
        # Speculative decoding: request id -> drafts its last `decode` verifies, until `sample`.
        self.drafts: dict[str, int] = {}
        self.snapshots = self.new_snapshots()
        self.requests: dict[str, Request] = {}  # live (not finished), in arrival order
        self.totals = PrefixCacheStats()
        self.window = CachingMetrics()
        self.reset_ok: list[bool] = []

    @property
    def pool(self) -> Any:
        return self.manager.block_pool

    # ---- one op ----------------------------------------------------------------------------

    def apply(self, op: Op) -> Step:
        """Run one op; the Step holds its outcome, events and (recording) the core's reports."""
        out: dict[str, Any] = {"ok": True}
        if self.recorder is not None:
            self.recorder.clear()
        self.misses.step = op.index
        self._dispatch(op, out)
        misses = self.misses.take()
        events = tuple(self.manager.take_events())
        stats = self.manager.make_prefix_cache_stats()
        assert stats is not None
        self.totals.add(stats)
        self.window.observe(stats)
        new_ids = out.get("new_block_ids")
        step = Step(
            index=op.index,
            op=op,
            ok=out["ok"],
            events=events,
            hit_tokens=out.get("hit_tokens"),
            new_block_ids=None if new_ids is None else tuple(new_ids),
            num_sampled=out.get("num_sampled"),
            records=() if self.recorder is None else self.recorder.records(),
            preempted=tuple(out.get("preempted", ())),
            hybrid=out.get("hybrid"),
            miss=misses.get(op.id) if isinstance(op, Admit) else None,
        )
        return with_expectations(step, self.snapshot() if op.expect else None)

    def _dispatch(self, op: Op, out: dict[str, Any]) -> None:
        match op:
            case Arrive():
                self._op_arrive(op, out)
            case Admit():
                self._op_admit(op, out)
            case Sample():
                self._op_sample(op, out)
            case Decode():
                self._op_decode(op, out)
            case Generate():
                self._op_generate(op, out)
            case Finish():
                self._op_finish(op, out)
            case Preempt():
                self._op_preempt(op, out)
            case Reset():
                self._op_reset(op, out)
            case EngineArrive() | StepOp() | Abort():
                raise self._fail(op, "op", f"`{op.op}` belongs to engine-step scenarios")
            case _:
                assert_never(op)

    # ---- helpers ---------------------------------------------------------------------------

    def _fail(self, op: OpBase, field_name: str, msg: str) -> StepError:
        return StepError(f"{self.scenario.source}: {op.label}: {field_name}: {msg}")

    def _live(self, op: RequestOp) -> Request:
        req = self.requests.get(op.id)
        if req is None:
            raise self._fail(op, "id", f"no live request {op.id!r} (it never arrived or has finished)")
        return req

    def _record_hashed(self, req: Request, n_before: int) -> None:
        """Record the block hashes the request learned in this op, after the core's reports."""
        if self.recorder is not None:
            self.recorder.add(hashed_since(req, n_before, self.scenario.hash_block_size))

    def _check_growth(self, op: RequestOp, req: Request, extra: int) -> None:
        limit = self.scenario.engine.max_model_len
        if req.num_tokens + extra > limit:
            raise self._fail(
                op,
                "tokens",
                f"would take the request to {req.num_tokens + extra:,} tokens, past max_model_len = {limit:,}",
            )

    def _need_decodable(self, op: RequestOp) -> Request:
        req = self._live(op)
        if req.status != RequestStatus.RUNNING or req.num_computed_tokens < req.num_prompt_tokens:
            raise self._fail(
                op,
                "id",
                f"request {op.id!r} must be running with its prompt fully computed (it is {req.status.value}, {req.num_computed_tokens} of {req.num_prompt_tokens} prompt tokens computed)",
            )
        return req

    @staticmethod
    def _ids(blocks: KVCacheBlocks | None) -> list[int]:
        return [] if blocks is None else blocks.get_block_ids_of_group(GROUP_0)

    # ---- ops -------------------------------------------------------------------------------

    def _op_arrive(self, op: Arrive, out: dict[str, Any]) -> None:
        if op.id in self.requests:
            raise self._fail(op, "id", f"request {op.id!r} is already live (finish it before reusing the id)")
        lora = LoRARequest(op.lora.name, op.lora.id, op.lora.path) if op.lora else None
        mm = [MultiModalFeature(m.id, m.offset, m.length) for m in op.mm]
        req = Request(op.id, op.prompt, self.hasher, lora, op.cache_salt, mm, op.prompt_logprobs)
        self.requests[req.request_id] = req
        self._record_hashed(req, 0)

    def _op_admit(self, op: Admit, out: dict[str, Any]) -> None:
        req = self._live(op)
        if req.num_computed_tokens >= req.num_tokens:
            raise self._fail(
                op,
                "id",
                f"request {op.id!r} has nothing left to compute ({req.num_tokens} of {req.num_tokens} tokens computed)",
            )
        admitted = self.sched.admit(req, op.tokens)
        out["hit_tokens"] = admitted.hit_tokens
        out["ok"] = admitted.ok
        out["new_block_ids"] = self._ids(admitted.new_blocks)
        if self.hybrid_log is not None:
            new_ids = None if admitted.new_blocks is None else admitted.new_blocks.get_block_ids()
            out["hybrid"] = admit_fields(self.manager, self.hybrid_log, new_ids)

    def _op_sample(self, op: Sample, out: dict[str, Any]) -> None:
        req = self._need_decodable(op)
        tokens = op.tokens
        self._check_growth(op, req, len(tokens))
        n_before = len(req.block_hashes)
        if req.request_id in self.drafts:  # the accepted drafts and a bonus token (rule 72)
            out["num_rejected"] = self.sched.roll_back_rejected(req, self.drafts.pop(req.request_id), len(tokens))
        for t in tokens:
            req.append_output_token_ids(t)
        out["num_sampled"] = len(tokens)
        self._record_hashed(req, n_before)

    def _op_decode(self, op: Decode, out: dict[str, Any]) -> None:
        req = self._need_decodable(op)
        if req.num_tokens == req.num_computed_tokens:
            raise self._fail(op, "id", f"request {op.id!r} has no pending token to decode (sample one first)")
        drafts = op.draft_tokens or 0
        limit = self.scenario.engine.max_model_len
        if drafts and req.num_tokens + drafts >= limit:  # the input position stays below max_model_len
            raise self._fail(
                op, "draft_tokens", f"{req.num_tokens} tokens + {drafts} drafts reach max_model_len = {limit}"
            )
        new_blocks = self.sched.compute_pending(req, drafts)
        if new_blocks is not None and drafts:
            self.drafts[req.request_id] = drafts
        out["ok"] = new_blocks is not None
        out["new_block_ids"] = self._ids(new_blocks)

    def _op_generate(self, op: Generate, out: dict[str, Any]) -> None:
        """Per token: compute what is pending, then sample it; the last one stays pending."""
        req = self._need_decodable(op)
        tokens = op.tokens
        self._check_growth(op, req, len(tokens))
        n_before = len(req.block_hashes)
        new_ids: list[int] = []
        out["num_sampled"] = 0
        for t in tokens:
            if req.num_tokens > req.num_computed_tokens:
                new_blocks = self.sched.compute_pending(req)
                if new_blocks is None:
                    out["ok"] = False
                    break
                new_ids.extend(self._ids(new_blocks))
            req.append_output_token_ids(t)
            out["num_sampled"] += 1
        out["new_block_ids"] = new_ids
        self._record_hashed(req, n_before)

    def _op_finish(self, op: Finish, out: dict[str, Any]) -> None:
        req = self._live(op)
        self.sched.finish(req)
        del self.requests[req.request_id]

    def _op_preempt(self, op: Preempt, out: dict[str, Any]) -> None:
        req = self._live(op)
        if req.status != RequestStatus.RUNNING:
            raise self._fail(op, "id", f"only a running request can be preempted; {op.id!r} is {req.status.value}")
        self.sched.preempt(req)
        out["preempted"] = [req.request_id]

    def _op_reset(self, op: Reset, out: dict[str, Any]) -> None:
        ok, preempted = self.sched.reset_prefix_cache(reset_running_requests=op.running)
        self.reset_ok.append(ok)
        out["ok"] = ok
        out["preempted"] = [r.request_id for r in preempted]
        for r in preempted:
            self.drafts.pop(r.request_id, None)

    # ---- state -----------------------------------------------------------------------------

    def trace(self, initial: Snapshot, steps: list[Step], states: States | None = None) -> Trace:
        """The Trace of the steps this engine applied, with its final state and (recorded) the
        checkpoints that give every step's state."""
        return trace_of(self, initial, steps, states)

    def snapshot(self) -> Snapshot:
        """The pool and the live requests now (sharing what did not change since the last one)."""
        return self.snapshots.take(self.requests.values(), self.totals.as_dict(), self.window)

    def step_stats(self) -> StepStats:
        return StepStats(self.totals.as_dict(), self.window.hit_rate, self.window.aggregated_requests)

    def new_snapshots(self) -> Snapshots:
        return Snapshots(self.manager, GROUP_0, self.scenario.groups is not None)

    def live_requests(self) -> list[Request]:
        return list(self.requests.values())

    def forget_step(self) -> None:
        """Drop what the last op recorded (kept in its Step already), before a checkpoint."""
        if self.recorder is not None:
            self.recorder.clear()


def engine_for(
    scenario: Scenario, hash_seed: str | None = None, record: bool = True
) -> ScenarioEngine | EngineStepReplay:
    """The engine that replays ``scenario`` op by op: manager-level or engine steps (both have
    ``apply``, ``snapshot`` and ``trace``)."""
    if scenario.sched is not None:
        return EngineStepReplay(scenario, hash_seed, record)
    return ScenarioEngine(scenario, hash_seed, record)


def replay(
    scenario: Scenario,
    hash_seed: str | None = None,
    upto: int | None = None,
    record: bool = True,
    limits: Limits = CLI_LIMITS,
) -> Trace:
    """Replay ``scenario`` (its first ``upto`` steps, or all) into a Trace.

    ``hash_seed`` replaces the scenario's seed; pass ``trace.hash_seed`` of an earlier replay
    to reproduce a drawn xxhash seed. ``record=False`` is a lean replay (tools, benchmarks):
    steps carry their outcome and events but no snapshot or panel records, and only the final
    state is kept; ``to_json()`` is the same as a full replay's. A replay whose snapshots would
    hold more than ``limits.max_snapshot_cells`` block entries is refused before it starts.
    """
    check_replay_budget(scenario, limits, record, upto)
    if scenario.sched is not None:
        return replay_engine_steps(scenario, hash_seed, upto, record)
    engine = ScenarioEngine(scenario, hash_seed, record=record)
    ops = scenario.ops if upto is None else scenario.ops[:upto]
    return run_ops(engine, ops)[0]
