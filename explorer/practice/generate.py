"""The question of a seed: the seed picks the kind (unless one is asked for) and its generator.

Kinds of question:
- ``hit_length``: how many tokens does this admission hit?
- ``next_evicted``: which cached block does this admission evict first (or none)?
- ``free_queue``: the free queue after a request finishes, head first.
- ``hashed_this_step``: which blocks does the pool cache (hash) in this step?
- ``admission``: does allocate_slots admit this request?
- ``mistake``: a common interview mistake, shown by a scenario where it gives a wrong number.
- ``eagle_hit``: how many tokens does this admission hit with EAGLE speculative decoding on?
- ``hybrid_hit``: how many tokens does this admission hit with full-attention and sliding-window groups?
- ``why_miss``: why does this block of the admission miss? (graded by the lookup's miss record)
"""

from __future__ import annotations

import random
from collections.abc import Callable

from explorer.practice.allocation import q_admission, q_hashed_this_step
from explorer.practice.external import q_async_load_events, q_external_hit
from explorer.practice.free_queue import q_free_queue, q_next_evicted
from explorer.practice.hits import q_hit_length, q_mistake
from explorer.practice.hybrid import q_hybrid_hit
from explorer.practice.question import KINDS, MAX_SEED, Question
from explorer.practice.spec_decode import q_eagle_hit
from explorer.practice.why_miss import q_why_miss

GENERATORS: dict[str, Callable[[int], Question]] = {
    "hit_length": q_hit_length,
    "next_evicted": q_next_evicted,
    "free_queue": q_free_queue,
    "hashed_this_step": q_hashed_this_step,
    "admission": q_admission,
    "mistake": q_mistake,
    "external_hit": q_external_hit,
    "async_load_events": q_async_load_events,
    "eagle_hit": q_eagle_hit,
    "hybrid_hit": q_hybrid_hit,
    "why_miss": q_why_miss,
}


def kind_for_seed(seed: int) -> str:
    return random.Random(f"kind:{seed}").choice(KINDS)


def generate(seed: int, kind: str | None = None) -> Question:
    """The question of this seed (and kind; without one the seed picks the kind)."""
    if not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed must be an integer in [0, {MAX_SEED}]")
    kind = kind or kind_for_seed(seed)
    if kind not in GENERATORS:
        raise ValueError(f"unknown question kind {kind!r} (known: {', '.join(KINDS)})")
    return GENERATORS[kind](seed)
