"""Questions on the free queue's order: ``next_evicted`` (which cached block does this admission
evict first, or none?) and ``free_queue`` (the free queue after a request finishes, head first)."""

from __future__ import annotations

import random

from explorer.numbers import counted
from explorer.practice.builder import ScenarioBuilder, finish_question, ids_text, snapshot_after, token_run
from explorer.practice.question import Question
from explorer.scenario.records import AdmissionCheck, Freed, Touched
from explorer.scenario.trace import Step, Trace


def _history(rng: random.Random, b: ScenarioBuilder, n_req: int, max_blocks: int, keep_last_running: bool) -> list[str]:
    """Requests one after another (some sharing an earlier prefix), each admitted and finished."""
    ids: list[str] = []
    for i in range(n_req):
        rid = "ABCDEFG"[i]
        nblk = rng.randint(1, max_blocks)
        length = (nblk - 1) * b.bs + rng.randint(1, b.bs)
        if ids and rng.random() < 0.5:
            src = b.tokens[rng.choice(ids)]
            s = min(len(src), rng.randint(1, length))
            toks = src[:s] + token_run(1000 * (i + 1), length - s)
        else:
            toks = token_run(1000 * (i + 1), length)
        b.arrive(rid, toks)
        b.op("admit", rid)
        if rng.random() < 0.3:
            b.op("generate", rid, tokens=token_run(700 + 50 * i, rng.randint(1, b.bs)))
        ids.append(rid)
        if not (keep_last_running and i == n_req - 1):
            b.op("finish", rid)
    return ids


def _explain_evicted(trace: Trace, step: Step) -> tuple[str, ...]:
    before = trace.snapshot_at(step.index)
    adm = step.of(AdmissionCheck)[0]
    hashed = {i for i, (_, h) in enumerate(before.blocks) if h is not None}
    out = []
    touched = step.of(Touched)
    if touched:
        out.append(
            f"First, touch takes the hit blocks {ids_text([t.block_id for t in touched])} out of the free queue "
            f"({sum(t.from_free for t in touched)} of them were in it): a request never evicts its own hits."
        )
    out.append(
        f"Then {adm.num_new_blocks} new blocks are popped from the head of the queue: "
        f"{ids_text(step.new_block_ids or ())}."
    )
    pops = [
        f"{bid} ({'holds a hash: evicted' if bid in hashed else 'no hash: nothing to evict'})"
        for bid in step.new_block_ids or ()
    ]
    out.append("In pop order: " + ", ".join(pops) + ".")
    evicted = _evicted(step)
    if evicted:
        n = len(evicted)
        out.append(
            f"So the first block evicted is {evicted[0]}; in all {counted(n, 'block')} "
            f"lose{'' if n > 1 else 's'} {'their hashes' if n > 1 else 'its hash'} (one BlockRemoved each)."
        )
    else:
        out.append(
            "None of them held a hash, so nothing is evicted: blocks without a hash sit at the front and are used first."
        )
    return tuple(out)


def _evicted(step: Step) -> list[int]:
    """The blocks the step popped while they still held a hash, in pop order."""
    return [p.block_id for p in step.evictions()]


def q_next_evicted(seed: int) -> Question:
    rng = random.Random(f"next_evicted:{seed}")
    want_eviction = rng.random() < 0.75
    for attempt in range(60):
        bs = rng.choice([4, 8])
        b = ScenarioBuilder(bs, rng.randint(8, 13))
        ids = _history(rng, b, rng.randint(2, 4), 3, keep_last_running=rng.random() < 0.3)
        share = [r for r in ids if rng.random() < 0.4]
        need = rng.randint(1, b.nb - 2)
        length = (need - 1) * bs + rng.randint(1, bs)
        if share:
            src = b.tokens[share[0]]
            s = min(len(src), length - 1, rng.randint(bs, 3 * bs))
            toks = src[:s] + token_run(9000, length - s)
        else:
            toks = token_run(9000, length)
        b.arrive("P", toks)
        asked = b.op("admit", "P")
        q = finish_question(
            "next_evicted",
            seed,
            b,
            asked,
            "Which block is evicted first?",
            "Which block loses its hash first when **P**'s new blocks are popped? "
            "Answer `none` if no cached block is evicted.",
            "block",
            lambda _t, s: next(iter(_evicted(s)), None),
            _explain_evicted,
            "06_free_order_lru",
        )
        step = q.asked_step()
        if step.ok and (bool(_evicted(step)) == want_eviction or attempt >= 40):
            return q
    return q


# ---- free queue after a free ------------------------------------------------------------------


def _explain_free(trace: Trace, step: Step) -> tuple[str, ...]:
    before = trace.snapshot_at(step.index)
    rid = step.op.id
    assert rid is not None  # finish names its request
    req = before.request(rid)
    assert req is not None
    freed = step.of(Freed)
    out = [
        f"{rid} holds blocks {ids_text(req.block_ids)} and frees them in reverse: {ids_text([f.block_id for f in freed])}."
    ]
    for f in freed:
        if f.to == "held":
            out.append(
                f"Block {f.block_id}: ref_cnt drops to {f.ref_cnt}, another request still uses it, so it stays out of the queue."
            )
        elif f.to == "front":
            out.append(f"Block {f.block_id}: ref_cnt 0 and no hash, so it goes to the front (reused first).")
        else:
            out.append(f"Block {f.block_id}: ref_cnt 0 and it holds a hash, so it goes to the back and stays cached.")
    front = [f.block_id for f in freed if f.to == "front"]
    back = [f.block_id for f in freed if f.to == "back"]
    out.append(
        f"Queue before: {ids_text(before.free_queue)}. The front blocks {ids_text(front)} are put before the head "
        f"in that order, the back blocks {ids_text(back)} after the tail in that order."
    )
    out.append(f"Queue after: {ids_text(snapshot_after(trace, step).free_queue)}.")
    return tuple(out)


def q_free_queue(seed: int) -> Question:
    rng = random.Random(f"free_queue:{seed}")
    bs = rng.choice([4, 4, 8])
    b = ScenarioBuilder(bs, rng.randint(7, 10))
    _history(rng, b, rng.randint(0, 2), 2, keep_last_running=False)
    la = rng.randint(bs + 1, 3 * bs + bs // 2)
    a = token_run(100, la)
    b.arrive("X", a)
    b.op("admit", "X")
    if rng.random() < 0.5:
        b.op("generate", "X", tokens=token_run(600, rng.randint(1, bs + 2)))
    if rng.random() < 0.5:
        s = rng.randint(bs, la)
        b.arrive("Y", a[:s] + token_run(3000, rng.randint(1, bs)))
        b.op("admit", "Y")
    asked = b.op("finish", "X")
    return finish_question(
        "free_queue",
        seed,
        b,
        asked,
        "The free queue after X finishes",
        "What is the free queue after **X** finishes, head first?",
        "ids",
        lambda t, s: list(snapshot_after(t, s).free_queue),
        _explain_free,
        "06_free_order_lru",
    )
