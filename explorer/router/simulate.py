"""The simulation loop: every policy over the same request stream, each with fresh engines.

The time model is vLLM's engine loop, the same for every policy: every instance runs one
engine step (`Instance.step`: the mirrored Scheduler / AsyncScheduler) every ``decode_ms`` of
simulated time, so a decode token takes one step and a long prompt as many steps as the token
budget chunks it into. Before each step the requests that have arrived by then are routed, in
arrival order, against the views the instances' published events built so far, and join their
instance's waiting queue; each step's events are published after it, so the next routing sees
them. The engine decides when a request is admitted (FCFS, the whole sequence must fit), when
it is preempted and when it finishes (its ``max_tokens``); a request's hit is the one its
engine reports. A request that could not fit even in an empty instance is skipped before
routing. When no instance has work the clock jumps to the next arrival; with ``decode_ms = 0``
steps take no time, so the engines finish their work before the next arrival.

Nothing here imports Streamlit or plotly; nothing is module-global and mutable.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from explorer.errors import BadInput
from explorer.events.stream import KVEventStream
from explorer.router.config import BASELINE, POLICIES, FleetConfig
from explorer.router.hashing import HashMemo, HashSetup, hash_setup, tenant_salt
from explorer.router.instance import Instance, PrefillEstimator, is_skipped
from explorer.router.policy import PrefixRouter, choose_instance
from explorer.router.results import FleetResult, PolicyRun
from explorer.router.stream import RequestStream, StreamRequest, build_stream, tokenize
from explorer.traffic.scheduled import arrival_step


def run_policy(
    cfg: FleetConfig,
    stream: RequestStream,
    policy: str,
    setup: HashSetup | None = None,
    router_keys: Sequence[tuple[list[Any], int]] | None = None,
    keep_views: bool = False,
    memo: HashMemo | None = None,
) -> PolicyRun:
    """One policy over the stream with fresh engines and a fresh subscriber."""
    if policy not in POLICIES:
        raise BadInput(f"unknown policy {policy!r}: expected one of {', '.join(POLICIES)}")
    t0 = time.perf_counter()
    setup = setup or hash_setup(cfg)
    fl, f = cfg.fleet, cfg.failures
    router = PrefixRouter(
        setup.router_block_size,
        setup.router_ctx(),
        setup.router_form,
        cfg.router.load_weight,
        cfg.router.tie_break,
        cfg.workload.seed,
    )
    if memo is not None and memo.stream is not stream:
        raise ValueError("the hash memo belongs to another stream")
    if router_keys is None:
        router_keys = stream_keys(router, stream, setup, cfg, memo)
    subscriber = KVEventStream(replay=False)
    drop_rng = random.Random(f"drop-{f.drop_seed}")
    rate = f.drop_batches

    dropped = [0]

    def drop() -> bool:
        if rate > 0 and drop_rng.random() < rate:
            dropped[0] += 1
            return True
        return False

    published: set[Any] = set()  # every hash any instance ever announced (as the events carry it)
    insts = [
        Instance(i, cfg, setup.engine_algo, setup.engine_seeds[i], subscriber, drop, memo, published)
        for i in range(fl.instances)
    ]
    est = PrefillEstimator(cfg.prefill)
    reqs = stream.requests
    n = len(reqs)
    prompt_len = [len(r.tokens) for r in reqs]
    instance_of = [-1] * n
    hit_tokens = [0] * n
    predicted = [0] * n
    best = [0] * n
    pooled = [0] * n  # the match against every instance's view pooled (design section 14)
    waited = [False] * n
    routed = 0
    distinct_keys: set[Any] = set()

    def route(req: StreamRequest) -> None:
        nonlocal routed
        k = req.index
        keys, cap = router_keys[k]
        views = [inst.view() for inst in insts]
        loads = [inst.in_flight for inst in insts]
        distinct_keys.update(keys[:cap])
        choice, matches = choose_instance(policy, router, keys, cap, views, loads, routed)
        routed += 1
        instance_of[k] = choice
        predicted[k] = matches[choice] * setup.router_block_size
        best[k] = max(matches) * setup.router_block_size
        pooled[k] = pooled_match(keys, cap, views) * setup.router_block_size
        inst = insts[choice]
        inst.routed += 1
        inst.add(req, tenant_salt(req.tenant) if f.tenant_salt else None)

    step_ms = cfg.workload.decode_ms
    step, now, a = 0, 0.0, 0
    while True:
        while a < n and reqs[a].arrival_ms <= now:
            if not is_skipped(reqs[a], fl):
                route(reqs[a])
            a += 1
        busy = [inst for inst in insts if inst.busy]
        if not busy:
            if a == n:
                break
            step = arrival_step(reqs[a].arrival_ms, step_ms) if step_ms > 0 else step
            now = step * step_ms if step_ms > 0 else reqs[a].arrival_ms
            continue
        for inst in busy:
            report = inst.step(now, est, prompt_len)
            for k, hit in report.hits:
                hit_tokens[k] = hit
            for k in report.waited:
                waited[k] = True
        if step_ms > 0:
            step += 1
            now = step * step_ms

    for inst in insts:
        # the engine's stats are the numbers we show: they must agree with what we recorded
        assert inst.stats().hits == sum(h for h, i in zip(hit_tokens, instance_of) if i == inst.index)
        assert not inst.live, "every routed request finished"
    return PolicyRun(
        policy=policy,
        instances=[inst.result(setup.event_form) for inst in insts],
        instance_of=instance_of,
        hit_tokens=hit_tokens,
        predicted_tokens=predicted,
        best_match_tokens=best,
        pooled_match_tokens=pooled,
        prompt_tokens=[len(r.tokens) for r in stream.requests],
        waited=waited,
        cross_tenant_hit_tokens=sum(inst.cross_tenant_hit_tokens for inst in insts),
        subscriber=subscriber.summary(),
        published_batches=sum(inst.seq for inst in insts),
        dropped_batches=dropped[0],
        router_keys=len(distinct_keys),
        router_keys_known=len(distinct_keys & published),
        seconds=time.perf_counter() - t0,
        final_views=[dict(inst.view() or {}) for inst in insts] if keep_views else [],
    )


def pooled_match(keys: Sequence[Any], cap: int, views: Sequence[dict[Any, int] | None]) -> int:
    """The longest run of ``keys[:cap]`` that some instance's view holds, block by block: what
    the fleet had cached for the request when it was routed, every instance's cache pooled."""
    held = [v for v in views if v]
    n = 0
    for key in keys[:cap]:
        if not any(v.get(key, 0) > 0 for v in held):
            break
        n += 1
    return n


def stream_keys(
    router: PrefixRouter, stream: RequestStream, setup: HashSetup, cfg: FleetConfig, memo: HashMemo | None = None
) -> list[tuple[list[Any], int]]:
    """The router's keys and lookup cap for every request of the stream (hashed once)."""
    out = []
    salt_on = cfg.failures.tenant_salt and setup.router_salt
    table = memo.table(router.ctx, router.block_size, salt_on) if memo is not None else None
    bs = router.block_size
    for req in stream.requests:
        hashes = table.get(req.index) if table is not None else None
        if hashes is None:
            hashes = tuple(router.block_hashes(req.tokens, tenant_salt(req.tenant) if salt_on else None))
            if table is not None:
                table[req.index] = hashes
        keys = router.keys(hashes)
        out.append((keys, min(len(keys), (len(req.tokens) - 1) // bs)))
    return out


def simulate(
    cfg: FleetConfig,
    trace_bytes: bytes | None = None,
    trace_name: str = "upload",
    policies: Sequence[str] = POLICIES,
    baseline: bool = True,
    stream: RequestStream | None = None,
    memoize: bool = True,
) -> FleetResult:
    """Every policy over the same stream; with a failure switch on (and ``baseline``), also the
    prefix policy with every switch off, for comparison."""
    t0 = time.perf_counter()
    stream = stream or build_stream(cfg, trace_bytes, trace_name)
    setup = hash_setup(cfg)
    router = PrefixRouter(setup.router_block_size, setup.router_ctx(), setup.router_form)
    memo = HashMemo(stream) if memoize else None
    keys = stream_keys(router, stream, setup, cfg, memo)
    runs = {p: run_policy(cfg, stream, p, setup, keys, keep_views=(p == "prefix"), memo=memo) for p in policies}
    if baseline and cfg.failures.active and "prefix" in policies:
        healthy = cfg.healthy()
        runs[BASELINE] = replace(run_policy(healthy, stream, "prefix", None, None, memo=memo), policy=BASELINE)
    return FleetResult(cfg, stream, setup, runs, time.perf_counter() - t0)


# ---- asking the router about one prompt ----------------------------------------------------------


@dataclass
class Answer:
    tokens: int
    blocks: int
    cap: int
    matches: list[int]  # blocks per instance
    instance: int


def ask(result: FleetResult, prompt: str, kind: str = "spec", tenant: int = 0) -> Answer:
    """Where the router would send ``prompt`` (a token spec, or text) against the final state
    of the prefix-aware run (nothing in flight any more)."""
    run = result.runs.get("prefix")
    if run is None or not run.final_views:
        raise BadInput("run the prefix-aware policy first")
    tokens = tokenize(prompt, kind)
    router = result.router()
    salt = tenant_salt(tenant) if result.config.failures.tenant_salt and result.setup.router_salt else None
    keys, cap = router.request_keys(tokens, salt)
    d = router.choose(keys, cap, run.final_views, [0] * len(run.final_views))
    return Answer(len(tokens), len(keys), cap, d.matches, d.instance)
