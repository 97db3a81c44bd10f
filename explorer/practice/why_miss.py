"""The question ``why_miss``: why does this block of B miss? Graded by the lookup's miss record
(design section 14: the reason the classification gives that block, from what the core reported)."""

from __future__ import annotations

import random

from explorer.miss.reasons import Miss
from explorer.miss.sentence import REASON_LABELS, miss_sentence
from explorer.practice.builder import Explain, ScenarioBuilder, finish_question, token_run
from explorer.practice.question import Question
from explorer.scenario.engine import replay
from explorer.scenario.trace import Step, Trace

# The reasons a manager-level scenario of one pool can show, offered as the answers.
CHOICES = ("never_cached", "evicted", "reset", "other_keys", "behind_miss", "last_token", "partial_block")
VARIANTS = ("never_cached", "evicted", "reset", "other_keys", "last_token", "partial_block")
RULES = {
    "never_cached": "No block with this hash was ever cached in this scenario: the first time the prefix is seen.",
    "evicted": "The block was cached, and its hash was lost when another request's allocation popped it from "
    "the free queue's head.",
    "reset": "The block was cached, and reset_prefix_cache() forgot every hash.",
    "other_keys": "The same token ids were cached, but under another LoRA adapter: the adapter is one of the "
    "block's extra keys, so its hash differs from block 0 on.",
    "last_token": "The prompt is a whole number of blocks and the lookup covers at most num_tokens - 1 tokens: "
    "its last full block is never looked up (the model must compute one token).",
    "partial_block": "Only full blocks get a hash: the tokens after the last full block are never looked up.",
    "behind_miss": "The hash is cached, but an earlier block missed: the walk stops at the first miss.",
}


def reason_of_block(miss: Miss, block: int, block_size: int) -> str | None:
    """The record's reason for ``block`` (the partial block after the full ones: partial_block)."""
    if block < len(miss.block_reasons):
        return miss.block_reasons[block]
    return "partial_block" if miss.num_tokens > block * block_size else None


def _asked_block(miss: Miss, block_size: int) -> int:
    """The first block the lookup missed: the first full block within the cap, else the tail."""
    if miss.first_miss_block is not None:
        return miss.first_miss_block
    return next((i for i, r in enumerate(miss.block_reasons) if r is not None), len(miss.block_reasons))


def q_why_miss(seed: int) -> Question:
    rng = random.Random(f"why_miss:{seed}")
    bs = rng.choice([4, 8, 16])
    variant = rng.choice(VARIANTS)
    nb = 24
    b = ScenarioBuilder(bs, nb)
    la = rng.randint(3, 6) * bs + (0 if variant == "last_token" else rng.randint(1, bs - 1))
    a = token_run(100, la)
    b.arrive("A", a, **({"lora": "sql"} if variant == "other_keys" else {}))
    b.op("admit", "A")
    b.op("finish", "A")
    if variant == "never_cached":
        s = rng.randint(1, la - 1)
        btoks = a[:s] + token_run(3000, rng.randint(bs, 3 * bs))
    elif variant == "evicted":
        # C needs every block the pool has free except a few of A's: its allocation pops A's tail
        keep = rng.randint(1, la // bs - 1)
        c_blocks = nb - 1 - keep
        b.arrive("C", token_run(5000, c_blocks * bs - rng.randint(0, bs - 1)))
        b.op("admit", "C")
        b.op("finish", "C")
        btoks = a + token_run(3000, rng.randint(1, bs))
    elif variant == "reset":
        b.op("reset")
        btoks = a + token_run(3000, rng.randint(1, bs))
    elif variant == "other_keys":  # B is A's tokens and more, on the base model
        btoks = a + token_run(3000, rng.randint(1, bs))
    elif variant == "last_token":
        btoks = list(a)
    else:  # partial_block: B is A exactly; everything but the tail hits
        btoks = list(a)
    b.arrive("B", btoks)
    asked = b.op("admit", "B")
    # the record says which block missed first: that is the block asked about
    miss = replay(b.scenario("", f"practice:why_miss:{seed}")).steps[asked].miss
    assert miss is not None
    block = _asked_block(miss, bs)
    lesson = {"evicted": "07_eviction_preemption", "reset": "08_reset", "other_keys": "02_extra_keys"}.get(
        variant, "03_lookup_cap"
    )
    return finish_question(
        "why_miss",
        seed,
        b,
        asked,
        "Why did this block miss?",
        f"B's lookup does not hit its **block {block}** (tokens {block * bs}-{min((block + 1) * bs, len(btoks)) - 1}). "
        "Why? Pick the reason the engine's record gives.",
        "reason",
        lambda _t, s: reason_of_block(s.miss, block, bs) if s.miss is not None else None,
        _explain(block, bs),
        lesson,
        block=block,
    )


def _explain(block: int, bs: int) -> Explain:
    def explain(trace: Trace, step: Step) -> tuple[str, ...]:
        miss = step.miss
        assert miss is not None
        reason = reason_of_block(miss, block, bs)
        out = [f"The lookup's record: {miss_sentence(miss)}."]
        if reason is not None:
            out.append(f"Block {block}: {REASON_LABELS[reason]}. {RULES.get(reason, '')}".strip())
        return tuple(out)

    return explain
