"""A question on speculative decoding (design section 9): ``eagle_hit``, how many tokens does
this admission hit with EAGLE on? The walk's hit loses its last block (spec part 2, rule 74)."""

from __future__ import annotations

import random

from explorer.numbers import counted
from explorer.practice.builder import Explain, ScenarioBuilder, finish_question, ids_text, token_run
from explorer.practice.question import Question
from explorer.scenario.records import EagleDropped, Lookup
from explorer.scenario.trace import Step, Trace


def _explain(rid: str, bs: int) -> Explain:
    def explain(trace: Trace, step: Step) -> tuple[str, ...]:
        lk = step.last(Lookup)
        assert lk is not None
        matched = [p for p in lk.probes if p[1]]
        out = [
            f"{rid} has {lk.num_tokens} tokens, so the lookup may probe at most ({lk.num_tokens} − 1) // {bs} = "
            f"{lk.cap_blocks} blocks.",
            f"The walk matches {counted(len(matched), 'block')}"
            + (f" (block ids {ids_text([p[2] for p in matched if p[2] is not None])})." if matched else "."),
        ]
        drop = step.first(EagleDropped)
        if drop is not None:
            out.append(
                f"EAGLE drops the last of them (block index {drop.block_index}, block id {drop.block_id}): the drafter needs its hidden "
                "states, which only computing it again gives."
            )
        else:
            out.append("Nothing matched, so there is nothing for EAGLE to drop.")
        out.append(f"Hit = {lk.hit_tokens // bs} blocks × {bs} = {lk.hit_tokens} tokens.")
        return tuple(out)

    return explain


def q_eagle_hit(seed: int) -> Question:
    rng = random.Random(f"eagle_hit:{seed}")
    bs = rng.choice([4, 8, 16])
    k = rng.randint(1, 4)
    b = ScenarioBuilder(
        bs, 64, {"speculative": {"method": rng.choice(["eagle", "eagle3"]), "num_speculative_tokens": k}}
    )
    la = rng.randint(2 * bs, 6 * bs)
    a = token_run(100, la)
    b.arrive("A", a)
    b.op("admit", "A")
    if rng.random() < 0.6:
        b.op("finish", "A")
    variant = rng.choice(["shared", "identical", "short"])
    if variant == "shared":
        btoks = a[: rng.randint(1, la)] + token_run(2000, rng.randint(1, 3 * bs))
    elif variant == "identical":
        btoks = list(a)
    else:
        btoks = a[: rng.randint(bs + 1, 2 * bs)]
    b.arrive("B", btoks)
    asked = b.op("admit", "B")
    return finish_question(
        "eagle_hit",
        seed,
        b,
        asked,
        "How many tokens does B hit with EAGLE on?",
        f"The engine runs EAGLE speculative decoding ({counted(k, 'draft')} a step). How many of "
        "**B**'s tokens does the prefix cache lookup hit (`hit_tokens`)?",
        "int",
        lambda _t, s: s.hit_tokens,
        _explain("B", bs),
        "17_speculative_decoding",
    )
