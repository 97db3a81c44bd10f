"""Questions on the hit length: ``hit_length`` (how many tokens does this admission hit?) and
``mistake`` (a common interview mistake, shown by a scenario where it gives a wrong number)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from explorer.practice.builder import Explain, ScenarioBuilder, finish_question, ids_text, token_run
from explorer.practice.interview import MISTAKES, MISTAKES_BY_NAME
from explorer.practice.question import Question
from explorer.scenario.records import Lookup
from explorer.scenario.trace import Step, Trace


def _miss_reason(b: ScenarioBuilder, rid: str, other: str, m: int, computed_other: int) -> str:
    """Why block m of `rid` is not in the cache, compared with the request `other`."""
    bs = b.bs
    mine, theirs = b.tokens[rid], b.tokens[other]
    if b.extra[rid] != b.extra[other]:
        (l1, s1), (l2, s2) = b.extra[rid], b.extra[other]
        if l1 != l2:
            return (
                f"{rid}'s LoRA adapter ({l1 or 'none'}) differs from {other}'s ({l2 or 'none'}). The adapter is "
                f"an extra key of every block, so even block 0's hash differs."
            )
        return (
            f"{rid}'s cache_salt ({s1 or 'none'}) differs from {other}'s ({s2 or 'none'}). The salt is an extra "
            f"key of block 0, so block 0's hash differs, and every later hash contains it."
        )
    lo, hi = m * bs, (m + 1) * bs
    d = next((i for i in range(lo, min(hi, len(theirs))) if mine[i] != theirs[i]), None)
    if d is not None:
        return (
            f"token {d} differs ({mine[d]} here, {theirs[d]} in {other}), so block {m}'s hash differs; "
            f"every later block's too, because each hash contains its parent's."
        )
    if len(theirs) < hi:
        return (
            f"{other} has only {len(theirs)} tokens, so its block {m} was partial: only full blocks get "
            f"a hash, and a partial block is never cached."
        )
    if computed_other < hi:
        return (
            f"{other}'s block {m} was completed only by its last sampled token, which is never computed, "
            f"so the pool never cached it."
        )
    return "no block with that hash is cached any more (it was evicted)."


def _explain_hit(b: ScenarioBuilder, rid: str, other: str, computed_other: Callable[[], int]) -> Explain:
    def explain(trace: Trace, step: Step) -> tuple[str, ...]:
        lk = step.last(Lookup)
        assert lk is not None
        bs = b.bs
        hits = [p for p in lk.probes if p[1]]
        req = trace.snapshot_at(step.index).request(rid)
        assert req is not None  # the asked request arrived before its admission
        n_hashes = len(req.block_hashes)
        out = [
            f"{rid} has {lk.num_tokens} tokens, so the lookup may probe at most "
            f"({lk.num_tokens} − 1) // {bs} = {lk.cap_blocks} blocks (the last token must be computed to give logits)."
        ]
        if hits:
            out.append(
                f"Blocks 0–{len(hits) - 1} are cached (block ids {ids_text([p[2] for p in hits if p[2] is not None])})."
            )
        miss = next((p for p in lk.probes if not p[1]), None)
        if lk.cap_blocks == 0:
            out.append(f"With {lk.num_tokens} ≤ {bs} tokens the cap is 0 blocks: nothing can hit, whatever is cached.")
        elif miss is not None:
            out.append(
                f"Block {miss[0]} misses: "
                + _miss_reason(b, rid, other, miss[0], computed_other())
                + " The walk stops at the first miss."
            )
        elif len(hits) == lk.cap_blocks and lk.cap_blocks < n_hashes:
            out.append(f"The walk stops at the cap: block {lk.cap_blocks} is recomputed even though it may be cached.")
        elif len(hits) == n_hashes:
            out.append(f"{rid} has no further full block to look up (a partial block has no hash).")
        out.append(f"Hit = {len(hits)} blocks × {bs} = {lk.hit_tokens} tokens.")
        return tuple(out)

    return explain


def q_hit_length(seed: int) -> Question:
    rng = random.Random(f"hit_length:{seed}")
    bs = rng.choice([4, 8, 16])
    b = ScenarioBuilder(bs, 64)
    variant = rng.choice(["shared", "shared", "identical", "partial", "extra", "short", "generated"])
    la = rng.randint(2 * bs, 6 * bs) if variant != "short" else rng.randint(1, bs - 1)
    if variant == "partial" and la % bs == 0:
        la += rng.randint(1, bs - 1)
    a = token_run(100, la)
    b.arrive("A", a, **({"lora": "sql"} if variant == "extra" and rng.random() < 0.3 else {}))
    b.op("admit", "A")
    a_computed = la
    if variant == "generated":
        g = rng.randint(2, 2 * bs)
        b.op("generate", "A", tokens=token_run(500, g))
        a_computed = la + g - 1  # the last sampled token stays pending
    if rng.random() < 0.6:
        b.op("finish", "A")
    a_all = b.tokens["A"]
    kw: dict[str, Any] = {}
    if variant == "shared":
        s = rng.randint(1, la)
        btoks = a_all[:s] + token_run(2000, rng.randint(1, 3 * bs))
    elif variant == "identical":
        btoks = list(a_all)
    elif variant == "generated":
        btoks = list(a_all) + token_run(2000, rng.randint(1, 2 * bs))
    elif variant == "extra":
        btoks = list(a_all) + token_run(2000, rng.randint(1, bs))
        if b.extra["A"][0]:
            kw = rng.choice([{"lora": "sql"}, {}, {"lora": "chat"}])
        else:
            kw = rng.choice([{"lora": "sql"}, {"cache_salt": "tenant-2"}])
    else:  # partial, short
        btoks = list(a_all) + token_run(2000, rng.randint(1, 2 * bs))
    b.arrive("B", btoks, **kw)
    asked = b.op("admit", "B")
    return finish_question(
        "hit_length",
        seed,
        b,
        asked,
        "How many tokens does B hit?",
        "How many of **B**'s tokens does the prefix cache lookup hit (`hit_tokens`)?",
        "int",
        lambda _t, s: s.hit_tokens,
        _explain_hit(b, "B", "A", lambda: a_computed),
        "03_lookup_cap",
    )


def q_mistake(seed: int, name: str | None = None) -> Question:
    rng = random.Random(f"mistake:{seed}")
    m = MISTAKES_BY_NAME[name] if name else rng.choice(MISTAKES)
    bs = rng.choice([4, 8, 16])
    b = ScenarioBuilder(bs, 64)
    nblk = rng.randint(2, 5)
    if m.name == "partial_block":
        la = nblk * bs + rng.randint(1, bs - 1)
    else:
        la = nblk * bs
    a = token_run(100, la)
    b.arrive("A", a)
    b.op("admit", "A")
    b.op("finish", "A")
    if m.name == "lora":
        b.arrive("B", a + token_run(2000, rng.randint(1, bs)), lora="sql")
        mistaken = la
    elif m.name == "freed_on_finish":
        b.arrive("B", a + token_run(2000, rng.randint(1, bs)))
        mistaken = 0
    elif m.name == "partial_block":
        b.arrive("B", a + token_run(2000, rng.randint(1, 2 * bs)))
        mistaken = la
    else:
        b.arrive("B", list(a))
        mistaken = la
    asked = b.op("admit", "B")
    q = finish_question(
        "mistake",
        seed,
        b,
        asked,
        "A common mistake",
        "How many tokens does **B** hit? (The common mistake above gives a different number.)",
        "int",
        lambda _t, s: s.hit_tokens,
        _explain_hit(b, "B", "A", lambda: la),
        m.lesson,
        mistaken_answer=mistaken,
        mistake=m.statement,
    )
    return q
