"""The interview walkthrough in our words: its common mistakes, follow-up questions and scoring rubric."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mistake:
    name: str
    statement: str  # the mistake, in our words
    correction: str  # what really happens
    lesson: str


MISTAKES: tuple[Mistake, ...] = (
    Mistake(
        "lora",
        "Forgetting the extra keys: expecting a request through a LoRA adapter to hit the blocks "
        "the base model cached for the same tokens.",
        "The adapter is an extra key of every block, so its hashes never match the base model's.",
        "02_extra_keys",
    ),
    Mistake(
        "freed_on_finish",
        "Saying a request's cached blocks are freed (forgotten) when it finishes.",
        "They go back to the free queue with their hashes and stay valid until allocation pops them.",
        "06_free_order_lru",
    ),
    Mistake(
        "partial_block",
        "Counting a partial last block as cached.",
        "Only full blocks get a hash; a partial block is never cached, so a hit never covers it.",
        "01_hash_chain",
    ),
    Mistake(
        "identical_100",
        "Benchmarking with identical prompts and expecting a 100% hit.",
        "The lookup stops at num_tokens − 1, and hits are whole blocks: the last block is always recomputed.",
        "03_lookup_cap",
    ),
)
MISTAKES_BY_NAME = {m.name: m for m in MISTAKES}


@dataclass(frozen=True)
class FollowUp:
    question: str
    answer: str
    lesson: str | None


FOLLOW_UPS: tuple[FollowUp, ...] = (
    FollowUp(
        "Why chain each block's hash to its parent's instead of keying blocks by their token positions?",
        "A key of (position, tokens) would match the same 16 tokens at the same offset after a different "
        "prefix, but their KV depends on every earlier token, so that KV would be wrong. With the parent "
        "chain, a hit on block k implies blocks 0 to k all match. Lesson 1 changes only the first token and "
        "every block misses.",
        "01_hash_chain",
    ),
    FollowUp(
        "The pool is full of blocks that running requests use, and a new request needs space. What happens?",
        "Only blocks with ref_cnt 0 are in the free queue, and only those can be evicted; blocks in use never "
        "are. When the queue cannot supply the blocks, allocate_slots returns None and the scheduler preempts "
        "a running request instead (its blocks are freed and it is recomputed later). Lesson 7 runs out of "
        "blocks and preempts.",
        "07_eviction_preemption",
    ),
    FollowUp(
        "Now the model has sliding-window layers too. Does the hit change?",
        "Each KV cache group gets its own manager. A sliding-window manager only needs the blocks inside the "
        "window (and scans from the right for a long enough run), so a prefix can be a full hit for the "
        "full-attention layers and a partial one for the local layers; the coordinator uses the hit length "
        "that every group can serve. Lesson 16 and the hybrid practice question replay exactly that.",
        "16_sliding_window",
    ),
)


@dataclass(frozen=True)
class RubricLevel:
    level: str
    summary: str


RUBRIC: tuple[RubricLevel, ...] = (
    RubricLevel(
        "Weak",
        "Talks about caching whole prompts keyed by their text, or says a request's blocks are "
        "evicted as soon as it finishes.",
    ),
    RubricLevel(
        "Hire",
        "Explains the chained block hashes, the walk to the longest cached prefix, reference "
        "counts and LRU eviction from the free queue, and computes a hit length in whole blocks.",
    ),
    RubricLevel(
        "Strong hire",
        "Also knows the num_tokens − 1 cap and why a fully cached prompt recomputes a "
        "whole block, names the extra keys and cache_salt, and explains why the fixed seed of sha256 "
        "matters for reuse across nodes.",
    ),
)
