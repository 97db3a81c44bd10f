"""Questions on allocate_slots: ``hashed_this_step`` (which blocks does the pool cache in this
step?) and ``admission`` (does allocate_slots admit this request?)."""

from __future__ import annotations

import random

from explorer.practice.builder import ScenarioBuilder, finish_question, ids_text, snapshot_after, token_run
from explorer.practice.question import Question
from explorer.scenario.records import AdmissionCheck, CachedBlock, Lookup
from explorer.scenario.trace import Step, Trace


def _explain_cached(trace: Trace, step: Step) -> tuple[str, ...]:
    bs = trace.scenario.engine.block_size
    before = trace.snapshot_at(step.index)
    rid = step.op.id
    assert rid is not None  # admit, generate and decode name their request
    req_before = before.request(rid)
    req_after = snapshot_after(trace, step).request(rid)
    assert req_before is not None and req_after is not None
    out = []
    if step.hit_tokens:
        out.append(
            f"The lookup hits {step.hit_tokens} tokens; hit blocks are already cached and are never hashed again."
        )
    checks = step.of(AdmissionCheck)
    if not checks:
        out.append(
            "This op allocates nothing (it only samples), so the pool caches nothing; the request itself "
            "hashes any block a sampled token completes."
        )
    for i, a in enumerate(checks):
        after = a.num_computed_tokens + a.num_new_tokens
        full = after // bs
        label = f"Allocation {i + 1}: " if len(checks) > 1 else ""
        out.append(
            f"{label}{a.num_new_tokens} token(s) computed this step, {after} computed after it: "
            f"{after} // {bs} = {full} full block(s) are cached by the end of it."
        )
    cached = step.of(CachedBlock)
    if cached:
        out.append(
            "Newly cached: "
            + ", ".join(
                f"block {c.block_id} (index {c.index}"
                + (f", a duplicate of {ids_text(c.duplicate_of)}" if c.duplicate_of else "")
                + ")"
                for c in cached
            )
            + "."
        )
    else:
        out.append("No block becomes full in this step, so nothing new is cached.")
    if step.op.op == "generate":
        out.append(
            f"The last sampled token stays pending: {req_after.num_tokens - req_after.num_computed_tokens} "
            f"token(s) known but not computed, so a block it completes is not cached yet."
        )
    out.append(
        "Caching happens when allocate_slots schedules the step, before the GPU computes it: BlockStored goes out first."
    )
    return tuple(out)


def q_hashed_this_step(seed: int) -> Question:
    rng = random.Random(f"hashed_this_step:{seed}")
    bs = rng.choice([4, 8])
    b = ScenarioBuilder(bs, 40)
    variant = rng.choice(["chunk", "chunk_after_hit", "generate", "decode"])
    la = rng.randint(2 * bs, 5 * bs)
    if variant == "chunk_after_hit":
        base = token_run(100, rng.randint(bs, 3 * bs))
        b.arrive("W", base)
        b.op("admit", "W")
        b.op("finish", "W")
        a = base + token_run(300, la)
    else:
        a = token_run(300, la)
    b.arrive("A", a)
    if variant in ("chunk", "chunk_after_hit"):
        if rng.random() < 0.5 and variant == "chunk":
            first = rng.randint(1, la - 2)
            b.op("admit", "A", tokens=first)
            remaining = la - first
        else:
            remaining = None
        chunk = rng.randint(1, max(1, (remaining or la) - 1))
        asked = b.op("admit", "A", tokens=chunk)
        title = "Which blocks get hashed by this chunk?"
    elif variant == "generate":
        b.op("admit", "A")
        asked = b.op("generate", "A", tokens=token_run(700, rng.randint(2, 2 * bs + 1)))
        title = "Which blocks get hashed while A generates?"
    else:
        b.op("admit", "A")
        b.op("generate", "A", tokens=token_run(700, rng.randint(1, 2 * bs)))
        asked = b.op("decode", "A")
        title = "Which blocks get hashed by this decode?"
    return finish_question(
        "hashed_this_step",
        seed,
        b,
        asked,
        title,
        "Which block ids does the **pool** cache (give a hash and announce with BlockStored) in this step? "
        "Answer in the order they are cached; empty if none.",
        "ids",
        lambda _t, s: [c.block_id for c in s.of(CachedBlock)],
        _explain_cached,
        "05_when_hashed",
    )


# ---- admission --------------------------------------------------------------------------------


def _explain_admission(trace: Trace, step: Step) -> tuple[str, ...]:
    bs = trace.scenario.engine.block_size
    a = step.of(AdmissionCheck)[0]
    lk = step.last(Lookup)
    hits = lk.hit_tokens if lk else 0
    total_blocks = -(-a.num_tokens_need_slot // bs)
    out = [
        f"The lookup hits {hits} tokens ({hits // bs} blocks); {a.num_evictable_hit_blocks} of those blocks sit in the "
        f"free queue with ref_cnt 0, and touching them takes them out of it."
    ]
    out.append(
        f"The request needs cdiv({a.num_tokens_need_slot}, {bs}) = {total_blocks} blocks in all, "
        f"so {a.num_new_blocks} new ones."
    )
    verdict = "≤" if a.ok else ">"
    out.append(
        f"Required = {a.num_new_blocks} new + {a.num_evictable_hit_blocks} free hit = {a.num_required_blocks} {verdict} "
        f"{a.num_free_blocks} free blocks."
    )
    if a.ok:
        out.append("So allocate_slots admits it: it touches the hits, then pops the new blocks from the head.")
    else:
        out.append(
            "So allocate_slots returns None: nothing is touched or allocated, and the lookup is not counted "
            "in the stats. The request waits."
        )
        if a.num_new_blocks <= a.num_free_blocks:
            out.append(
                f"Counting only the new blocks ({a.num_new_blocks} ≤ {a.num_free_blocks}) would wrongly say yes: "
                f"the free hit blocks count too."
            )
    return tuple(out)


def q_admission(seed: int) -> Question:
    rng = random.Random(f"admission:{seed}")
    want_ok = rng.random() < 0.5
    for attempt in range(80):
        bs = rng.choice([4, 8])
        b = ScenarioBuilder(bs, rng.randint(6, 10))
        la = rng.randint(2, 4) * bs
        a = token_run(100, la)
        b.arrive("A", a)
        b.op("admit", "A")
        b.op("finish", "A")
        if rng.random() < 0.5:
            b.arrive("R", token_run(5000, rng.randint(1, 3) * bs - rng.randint(0, bs - 1)))
            b.op("admit", "R")
        s = rng.randint(bs, la)
        length = s + rng.randint(1, 3 * bs)
        b.arrive("C", a[:s] + token_run(2000, length - s))
        asked = b.op("admit", "C")
        q = finish_question(
            "admission",
            seed,
            b,
            asked,
            "Is C admitted?",
            "Does allocate_slots admit **C**?",
            "bool",
            lambda _t, s: s.ok,
            _explain_admission,
            "04_touch_then_allocate",
        )
        adm = q.asked_step().of(AdmissionCheck)[0]
        trap = adm.num_new_blocks <= adm.num_free_blocks < adm.num_required_blocks
        if adm.ok == want_ok and (adm.ok or trap or attempt > 50):
            return q
    return q
