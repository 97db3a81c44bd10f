"""A question on hybrid KV cache groups (design section 8): ``hybrid_hit``, how many tokens does
this admission hit when the model has full-attention and sliding-window layers? Each group finds
its own hit; the coordinator's fixed point settles on the longest one every group accepts (spec
part 2, rules 64-67), and that is the request's hit."""

from __future__ import annotations

import random

from explorer.numbers import counted
from explorer.practice.builder import Explain, ScenarioBuilder, finish_question, token_run
from explorer.practice.question import Question
from explorer.scenario.records import GroupLookup, Lookup
from explorer.scenario.trace import Step, Trace


def _group_name(window: int | None) -> str:
    return "full attention" if window is None else f"the {window}-token window"


def _explain(rid: str, windows: tuple[int | None, ...]) -> Explain:
    def explain(trace: Trace, step: Step) -> tuple[str, ...]:
        lk = step.last(Lookup)
        assert lk is not None
        (gl,) = [g for g in step.of(GroupLookup) if g.request_id == rid]
        alone = ", ".join(f"{_group_name(w)} {h} tokens" for w, h in zip(windows, gl.group_hit_tokens, strict=True))
        out = [
            f"{rid} has {lk.num_tokens} tokens, so at most {lk.num_tokens - 1} of them can hit (the last is computed).",
            f"Each group alone: {alone}.",
            "Full attention needs every block from the first; a window group needs only the blocks inside its "
            "window before the hit's end, and the rest of its table is the null block.",
            f"The coordinator starts at {lk.num_tokens - 1} tokens and lets each group shorten the candidate; it "
            f"settles after {counted(gl.num_passes, 'pass', 'passes')} on {gl.hit_tokens} tokens, "
            "the longest hit every group accepts.",
        ]
        if gl.shared_prefix_boundary:
            out.append(
                f"shared_prefix_boundary = {gl.shared_prefix_boundary}: the longest single-group hit, where "
                "retention will keep the window's blocks hashed for the next request."
            )
        out.append(f"Hit = {gl.hit_tokens} tokens.")
        return tuple(out)

    return explain


def q_hybrid_hit(seed: int) -> Question:
    rng = random.Random(f"hybrid_hit:{seed}")
    bs = rng.choice([4, 8, 16])
    window = bs * rng.randint(2, 4)
    retention = rng.choice([0, "dense"])
    engine = {
        "kv_cache_groups": [{"kind": "full_attention"}, {"kind": "sliding_window", "sliding_window": window}],
        "prefix_cache_retention_interval": retention,
    }
    b = ScenarioBuilder(bs, 96, engine)
    la = rng.randint(3 * bs, 7 * bs)
    a = token_run(100, la)
    b.arrive("A", a)
    b.op("admit", "A")
    if rng.random() < 0.5:
        b.op("finish", "A")
    variant = rng.choice(["extends", "shorter", "identical"])
    if variant == "extends":  # A's whole prompt and more: full attention may hit past the window's tail
        btoks = a + token_run(2000, rng.randint(1, 3 * bs))
    elif variant == "shorter":
        btoks = a[: rng.randint(bs + 1, la)] + token_run(3000, rng.randint(1, 2 * bs))
    else:
        btoks = list(a)
    b.arrive("B", btoks)
    asked = b.op("admit", "B")
    kept = "only the window blocks at a prompt's end" if retention == 0 else "every full block"
    return finish_question(
        "hybrid_hit",
        seed,
        b,
        asked,
        "How many tokens does B hit with a sliding-window group?",
        f"The model has full-attention layers and sliding-window layers (a {window}-token window): two KV "
        f"cache groups sharing one pool, with `prefix_cache_retention_interval = {retention!r}` (the window "
        f"group hashes {kept}). How many of **B**'s tokens does the lookup hit (`hit_tokens`)?",
        "int",
        lambda _t, s: s.hit_tokens,
        _explain("B", (None, window)),
        "16_sliding_window",
    )
