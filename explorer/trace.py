"""Replay a scenario through the engine core into a `Trace`: frozen steps with snapshots.

`ScenarioEngine` plays the scheduler of design section 3: it makes, for one request and one
op, the KV-cache-manager calls vLLM's scheduler would make in one engine step. Every step
records what happened in the terms the explorer's panels draw (lookup probes, the admission
sum, touched / popped / evicted / cached / freed blocks) and a snapshot of the pool after it.
The web app never mutates an engine: it replays to step k and renders that snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from explorer.core.events import KVCacheEvent, event_to_json
from explorer.core.hashing import BlockHash, HashContext, external_block_hash, init_none_hash
from explorer.core.kv_cache_manager import KVCacheBlocks, KVCacheManager
from explorer.core.kv_cache_utils import generate_block_hash_extra_keys, get_request_block_hasher
from explorer.core.metrics import CachingMetrics, PrefixCacheStats
from explorer.core.request import LoRARequest, MultiModalFeature, Request, RequestStatus
from explorer.errors import BadInput
from explorer.scenario import Op, Scenario

# ---- what a step records ----------------------------------------------------------------------


@dataclass(frozen=True)
class HashedBlock:
    index: int  # block index within the request
    start: int
    end: int
    hash: bytes
    extra_keys: tuple | None

    @property
    def external(self) -> int:
        return external_block_hash(self.hash)


@dataclass(frozen=True)
class Lookup:
    """get_computed_blocks: the walk from block 0, capped at (num_tokens - 1) // block_size."""

    num_tokens: int
    cap_blocks: int  # how many hashes may be probed
    probes: tuple[tuple[int, bool, int | None], ...]  # (block index, hit, block id)
    hit_tokens: int
    skipped: str | None = None  # why there was no lookup


@dataclass(frozen=True)
class Admission:
    """allocate_slots' capacity check: new blocks + free hit blocks against free blocks."""

    num_new_tokens: int
    num_computed_tokens: int  # already computed + this step's hit
    slots_needed: int  # tokens that need a slot after this step
    new_blocks_needed: int
    free_hit_blocks: int
    free_blocks: int
    ok: bool

    @property
    def required(self) -> int:
        return self.new_blocks_needed + self.free_hit_blocks


@dataclass(frozen=True)
class CachedBlock:
    block_id: int
    index: int
    hash: bytes
    duplicate_of: tuple[int, ...]  # other blocks already cached under this hash


@dataclass(frozen=True)
class Freed:
    block_id: int
    ref_cnt: int  # after the free
    to: str  # "front", "back" or "held" (still used by another request)


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

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_queue)

    def request(self, request_id: str) -> RequestView | None:
        return next((r for r in self.requests if r.request_id == request_id), None)


@dataclass(frozen=True)
class Step:
    index: int
    op: Op
    ok: bool
    events: tuple[KVCacheEvent, ...]
    snapshot: Snapshot | None  # None in a lean replay (record=False), unless the step has `expect`
    hit_tokens: int | None = None  # admit only
    new_block_ids: tuple[int, ...] | None = None  # admit, decode, generate
    hashed: tuple[HashedBlock, ...] = ()  # block hashes the request learned this step
    lookup: Lookup | None = None
    admissions: tuple[Admission, ...] = ()
    touched: tuple[int, ...] = ()  # hit blocks, touched before any allocation
    touched_from_free: tuple[int, ...] = ()  # ... of which were in the free queue
    evicted: tuple[tuple[int, bytes], ...] = ()  # (block id, hash it lost), in pop order
    cached: tuple[CachedBlock, ...] = ()
    freed: tuple[Freed, ...] = ()  # in free order (the request's blocks reversed)
    preempted: tuple[str, ...] = ()
    expect_failures: tuple[str, ...] = ()

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
        return d


@dataclass(frozen=True)
class Trace:
    scenario: Scenario
    hash_seed: str | None
    none_hash: bytes | None
    initial: Snapshot
    steps: tuple[Step, ...]
    reset_ok: tuple[bool, ...]
    # The state after the last step; a lean replay (record=False) keeps only this one.
    final_snapshot: Snapshot | None = None

    @property
    def final(self) -> Snapshot:
        if self.final_snapshot is not None:
            return self.final_snapshot
        snap = self.steps[-1].snapshot if self.steps else self.initial
        assert snap is not None
        return snap

    @property
    def expect_failures(self) -> list[str]:
        return [f for s in self.steps for f in s.expect_failures]

    def snapshot_at(self, k: int) -> Snapshot:
        """The state after k steps (k = 0: before the first)."""
        snap = self.initial if k == 0 else self.steps[k - 1].snapshot
        if snap is None:
            raise ValueError("a lean replay (record=False) keeps no per-step snapshots")
        return snap

    def to_json(self) -> dict[str, Any]:
        """The replay JSON of design section 5."""
        f = self.final
        return {
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
                    }
                    for r in f.requests
                },
                "stats": dict(f.stats),
                "reset_ok": list(self.reset_ok),
                "none_hash": None if self.none_hash is None else self.none_hash.hex(),
                "hash_seed": self.hash_seed,
            },
        }


# ---- the engine -------------------------------------------------------------------------------


class StepError(BadInput):
    pass


class ScenarioEngine:
    """A KV cache manager plus the requests of a scenario, driven op by op.

    ``record=False`` makes a lean engine: no snapshot after each step and none of the panel
    records (lookup probes, admission sums, touched / evicted / cached / freed blocks, hashed
    blocks), only what the replay JSON needs. The manager calls are the same.
    """

    def __init__(self, scenario: Scenario, hash_seed: str | None = None, record: bool = True) -> None:
        self.scenario = scenario
        self.record = record
        cfg = scenario.engine
        self.ctx: HashContext | None = None
        self.hasher: Callable[[Request], list[BlockHash]] | None = None
        if cfg.enable_prefix_caching:
            # `hash_seed` overrides the scenario's: the resolved (maybe drawn) seed of an earlier
            # replay, so that replaying again gives the same hashes.
            seed = hash_seed if hash_seed is not None else (cfg.hash_seed or None)
            self.ctx = init_none_hash(cfg.hash_algo, seed)
            self.hasher = get_request_block_hasher(cfg.block_size, self.ctx)
        self.manager = KVCacheManager(
            cfg.num_blocks,
            cfg.block_size,
            cfg.max_model_len,
            enable_caching=cfg.enable_prefix_caching,
            enable_kv_cache_events=cfg.events,
            log_stats=True,
            use_int_block_hashes=cfg.int_block_hashes,
        )
        self.requests: dict[str, Request] = {}  # live (not finished), in arrival order
        self.running_order: list[str] = []  # ids in the order they became running
        self.totals = PrefixCacheStats()
        self.window = CachingMetrics()
        self.reset_ok: list[bool] = []

    # ---- helpers ---------------------------------------------------------------------------

    @property
    def pool(self):
        return self.manager.block_pool

    def _fail(self, op: Op, field_name: str, msg: str) -> StepError:
        return StepError(f"{self.scenario.source}: {op.label}: {field_name}: {msg}")

    def _live(self, op: Op) -> Request:
        req = self.requests.get(op.id)  # type: ignore[arg-type]
        if req is None:
            raise self._fail(op, "id", f"no live request {op.id!r} (it never arrived or has finished)")
        return req

    def _hashed_since(self, req: Request, n_before: int) -> tuple[HashedBlock, ...]:
        bs = self.scenario.engine.block_size
        return tuple(
            HashedBlock(
                i, i * bs, (i + 1) * bs, req.block_hashes[i], generate_block_hash_extra_keys(req, i * bs, (i + 1) * bs)
            )
            for i in range(n_before, len(req.block_hashes))
        )

    def _check_growth(self, op: Op, req: Request, extra: int) -> None:
        limit = self.scenario.engine.max_model_len
        if req.num_tokens + extra > limit:
            raise self._fail(
                op,
                "tokens",
                f"would take the request to {req.num_tokens + extra:,} tokens, past max_model_len = {limit:,}",
            )

    def _set_running(self, req: Request) -> None:
        if req.status != RequestStatus.RUNNING:
            req.status = RequestStatus.RUNNING
            self.running_order.append(req.request_id)

    def _allocate(
        self, req: Request, num_new: int, hit: int = 0, hit_blocks: KVCacheBlocks | None = None, rec: dict | None = None
    ) -> KVCacheBlocks | None:
        """allocate_slots, recording the admission sum and the pool changes it made."""
        mgr, pool = self.manager, self.pool
        if rec is None:
            return mgr.allocate_slots(req, num_new, hit, hit_blocks)
        single = mgr.single_type_managers[0]
        hits = hit_blocks.blocks[0] if hit_blocks is not None else []
        computed = req.num_computed_tokens + hit
        slots = min(computed + num_new, mgr.max_model_len)
        required = single.get_num_blocks_to_allocate(req.request_id, slots, hits)
        free_hits = 0 if req.request_id in single.num_cached_block else single.get_num_evictable_blocks(hits)
        # The blocks allocate_slots will pop: the queue head, minus the hits it touches first.
        # Their hashes are read now, because popping evicts them.
        hit_ids = {b.block_id for b in hits}
        pop_order = _queue_head(pool, required, hit_ids)
        # Hit blocks are adopted as already cached; only blocks past them get a hash now.
        cached_before = single.num_cached_block.get(req.request_id, len(hits))
        free_before = pool.get_num_free_blocks()
        result = mgr.allocate_slots(req, num_new, hit, hit_blocks)
        rec["admissions"].append(
            Admission(num_new, computed, slots, required - free_hits, free_hits, free_before, result is not None)
        )
        if result is None:
            return None
        if hits:
            rec["touched"].extend(b.block_id for b in hits)
            rec["touched_from_free"].extend(b.block_id for b in hits if b.ref_cnt == 1)
        old_hash = dict(pop_order)
        for b in result.blocks[0]:
            old = old_hash.get(b.block_id)
            if old is not None:
                rec["evicted"].append((b.block_id, bytes(old[:-4])))
        table = single.req_to_blocks.get(req.request_id, [])
        for i in range(cached_before, single.num_cached_block.get(req.request_id, 0)):
            blk = table[i]
            key = blk.block_hash
            if key is None:
                continue
            same = pool.cached_block_hash_to_block.get_all_blocks(key)
            dup = tuple(b.block_id for b in same if b is not blk)
            rec["cached"].append(CachedBlock(blk.block_id, i, bytes(key[:-4]), dup))
        return result

    def _free(self, req: Request, rec: dict | None) -> None:
        if rec is None:
            self.manager.free(req)
        else:
            table = list(self.manager.single_type_managers[0].req_to_blocks.get(req.request_id, []))
            self.manager.free(req)
            self._record_freed(table, rec)
        if req.request_id in self.running_order:
            self.running_order.remove(req.request_id)

    def _record_freed(self, table: list, rec: dict) -> None:
        for blk in reversed(table):
            to = (
                "held"
                if blk.ref_cnt > 0
                else ("back" if blk.block_hash is not None and self.manager.enable_caching else "front")
            )
            rec["freed"].append(Freed(blk.block_id, blk.ref_cnt, to))

    def _preempt(self, req: Request, rec: dict | None) -> None:
        self._free(req, rec)
        req.num_computed_tokens = 0
        req.status = RequestStatus.PREEMPTED
        req.num_preemptions += 1
        if rec is not None:
            rec["preempted"].append(req.request_id)

    # ---- ops -------------------------------------------------------------------------------

    def apply(self, op: Op) -> Step:
        if not self.record:
            return self._apply_lean(op)
        rec: dict[str, Any] = {
            k: [] for k in ("admissions", "touched", "touched_from_free", "evicted", "cached", "freed", "preempted")
        }
        out: dict[str, Any] = {"ok": True}
        getattr(self, f"_op_{op.op}")(op, rec, out)
        events = tuple(self.manager.take_events())
        stats = self.manager.make_prefix_cache_stats()
        assert stats is not None
        self.totals.add(stats)
        self.window.observe(stats)
        step = Step(
            index=op.index,
            op=op,
            ok=out["ok"],
            events=events,
            snapshot=self.snapshot(),
            hit_tokens=out.get("hit_tokens"),
            new_block_ids=tuple(out["new_block_ids"]) if "new_block_ids" in out else None,
            hashed=out.get("hashed", ()),
            lookup=out.get("lookup"),
            admissions=tuple(rec["admissions"]),
            touched=tuple(rec["touched"]),
            touched_from_free=tuple(rec["touched_from_free"]),
            evicted=tuple(rec["evicted"]),
            cached=tuple(rec["cached"]),
            freed=tuple(rec["freed"]),
            preempted=tuple(rec["preempted"]),
        )
        return _with_expectations(step)

    def _apply_lean(self, op: Op) -> Step:
        """`apply` without the panel records; a snapshot only for a step with `expect`."""
        out: dict[str, Any] = {"ok": True}
        getattr(self, f"_op_{op.op}")(op, None, out)
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
            snapshot=self.snapshot() if op.expect else None,
            hit_tokens=out.get("hit_tokens"),
            new_block_ids=None if new_ids is None else tuple(new_ids),
        )
        return _with_expectations(step) if op.expect else step

    def _op_arrive(self, op: Op, rec: dict | None, out: dict) -> None:
        if op.id in self.requests:
            raise self._fail(op, "id", f"request {op.id!r} is already live (finish it before reusing the id)")
        lora = LoRARequest(op.lora.name, op.lora.id, op.lora.path) if op.lora else None
        mm = [MultiModalFeature(m.id, m.offset, m.length) for m in op.mm]
        req = Request(op.id, op.prompt, self.hasher, lora, op.cache_salt, mm, op.prompt_logprobs)  # type: ignore[arg-type]
        self.requests[req.request_id] = req
        if rec is not None:
            out["hashed"] = self._hashed_since(req, 0)

    def _op_admit(self, op: Op, rec: dict | None, out: dict) -> None:
        req = self._live(op)
        if req.num_computed_tokens >= req.num_tokens:
            raise self._fail(
                op,
                "id",
                f"request {op.id!r} has nothing left to compute ({req.num_tokens} of {req.num_tokens} tokens computed)",
            )
        fresh = req.num_computed_tokens == 0
        hit_blocks: KVCacheBlocks | None = None
        hit = 0
        bs = self.scenario.engine.block_size
        if fresh and rec is None:
            if self.manager.prefix_cache_lookup_enabled(req):
                hit_blocks, hit = self.manager.get_computed_blocks(req)
        elif fresh:
            if not self.manager.prefix_cache_lookup_enabled(req):
                reason = (
                    "prefix caching is off"
                    if not self.manager.enable_caching
                    else "prompt_logprobs: every prompt token must be computed"
                )
                out["lookup"] = Lookup(req.num_tokens, 0, (), 0, reason)
            else:
                hit_blocks, hit = self.manager.get_computed_blocks(req)
                cap = (req.num_tokens - 1) // bs
                ids = hit_blocks.get_block_ids()[0]
                probes = [(i, True, ids[i]) for i in range(len(ids))]
                if len(ids) < min(cap, len(req.block_hashes)):
                    probes.append((len(ids), False, None))
                out["lookup"] = Lookup(req.num_tokens, cap, tuple(probes), hit)
        remaining = req.num_tokens - req.num_computed_tokens - hit
        num_new = remaining if op.tokens is None else min(op.tokens, remaining)  # type: ignore[type-var]
        out["hit_tokens"] = hit
        result = self._allocate(req, num_new, hit, hit_blocks, rec)
        if result is None:
            out["ok"] = False
            out["new_block_ids"] = []
            return
        out["new_block_ids"] = result.get_block_ids()[0]
        req.num_computed_tokens += hit + num_new
        self._set_running(req)
        if fresh:
            self.manager.record_prefix_cache_stats(req, hit)

    def _need_decodable(self, op: Op) -> Request:
        req = self._live(op)
        if req.status != RequestStatus.RUNNING or req.num_computed_tokens < req.num_prompt_tokens:
            raise self._fail(
                op,
                "id",
                f"request {op.id!r} must be running with its prompt fully computed (it is {req.status.value}, {req.num_computed_tokens} of {req.num_prompt_tokens} prompt tokens computed)",
            )
        return req

    def _op_sample(self, op: Op, rec: dict | None, out: dict) -> None:
        req = self._need_decodable(op)
        tokens = op.tokens
        assert isinstance(tokens, tuple)
        self._check_growth(op, req, len(tokens))
        n_before = len(req.block_hashes)
        for t in tokens:
            req.append_output_token_ids(t)
        if rec is not None:
            out["hashed"] = self._hashed_since(req, n_before)

    def _decode(self, req: Request, rec: dict | None) -> list[int] | None:
        pending = req.num_tokens - req.num_computed_tokens
        result = self._allocate(req, pending, rec=rec)
        if result is None:
            return None
        req.num_computed_tokens = req.num_tokens
        return result.get_block_ids()[0]

    def _op_decode(self, op: Op, rec: dict | None, out: dict) -> None:
        req = self._need_decodable(op)
        if req.num_tokens == req.num_computed_tokens:
            raise self._fail(op, "id", f"request {op.id!r} has no pending token to decode (sample one first)")
        new_ids = self._decode(req, rec)
        out["ok"] = new_ids is not None
        out["new_block_ids"] = new_ids or []

    def _op_generate(self, op: Op, rec: dict | None, out: dict) -> None:
        req = self._need_decodable(op)
        tokens = op.tokens
        assert isinstance(tokens, tuple)
        self._check_growth(op, req, len(tokens))
        n_before = len(req.block_hashes)
        new_ids: list[int] = []
        for t in tokens:
            if req.num_tokens > req.num_computed_tokens:
                got = self._decode(req, rec)
                if got is None:
                    out["ok"] = False
                    break
                new_ids.extend(got)
            req.append_output_token_ids(t)
        out["new_block_ids"] = new_ids
        if rec is not None:
            out["hashed"] = self._hashed_since(req, n_before)

    def _op_finish(self, op: Op, rec: dict | None, out: dict) -> None:
        req = self._live(op)
        self._free(req, rec)
        req.status = RequestStatus.FINISHED
        del self.requests[req.request_id]

    def _op_preempt(self, op: Op, rec: dict | None, out: dict) -> None:
        req = self._live(op)
        if req.status != RequestStatus.RUNNING:
            raise self._fail(op, "id", f"only a running request can be preempted; {op.id!r} is {req.status.value}")
        self._preempt(req, rec)

    def _op_reset(self, op: Op, rec: dict | None, out: dict) -> None:
        if op.running:
            # The scheduler pops its running queue from the end (scheduler.py:2794-2804).
            for rid in reversed(list(self.running_order)):
                self._preempt(self.requests[rid], rec)
        ok = self.manager.reset_prefix_cache()
        self.reset_ok.append(ok)
        out["ok"] = ok

    # ---- state -----------------------------------------------------------------------------

    def trace(self, initial: Snapshot, steps: list[Step]) -> Trace:
        """The Trace of the steps this engine applied (a lean engine keeps its final state)."""
        ctx = self.ctx
        return Trace(
            scenario=self.scenario,
            hash_seed=None if ctx is None else ctx.hash_seed,
            none_hash=None if ctx is None else bytes(ctx.none_hash),
            initial=initial,
            steps=tuple(steps),
            reset_ok=tuple(self.reset_ok),
            final_snapshot=None if self.record else self.snapshot(),
        )

    def snapshot(self) -> Snapshot:
        pool = self.pool
        single = self.manager.single_type_managers[0]
        blocks = tuple((b.ref_cnt, None if b.block_hash is None else bytes(b.block_hash[:-4])) for b in pool.blocks)
        return Snapshot(
            blocks=blocks,
            free_queue=tuple(b.block_id for b in pool.free_block_queue.get_all_free_blocks()),
            cached=tuple(
                (bytes(k[:-4]), tuple(b.block_id for b in bl)) for k, bl in pool.cached_block_hash_to_block.items()
            ),
            requests=tuple(
                RequestView(
                    r.request_id,
                    r.status.value,
                    r.num_tokens,
                    r.num_prompt_tokens,
                    r.num_computed_tokens,
                    tuple(b.block_id for b in single.req_to_blocks.get(r.request_id, ())),
                    tuple(r.block_hashes),
                    r.lora_request.name if r.lora_request else None,
                    r.cache_salt,
                    r.prompt_logprobs,
                    r.num_preemptions,
                )
                for r in self.requests.values()
            ),
            stats=self.totals.as_dict(),
            window_hit_rate=self.window.hit_rate,
            window_requests=self.window.aggregated_requests,
        )


def _queue_head(pool, n: int, skip: set[int]) -> list[tuple[int, bytes | None]]:
    """(block id, hash) of the first ``n`` free-queue blocks not in ``skip``, head first."""
    out: list[tuple[int, bytes | None]] = []
    curr = pool.free_block_queue.fake_free_list_head.next_free_block
    tail = pool.free_block_queue.fake_free_list_tail
    while len(out) < n and curr is not tail:
        if curr.block_id not in skip:
            out.append((curr.block_id, curr.block_hash))
        curr = curr.next_free_block
    return out


def _with_expectations(step: Step) -> Step:
    """Compare the step's `expect` table; failures are recorded, the replay goes on."""
    if not step.op.expect:
        return step
    snap = step.snapshot
    actual: dict[str, Any] = {
        "ok": step.ok,
        "hit_tokens": step.hit_tokens,
        "new_block_ids": list(step.new_block_ids) if step.new_block_ids is not None else None,
        "num_free_blocks": snap.num_free_blocks,
        "free_queue": list(snap.free_queue),
        "event_types": [type(e).__name__ for e in step.events],
        **{f"stats_{k}": v for k, v in snap.stats.items()},
    }
    failures = []
    for key, want in step.op.expect.items():
        got = actual[key]
        if got != want:
            failures.append(f"{step.op.label}: expected {key} = {want!r}, got {got!r}")
    if not failures:
        return step
    from dataclasses import replace

    return replace(step, expect_failures=tuple(failures))


def replay(scenario: Scenario, hash_seed: str | None = None, upto: int | None = None, record: bool = True) -> Trace:
    """Replay ``scenario`` (its first ``upto`` steps, or all) into a Trace.

    ``hash_seed`` replaces the scenario's seed; pass ``trace.hash_seed`` of an earlier replay
    to reproduce a drawn xxhash seed. ``record=False`` is a lean replay (tools, benchmarks):
    steps carry their outcome and events but no snapshot or panel records, and only the final
    state is kept; ``to_json()`` is the same as a full replay's.
    """
    engine = ScenarioEngine(scenario, hash_seed, record=record)
    initial = engine.snapshot()
    ops = scenario.ops if upto is None else scenario.ops[:upto]
    steps = [engine.apply(op) for op in ops]
    return engine.trace(initial, steps)
