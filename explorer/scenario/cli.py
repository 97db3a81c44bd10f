"""`python -m explorer run FILE [--json]`: replay a scenario, check its `expect`s.

Exit 0 when every expectation holds, 1 when one fails (every failure listed on stderr, the
output still printed), 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from typing import assert_never

from explorer.errors import BadInput
from explorer.miss.sentence import miss_sentence
from explorer.numbers import counted
from explorer.printable import printable
from explorer.scenario.connector_reports import (
    ConnectorLoaded,
    ConnectorLoadFailed,
    ConnectorLookup,
    ConnectorReport,
    CpuJobsDone,
    CpuLoad,
    CpuStore,
)
from explorer.scenario.engine import replay
from explorer.scenario.ops import Arrival
from explorer.scenario.parse import load_scenario
from explorer.scenario.parse_release import with_release
from explorer.scenario.records import (
    AdmissionCheck,
    CachedBlock,
    Freed,
    GroupLookup,
    HashedBlock,
    Lookup,
    Retention,
    SkippedFreed,
    record_to_json,
)
from explorer.scenario.spec import Scenario
from explorer.scenario.spec_decode_text import spec_decode_words
from explorer.scenario.trace import EngineStepRecord, Snapshot, Step, Trace
from explorer.scenario.vllm_diff import vllm_diff

MAX_FAILURES_SHOWN = 100  # expect failures listed on stderr (a scenario may have 100,000)
# `run --json --records`: the most records written (about 60 bytes of JSON each); a full pool's
# every step would otherwise write hundreds of MB.
MAX_RECORDS_WRITTEN = 1_000_000


def id_ranges(ids: Iterable[int]) -> str:
    """[1, 2, 3, 7, 6, 5] -> "1-3, 7-5": runs of consecutive ids, either direction."""
    ids = list(ids)
    out, i = [], 0
    while i < len(ids):
        j = i
        step = ids[i + 1] - ids[i] if i + 1 < len(ids) and abs(ids[i + 1] - ids[i]) == 1 else 0
        while step and j + 1 < len(ids) and ids[j + 1] - ids[j] == step:
            j += 1
        out.append(str(ids[i]) if j == i else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return "[" + ", ".join(out) + "]"


def describe_step(step: Step, block_size: int, snap: Snapshot) -> str:
    """One line per step: what happened, with the numbers (``snap``: the state after it)."""
    op = step.op
    who = f" {op.id}" if op.id is not None else ""
    # A later prefill chunk only continues: no lookup, no stats.
    lk = step.last(Lookup)
    name = "continue" if op.op == "admit" and lk is None else op.op
    head = f"{op.index + 1:>3}. {name}{who}"
    parts: list[str] = []
    if isinstance(op, Arrival):
        req = snap.request(op.id)
        n = req.num_tokens if req else len(op.prompt)
        parts.append(
            f"{counted(n, 'token')}, {counted(len(step.of(HashedBlock)), 'full block')} hashed, "
            f"{counted(n % block_size, 'token')} in the partial tail"
        )
    if lk is not None:
        parts.append(
            f"lookup skipped ({lk.skipped})"
            if lk.skipped
            else f"hit {counted(lk.hit_tokens, 'token')} (cap {counted(lk.cap_blocks, 'block')})"
        )
    parts += describe_groups(step)
    checks = step.of(AdmissionCheck)
    if op.op == "generate":
        parts.append(counted(len(checks), "decode allocation") + ("" if step.ok else " (the last failed: NO ROOM)"))
    else:
        for a in checks:
            verdict = "ok" if a.ok else "NO ROOM"
            whole = "whole sequence: " if a.full_sequence else ""
            parts.append(
                f"{whole}need {a.num_new_blocks} new + {a.num_evictable_hit_blocks} free hit = {a.num_required_blocks} of {a.num_free_blocks} free: {verdict}"
            )
    parts.extend(spec_decode_words(step))
    hashed = step.of(HashedBlock)
    if op.op in ("sample", "generate") and hashed:
        parts.append(f"{counted(len(hashed), 'new block hash', 'new block hashes')}")
    if step.new_block_ids:
        parts.append(f"new blocks {id_ranges(step.new_block_ids)}")
    evicted = [p.block_id for p in step.evictions()]
    if evicted:
        parts.append(f"evicted {id_ranges(evicted)}")
    cached = step.of(CachedBlock)
    if cached:
        dups = [c.block_id for c in cached if c.duplicate_of]
        parts.append(f"cached {id_ranges(c.block_id for c in cached)}" + (f" (duplicates: {dups})" if dups else ""))
    freed = step.of(Freed)
    if freed:
        for to in ("front", "back", "held"):
            ids = [f.block_id for f in freed if f.to == to]
            if ids:
                where = {"front": "to the queue front", "back": "to the queue back", "held": "still held"}[to]
                parts.append(f"freed {id_ranges(ids)} {where}")
    es = step.engine_step
    if es is not None:
        parts += [describe_connector(c) for c in es.connector]
        parts.append(describe_batch(es))
    if step.preempted:
        parts.append(f"preempted {list(step.preempted)}")
    if es is not None and es.outputs:
        parts.append("sampled " + ", ".join(f"{rid} {list(toks)}" for rid, toks in es.outputs.items()))
    if es is not None and es.finished:
        parts.append(f"finished {list(es.finished)}")
    if op.op == "reset":
        parts.append("cache reset" if step.ok else "reset REFUSED (blocks still in use)")
    if step.events:
        parts.append("events " + ", ".join(type(e).__name__ for e in step.events))
    parts.append(f"free {snap.num_free_blocks}")
    line = head + ": " + "; ".join(parts)
    misses = [(None, step.miss)] if step.miss is not None else list((step.misses or {}).items())
    for rid, m in misses:  # one sentence per lookup: why it missed
        line += f"\n     why{' ' + rid if rid else ''}: {miss_sentence(m)}"
    return line


def describe_groups(step: Step) -> list[str]:
    """Hybrid groups (design section 8): each lookup's per-group hits and boundary, the blocks
    freed below a window, and the window blocks retention left unhashed."""
    out = []
    for g in step.of(GroupLookup):
        who = f"{g.request_id} " if step.engine_step is not None else ""
        spb = f", shared prefix {g.shared_prefix_boundary}" if g.shared_prefix_boundary else ""
        out.append(f"{who}groups hit {list(g.group_hit_tokens)} -> {g.hit_tokens} in {g.num_passes} pass(es){spb}")
    for sf in step.of(SkippedFreed):
        out.append(f"{sf.request_id} group {sf.group_id}: freed {id_ranges(sf.block_ids)} below the window")
    for r in step.of(Retention):
        kept = sum(r.mask)
        if kept < len(r.mask):
            out.append(f"{r.request_id} group {r.group_id}: retention hashes {kept} of {len(r.mask)} full blocks")
    return out


def describe_connector(c: ConnectorReport) -> str:
    """One report of the KV connector (design section 10), as the scheduler made it."""
    rid = c.request_id
    match c:
        case ConnectorLookup():
            ext = c.num_external_tokens
            if ext is None:
                return f"{rid}: the connector cannot tell its hit yet (skipped this step)"
            head = f"{rid}: local hit {counted(c.num_local_tokens, 'token')}, external {counted(ext, 'token')}"
            if ext and c.load_async:
                return head + " loaded asynchronously (WAITING_FOR_REMOTE_KVS)"
            return head + (" loaded at once" if ext else "")
        case ConnectorLoaded():
            return f"{rid}: remote KV " + (
                "load FAILED" if c.failed else f"loaded ({counted(c.num_tokens, 'token')} computed)"
            )
        case ConnectorLoadFailed():
            return (
                f"{rid}: load FAILED: {counted(c.num_tokens, 'token')} stay valid, "
                f"{counted(len(c.evicted), 'block')} {id_ranges(c.evicted)} lost their hashes"
            )
        case CpuStore(refused=True):
            return f"{rid}: CPU store of {counted(len(c.hashes), 'chunk')} REFUSED (too few chunks to evict)"
        case CpuStore():
            ev = f", evicting {counted(len(c.cpu_evicted), 'CPU chunk')}" if c.cpu_evicted else ""
            return f"{rid}: CPU store of {counted(len(c.hashes), 'chunk')}{ev}"
        case CpuLoad():
            return f"{rid}: CPU load of {counted(len(c.hashes), 'chunk')} into blocks {id_ranges(c.block_ids)}"
        case CpuJobsDone():
            return (
                f"{rid}: CPU worker wrote {counted(len(c.hashes), 'chunk')}, "
                f"loaded {counted(len(c.cpu_loaded), 'chunk')}"
            )
    assert_never(c)


def describe_batch(es: EngineStepRecord) -> str:
    """An engine step's batch: each request's tokens, prefill chunk or sampling, and whether
    the update ran (async: not while the batch queue fills)."""
    if not es.scheduled and es.step_stats is None:
        return "nothing scheduled, no update"
    kinds = {b.request_id: "prefill chunk" if b.is_prefill_chunk else "samples" for b in es.batch}
    batch = ", ".join(f"{rid} {n}" + (f" ({kinds[rid]})" if rid in kinds else "") for rid, n in es.scheduled.items())
    head = f"batch of {counted(sum(es.scheduled.values()), 'token')}: {batch}" if es.scheduled else "empty batch"
    return head + ("" if es.step_stats is not None else "; no update yet (the batch queue fills)")


def render_text(trace: Trace) -> str:
    bs = trace.scenario.hash_block_size
    lines = [f"{trace.scenario.title} ({trace.scenario.source})"]
    if trace.hash_seed is not None and trace.none_hash is not None:
        lines.append(
            f"hash {trace.scenario.engine.hash_algo}, seed {trace.hash_seed!r}, NONE_HASH {trace.none_hash.hex()[:16]}..."
        )
    else:
        lines.append("prefix caching off: no block hashes")
    lines += [describe_step(s, bs, trace.snapshot_at(k)) for k, s in enumerate(trace.steps, start=1)]
    st = trace.final.stats
    rate = st["hits"] / st["queries"] if st["queries"] else 0.0
    lines.append(
        f"stats: {counted(st['requests'], 'request')}, {counted(st['queries'], 'query token')}, "
        f"{counted(st['hits'], 'hit token')} ({rate:.1%})"
    )
    tier = trace.final.cpu_tier
    if tier is not None:  # the offloading connector's CPU tier (design section 10)
        shown = ", ".join(h.hex()[:8] for h, _, _ in tier) or "empty"
        lines.append(f"cpu tier ({counted(len(tier), 'chunk')}, least recently used first): {shown}")
    return "\n".join(lines)


def cmd_run(args: argparse.Namespace) -> int:
    # The JSON needs only each step's outcome and the final state: a lean replay keeps no
    # per-step snapshot (but those `expect` needs) and records no panels. The text form
    # describes each step, so it records everything.
    scenario = with_release(load_scenario(args.file), getattr(args, "vllm", None))
    records = getattr(args, "records", False)
    if records and (not args.json or getattr(args, "vllm_diff", False)):
        raise BadInput("--records adds each step's records to the replay JSON: use it with --json, without --vllm-diff")
    if getattr(args, "vllm_diff", False):
        return _print_vllm_diff(scenario, args.json)
    trace = replay(scenario, record=records or not args.json)
    if args.json:
        sys.stdout.write(json.dumps(_with_records(trace) if records else trace.to_json()) + "\n")
    else:
        # titles and ids are the user's: control characters shown as escapes, not sent to the terminal
        sys.stdout.write(printable(render_text(trace)) + "\n")
    failures = trace.expect_failures
    for f in failures[:MAX_FAILURES_SHOWN]:
        sys.stderr.write(printable(f"expect failed: {f}") + "\n")
    if len(failures) > MAX_FAILURES_SHOWN:
        sys.stderr.write(f"expect failed: {len(failures) - MAX_FAILURES_SHOWN:,} more not shown\n")
    return 1 if failures else 0


def _with_records(trace: Trace) -> dict:
    """The replay JSON with each step's records (`records.record_to_json`, in the order the core
    reported them) under ``records``: the same JSON otherwise, key for key."""
    total = sum(len(s.records) for s in trace.steps)
    if total > MAX_RECORDS_WRITTEN:
        raise BadInput(
            f"{trace.scenario.source}: its steps hold {total:,} records, more than the {MAX_RECORDS_WRITTEN:,} "
            "`--records` writes: use fewer blocks or steps, or `run --json` without them"
        )
    out = trace.to_json()
    for step_json, step in zip(out["steps"], trace.steps, strict=True):
        step_json["records"] = [record_to_json(r) for r in step.records]
    return out


def _print_vllm_diff(scenario: Scenario, as_json: bool) -> int:
    """``run --vllm-diff``: the first step where 0.31.0 and 0.33.0 differ (exit 0 either way)."""
    diff = vllm_diff(scenario)
    if as_json:
        out = {"identical": diff.identical, "step": diff.step, "fields": list(diff.fields), "refused": diff.refused}
        sys.stdout.write(json.dumps(out) + "\n")
    else:
        sys.stdout.write(printable(diff.text(scenario)) + "\n")
    return 0
