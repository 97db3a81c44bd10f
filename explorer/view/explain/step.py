"""A step explained: its phase panels in reading order, the NOW line, and the metrics sentence.

Pure functions of a `Trace` step (no Streamlit): the explorer page renders what they return,
and tests read it. Each panel names the vLLM function and its file:line in release 0.31.0
(from the behaviour spec), and says in two or three sentences what happened and why.
"""

from __future__ import annotations

from explorer.scenario.ops import Arrival, Arrive, Generate, Reset, Sample
from explorer.scenario.records import AdmissionCheck, CachedBlock, DraftsVerified, Freed, HashedBlock, Lookup
from explorer.scenario.trace import Trace
from explorer.view.explain.pool_panels import allocate_panel, caching_panel, eviction_panel, free_panel
from explorer.view.explain.records import Now, Panel, panels_in_order
from explorer.view.explain.refs import REFS, Ref
from explorer.view.explain.request_panels import hashing_panel, lookup_panel
from explorer.view.explain.words import blocks_text, counted, new_blocks, request_at, tail_words

_BUILDERS = {
    "hashing": hashing_panel,
    "lookup": lookup_panel,
    "allocate": allocate_panel,
    "caching": caching_panel,
    "free": free_panel,
    "eviction": eviction_panel,
}


def panels(trace: Trace, k: int) -> list[Panel]:
    """The panels of step k (1-based), in reading order; only those whose step happened."""
    return panels_in_order(_BUILDERS, trace, k)


def now(trace: Trace, k: int) -> Now:
    """The NOW line: the op, the vLLM call it stands for, and what it did, in numbers."""
    n_steps = len(trace.steps)
    if k <= 0:
        snap = trace.initial
        sc = trace.scenario
        return Now(
            "before step 1",
            (REFS["null_block"],),
            (
                f"An empty pool of {sc.engine.num_blocks:,} blocks of {sc.engine.block_size} tokens: block 0 is the null block, "
                f"so {snap.num_free_blocks:,} blocks wait in the free queue, in id order.",
                f"The scenario has {counted(n_steps, 'step')}; step forward to watch them.",
            ),
        )
    step = trace.steps[k - 1]
    op = step.op
    snap = trace.snapshot_at(k)
    prev = trace.snapshot_at(k - 1)
    rid = op.id
    headline = (
        f"{op.op} {rid}"
        if rid is not None
        else ("reset (running = true)" if isinstance(op, Reset) and op.running else "reset")
    )
    new = len(new_blocks(step))
    if isinstance(op, Arrival):
        n = len(op.prompt)
        typed = isinstance(op, Arrive) and bool(op.text)
        bs = trace.scenario.hash_block_size  # the hasher's unit (hybrid groups: their sizes' GCD)
        full = n // bs if trace.scenario.engine.enable_prefix_caching else 0
        unit = f" of {bs} tokens" if bs != trace.scenario.engine.block_size else ""
        refs: tuple[Ref, ...] = (REFS["request_init"], REFS["block_hasher"])
        s = [
            f"{rid} arrives with {counted(n, 'token')}"
            + (
                f" ({'typed text, ' if typed else ''}{blocks_text(full)}{unit} hashed, {tail_words(n, bs)})."
                if trace.scenario.engine.enable_prefix_caching
                else "; prefix caching is off, so it gets no block hashes."
            )
        ]
        s.append("Nothing touches the pool yet: a request gets blocks only when it is admitted.")
    elif op.op == "admit":
        refs = (REFS["get_computed_blocks"], REFS["allocate_slots"])
        a = step.first(AdmissionCheck)
        lk = step.last(Lookup)
        req = request_at(trace, k, rid)
        n = req.num_tokens if req else 0
        if step.ok:
            hit = step.hit_tokens or 0
            s = [
                (
                    f"{rid} hits {hit:,} of its {n:,} tokens"
                    if lk and not lk.skipped
                    else f"{rid} continues its prefill"
                    if lk is None
                    else f"{rid} skips the lookup"
                )
                + f" and gets {counted(new, 'new block')}; the free queue goes from {prev.num_free_blocks:,} to {snap.num_free_blocks:,} blocks."
            ]
            if a is not None:
                s.append(
                    f"Admission check: {a.num_new_blocks:,} new + {a.num_evictable_hit_blocks:,} free hit blocks = {a.num_required_blocks:,} <= {a.num_free_blocks:,} free."
                )
        else:
            s = (
                [
                    f"{rid} does not fit: {a.num_new_blocks:,} new + {a.num_evictable_hit_blocks:,} free hit blocks = {a.num_required_blocks:,} > {a.num_free_blocks:,} free, so allocate_slots returns None and nothing changes."
                ]
                if a
                else [f"{rid} could not be admitted."]
            )
    elif op.op in ("generate", "decode"):
        refs = (REFS["allocate_slots"],) + ((REFS["append_output"],) if op.op == "generate" else ())
        asked = len(op.tokens) if isinstance(op, Generate) else 0
        got = step.num_sampled or 0
        what = (
            (
                f"{rid} generates {counted(got, 'token')}"
                if got == asked
                else f"{rid} generates {got:,} of the {counted(asked, 'token')} asked"
            )
            if op.op == "generate"
            else f"{rid} computes its pending tokens"
        )
        s = [
            f"{what}: {counted(len(step.of(AdmissionCheck)), 'allocate_slots call')}, {counted(new, 'new block')}, {counted(len(step.of(CachedBlock)), 'block')} cached."
        ]
        if not step.ok:
            s.append("An allocation found no free block, so the op stopped there.")
        elif op.op == "generate":
            s.append("The last sampled token stays pending: a request's final token is never computed.")
    elif isinstance(op, Sample):
        refs = (REFS["append_output"],)
        toks = len(op.tokens)
        made = len(step.of(HashedBlock))
        s = [
            f"{rid} samples {counted(toks, 'token')}; they are not computed yet, so the pool does not change"
            + (
                f", but {counted(made, 'new block hash', 'new block hashes')} exist{'s' if made == 1 else ''} now."
                if made
                else ", and no block became full, so there is no new hash."
            )
        ]
        for d in step.of(DraftsVerified):  # speculative decoding (design section 9): the verified drafts
            s[0] = (
                f"{rid} gets {counted(toks, 'token')}: {d.num_accepted} accepted of the {d.num_drafts} drafts its "
                f"decode verified, plus a bonus token; {d.num_rejected} rejected, rolled back to "
                f"num_computed_tokens {d.num_computed_tokens}. The pool does not change"
                + (
                    f", but {counted(made, 'new block hash', 'new block hashes')} exist{'s' if made == 1 else ''} now."
                    if made
                    else "."
                )
            )
    elif op.op in ("finish", "preempt"):
        refs = (REFS["free"], REFS["free_blocks"])
        freed = step.of(Freed)
        front = sum(1 for f in freed if f.to == "front")
        back = sum(1 for f in freed if f.to == "back")
        held = sum(1 for f in freed if f.to == "held")
        verb = "finishes" if op.op == "finish" else "is preempted"
        if freed:
            s = [
                f"{rid} {verb}: {blocks_text(len(freed))} freed, {front} to the front of the free queue, {back} to the back, {held} still held by others."
            ]
        else:
            s = [f"{rid} {verb} holding no block (it was waiting or preempted), so the pool does not change."]
    else:
        refs = (REFS["reset"],)
        s = []
        if step.preempted:
            s.append(f"First the running requests are preempted, the last to start first: {', '.join(step.preempted)}.")
        s.append(
            "The prefix cache is reset: every hash is dropped."
            if step.ok
            else "reset_prefix_cache() refused: blocks are still in use, so every hash stays."
        )
    if step.events:
        kinds: dict[str, int] = {}
        for e in step.events:
            kinds[type(e).__name__] = kinds.get(type(e).__name__, 0) + 1
        s.append("Events: " + ", ".join(f"{c} {name}" for name, c in kinds.items()) + ".")
    return Now(headline, refs, tuple(s))


def metrics_sentence(trace: Trace, k: int) -> str:
    snap = trace.snapshot_at(k)
    st = snap.stats
    rate = st["hits"] / st["queries"] if st["queries"] else 0.0
    return (
        f"{counted(st['requests'], 'admitted request')}, {st['queries']:,} query tokens, {st['hits']:,} hit tokens: hit rate {rate:.1%}; "
        f"window of the last {counted(snap.window_requests, 'request')}: {snap.window_hit_rate:.1%}."
    )
