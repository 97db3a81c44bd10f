"""Practice kind ``why_miss``: the answer is the lookup's miss record, and the record agrees with
what the KV events of the steps before it show (stored, removed by an allocation, cleared)."""

from __future__ import annotations

from collections import Counter

from explorer.core.hashing import BlockHash, maybe_convert_block_hash
from explorer.practice.generate import generate
from explorer.practice.question import format_answer
from explorer.practice.why_miss import CHOICES, reason_of_block
from explorer.scenario.engine import replay

SEEDS = range(40)


def _history(trace, upto: int, h: int | bytes) -> list[tuple[int, str]]:
    """(step, what) for every KV event that touched hash ``h`` (or cleared every hash) before ``upto``."""
    out = []
    for k, step in enumerate(trace.steps[:upto]):
        for e in step.events:
            name = type(e).__name__
            if name == "AllBlocksCleared" or h in getattr(e, "block_hashes", ()):
                out.append((k, name))
    return out


def test_the_answer_is_the_record_and_the_events_agree():
    seen: Counter[str] = Counter()
    for seed in SEEDS:
        q = generate(seed, "why_miss")
        trace = replay(q.scenario)
        step = trace.steps[q.step_index]
        bs = q.scenario.hash_block_size
        assert step.miss is not None and q.block is not None
        assert q.answer == reason_of_block(step.miss, q.block, bs) and q.answer in CHOICES
        assert q.check(format_answer("reason", q.answer)).correct
        assert not q.check(next(c for c in CHOICES if c != q.answer)).correct
        seen[q.answer] += 1
        n = step.miss.num_tokens
        if q.answer == "partial_block":
            assert q.block == n // bs and n % bs
            continue
        if q.answer == "last_token":
            assert n % bs == 0 and q.block == n // bs - 1
            continue
        b = trace.snapshot_at(q.step_index + 1).request("B")
        assert b is not None
        h = maybe_convert_block_hash(BlockHash(b.block_hashes[q.block]), q.scenario.engine.int_block_hashes)
        story = _history(trace, q.step_index, h)
        stored = [k for k, what in story if what == "BlockStored"]
        if q.answer in ("never_cached", "other_keys"):
            assert not stored  # B's own hash was never stored
            if q.answer == "other_keys":  # A stored the same token ids under its LoRA
                a = trace.steps[1]
                assert a.op.id == "A" and any(type(e).__name__ == "BlockStored" and e.lora_id for e in a.events)
        else:
            last = story[-1]
            assert stored and last[0] >= stored[-1]
            if q.answer == "evicted":
                assert last[1] == "BlockRemoved"
                popper = trace.steps[last[0]]
                assert popper.op.op == "admit" and popper.op.id != "B"
                assert step.miss.evicted_by is not None and step.miss.evicted_by.step == last[0]
            else:
                assert q.answer == "reset" and last[1] == "AllBlocksCleared"
        assert any(f"Block {q.block}" in line for line in q.explanation)
    assert set(seen) == {"never_cached", "evicted", "reset", "other_keys", "last_token", "partial_block"}


def test_reasons_are_read_by_name_or_label():
    q = generate(1, "why_miss")
    assert q.check(q.answer.replace("_", " ").upper()).correct
    v = q.check("cosmic rays")
    assert not v.correct and v.given is None and "Could not read" in v.message
