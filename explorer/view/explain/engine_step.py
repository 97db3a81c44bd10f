"""An engine step explained (design section 7): the NOW line and the phase panels of a step of an
engine-step scenario, in sentences built from the step's records only.

A `step` op is one EngineCore call: the batch the Scheduler planned, the update it ran and the
KV event batch that update published, as `EngineStepRecord` holds them. The recorder keeps one
set of pool reports per step, not per request, so the pool panels describe the whole batch and
only the admission checks (which carry a request id) are told per request.
"""

from __future__ import annotations

from collections.abc import Callable

from explorer.scenario.ops import Abort, EngineArrive, Reset
from explorer.scenario.records import AdmissionCheck, CachedBlock, Freed, HashedBlock, Lookup, Touched
from explorer.scenario.trace import Step, Trace
from explorer.view.explain import step as manager_step
from explorer.view.explain.records import PANEL_TITLES, Now, Panel, panels_in_order
from explorer.view.explain.refs import REFS, Ref
from explorer.view.explain.request_panels import hashing_panel
from explorer.view.explain.words import blocks_text, counted, indexes_text, new_blocks
from explorer.viz.engine_step_html import DECODE, request_in, work_kind

_SCHED = "vllm/v1/core/sched/scheduler.py"
ENGINE_REFS: dict[str, Ref] = {
    "add_request": Ref("Scheduler.add_request (the waiting queue)", f"{_SCHED}:2557-2584"),
    "schedule": Ref("Scheduler.schedule: running first, then waiting, within token_budget", f"{_SCHED}:562-1344"),
    "preempt": Ref("preempt the last running request, retry allocate_slots", f"{_SCHED}:745-817"),
    "output_events": Ref("EngineCoreOutput(events=request.take_events())", f"{_SCHED}:2204-2216"),
    "update": Ref("Scheduler.update_from_output (sampled tokens, finished, KV events)", f"{_SCHED}:1967-2366"),
    "async_placeholders": Ref(
        "AsyncScheduler._update_after_schedule (placeholders)", "vllm/v1/core/sched/async_scheduler.py:25-56"
    ),
    "engine_step": Ref("EngineCore.step / step_with_batch_queue", "vllm/v1/engine/core.py:630-784"),
    "abort": Ref("Scheduler.finish_requests (FINISHED_ABORTED)", f"{_SCHED}:2585-2649"),
}


def _kinds(trace: Trace, k: int) -> dict[str, str]:
    step = trace.steps[k - 1]
    es = step.engine_step
    if es is None:
        return {}
    before, after = trace.snapshot_at(k - 1), trace.snapshot_at(k)
    return {s.request_id: work_kind(s, request_in(before, after, s.request_id)) for s in es.batch}


def kinds(trace: Trace, k: int) -> dict[str, str]:
    """Request id -> prefill chunk, prefill (last chunk) or decode, for the batch of step k."""
    return _kinds(trace, k)


def _more(n: int, shown: int) -> str:
    """ " and 3 more requests" after a list cut at `shown` items ("" when nothing was cut)."""
    return f" and {counted(n - shown, 'more request')}" if n > shown else ""


def _events_sentence(step: Step) -> str:
    if not step.events:
        return "KV event batch: empty."
    counts: dict[str, int] = {}
    for e in step.events:
        counts[type(e).__name__] = counts.get(type(e).__name__, 0) + 1
    return "KV event batch: " + ", ".join(f"{c} {name}" for name, c in counts.items()) + "."


def _failed(step: Step) -> list[AdmissionCheck]:
    return [a for a in step.of(AdmissionCheck) if not a.ok]


def now(trace: Trace, k: int) -> Now:
    """The NOW line of step k of an engine-step scenario."""
    if k <= 0:
        return manager_step.now(trace, k)
    step = trace.steps[k - 1]
    op = step.op
    sc = trace.scenario
    assert sc.sched is not None
    rid = op.id or ""
    if isinstance(op, EngineArrive):
        n = len(op.prompt)
        out = len(op.output)
        bs = sc.hash_block_size  # the hasher's unit (hybrid groups: their sizes' GCD)
        # a KV connector gets block hashes even without prefix caching (vLLM builds the hasher for it)
        blocks = step.of(HashedBlock)
        hashed = f", {blocks_text(len(blocks))} hashed" if sc.engine.enable_prefix_caching or blocks else ""
        return Now(
            f"arrive {rid}",
            (ENGINE_REFS["add_request"], REFS["request_init"]),
            (
                f"{rid} arrives with {counted(n, 'prompt token')}{hashed} (blocks of {bs}); the played model will sample {counted(out, 'token')} for it.",
                "add_request puts it in the waiting queue: it gets blocks only when a step schedules it.",
            ),
        )
    if isinstance(op, Abort):
        freed = len(step.of(Freed))
        return Now(
            f"abort {rid}",
            (ENGINE_REFS["abort"], REFS["free"]),
            (
                f"{rid} is aborted: finish_requests frees {blocks_text(freed)}."
                if freed
                else f"{rid} is aborted holding no block.",
                "Its KV events, if any, are published with the next step's update.",
            ),
        )
    if isinstance(op, Reset):
        s = []
        if step.preempted:
            s.append(f"First the running requests are preempted, the last first: {', '.join(step.preempted)}.")
        s.append("The prefix cache is reset." if step.ok else "reset_prefix_cache() refused: blocks are in use.")
        return Now(
            "reset (running = true)" if op.running else "reset", (REFS["reset_running"], REFS["reset"]), tuple(s)
        )
    es = step.engine_step
    assert es is not None
    budget = sc.sched.max_num_batched_tokens
    kinds_ = _kinds(trace, k)
    used = sum(es.scheduled.values())
    refs: tuple[Ref, ...] = (ENGINE_REFS["engine_step"], ENGINE_REFS["schedule"])
    if es.batch:
        parts = ", ".join(f"{s.request_id} {s.num_tokens:,} ({kinds_[s.request_id]})" for s in es.batch[:12])
        sent = [
            f"schedule() gave {used:,} of the {budget:,}-token budget to {counted(len(es.batch), 'request')}: {parts}"
            + (" ..." if len(es.batch) > 12 else "")
            + "."
        ]
    elif es.scheduled:
        sent = [f"schedule() gave {used:,} of the {budget:,}-token budget to {counted(len(es.scheduled), 'request')}."]
    else:
        sent = ["schedule() planned an empty batch."]
    for victim, why in es.preemption_reasons:
        sent.append(
            f"{victim} was preempted: {why}. The metrics count it later: the PREEMPTED event rides on "
            f"{victim}'s next output, and vllm:num_preemptions grows when that output arrives."
        )
        refs += (ENGINE_REFS["preempt"], ENGINE_REFS["output_events"])
    in_flight = [s for s in es.batch if s.num_placeholders > 0]
    if in_flight:
        sent.append(
            "Tokens in flight (async placeholders): "
            + ", ".join(f"{s.request_id} {s.num_placeholders}" for s in in_flight[:8])
            + _more(len(in_flight), 8)
            + "; a placeholder has a slot but is never hashed."
        )
        refs += (ENGINE_REFS["async_placeholders"],)
    if es.step_stats is None:
        sent.append("No update_from_output ran in this call, so nothing was delivered or published.")
    else:
        delivered = ", ".join(f"{r} {len(t)}" for r, t in list(es.outputs.items())[:8]) + _more(len(es.outputs), 8)
        sent.append(
            (f"The update delivered sampled tokens to {delivered}." if delivered else "The update delivered no token.")
            + (f" Finished: {', '.join(es.finished)}." if es.finished else "")
        )
        refs += (ENGINE_REFS["update"],)
        sent.append(_events_sentence(step))
    heads = [f"{r} {n:,}" for r, n in list(es.scheduled.items())[:4]]
    headline = "engine step: " + (
        ", ".join(heads) + (" ..." if len(es.scheduled) > 4 else "") if heads else "empty batch"
    )
    if kinds_ and all(v == DECODE for v in kinds_.values()):
        headline += " (decode)"
    return Now(headline, refs, tuple(sent))


def _lookup_panel(trace: Trace, k: int) -> Panel | None:
    step = trace.steps[k - 1]
    lk = step.last(Lookup)
    if lk is None:
        return None
    who = lk.request_id  # the step's last lookup, and the request it looked up
    text: tuple[str, ...]
    if lk.skipped:
        text = (f"No lookup for {who}: {lk.skipped}.",)
    else:
        text = (
            f"get_computed_blocks for {who}: {counted(lk.num_tokens, 'token')}, at most {blocks_text(lk.cap_blocks)} may hit; "
            f"the walk hit {lk.hit_tokens:,} tokens.",
            "A running request is never looked up again; a preempted one is, when it is re-admitted.",
        )
    refs = (REFS["get_computed_blocks"], REFS["hit_cap"], REFS["find_longest_cache_hit"])
    return Panel("lookup", 2, PANEL_TITLES["lookup"], refs, text, f"hit {lk.hit_tokens:,}")


def _allocate_panel(trace: Trace, k: int) -> Panel | None:
    step = trace.steps[k - 1]
    checks_ = step.of(AdmissionCheck)
    if not checks_:
        return None
    per: dict[str, list[AdmissionCheck]] = {}
    for a in checks_:
        per.setdefault(a.request_id, []).append(a)
    s = []
    for rid, checks in per.items():
        failed = sum(1 for a in checks if not a.ok)
        gates = sum(1 for a in checks if a.full_sequence)
        # What left the free queue for this request, as the pool reported it: a check's count
        # is not that (windows free blocks first; a refused try pops nothing).
        blocks = len(new_blocks(step, rid))
        s.append(
            f"{rid}: {counted(len(checks), 'allocate_slots check')}"
            + (f" ({counted(gates, 'whole-sequence gate')})" if gates else "")
            + (f", {failed} refused (required > free)" if failed else "")
            + (f", {counted(blocks, 'new block')}" if blocks else "")
            + "."
        )
    touched = step.of(Touched)
    if touched:
        from_free = sum(t.from_free for t in touched)
        s.append(f"touch() took {counted(len(touched), 'hit block')} ({from_free} from the free queue).")
    refs = (REFS["allocate_slots"], REFS["admission_check"], REFS["touch"], REFS["get_new_blocks"])
    summary = f"{len(per)} req." + (" refused" if _failed(step) else "")
    return Panel("allocate", 3, PANEL_TITLES["allocate"], refs, tuple(s), summary)


def _caching_panel(trace: Trace, k: int) -> Panel | None:
    step = trace.steps[k - 1]
    cached = step.of(CachedBlock)
    if not cached:
        return None
    s = (
        f"{blocks_text(len(cached))} got their hash in the hash map in this step (block indexes "
        + indexes_text(cached, trace.scenario.groups is not None, 12)
        + ").",
        "allocate_slots caches full blocks up to min(num_computed_tokens + num_new_tokens, num_tokens): only tokens that have arrived.",
    )
    return Panel(
        "caching",
        4,
        PANEL_TITLES["caching"],
        (REFS["cache_full_blocks"], REFS["tokens_to_cache"]),
        s,
        f"{len(cached)} cached",
    )


def _free_panel(trace: Trace, k: int) -> Panel | None:
    step = trace.steps[k - 1]
    freed = step.of(Freed)
    if not freed:
        return None
    es = step.engine_step
    who = list(step.preempted) + (list(es.finished) if es is not None else [])
    if step.op.op == "abort" and step.op.id:
        who.append(step.op.id)
    front = sum(1 for f in freed if f.to == "front")
    back = sum(1 for f in freed if f.to == "back")
    held = sum(1 for f in freed if f.to == "held")
    s = (
        f"{blocks_text(len(freed))} freed" + (f" (by {', '.join(dict.fromkeys(who))})" if who else "") + ": "
        f"{front} to the front of the free queue, {back} to the back, {held} still held by others.",
    )
    return Panel("free", 5, PANEL_TITLES["free"], (REFS["free"], REFS["free_blocks"]), s, f"{len(freed)} freed")


def _eviction_panel(trace: Trace, k: int) -> Panel | None:
    step = trace.steps[k - 1]
    evicted = len(step.evictions())
    if not evicted:
        return None
    s = (f"{blocks_text(evicted)} popped while still cached lost their hash (one BlockRemoved per hash).",)
    return Panel(
        "eviction",
        6,
        PANEL_TITLES["eviction"],
        (REFS["get_new_blocks"], REFS["evict"]),
        s,
        f"{evicted} evicted",
    )


_BUILDERS: dict[str, Callable[[Trace, int], Panel | None]] = {
    "hashing": hashing_panel,
    "lookup": _lookup_panel,
    "allocate": _allocate_panel,
    "caching": _caching_panel,
    "free": _free_panel,
    "eviction": _eviction_panel,
}


def panels(trace: Trace, k: int) -> list[Panel]:
    """The phase panels of step k of an engine-step scenario, in reading order."""
    return panels_in_order(_BUILDERS, trace, k)
