"""The panels' records come from the core's reports, not from a prediction beside it.

A different pop order is planted in the core (the free queue hands out blocks from its tail);
the recorded pops, evictions and cached blocks follow the planted order, step by step, and they
differ from what the real order gives. A replay that predicted pops from the queue head (as the
explorer once did) would draw the wrong blocks here.
"""

from __future__ import annotations

import pytest

from explorer.core.kv_cache_utils import FreeKVCacheBlockQueue, KVCacheBlock
from explorer.scenario.engine import replay
from explorer.scenario.parse import parse_scenario_dict
from explorer.scenario.randgen import random_scenario
from explorer.scenario.records import CachedBlock
from tests.step_records import evictions


def _pop_from_tail(self: FreeKVCacheBlockQueue, n: int) -> list[KVCacheBlock]:
    if n > self.num_free_blocks:
        raise ValueError(f"Cannot pop {n} blocks: only {self.num_free_blocks} are free")
    out = list(reversed(self.get_all_free_blocks()[self.num_free_blocks - n :]))
    for block in out:
        self.remove(block)
    return out


def _scenario():
    raw = random_scenario(7, 400, profile="bench", engine={"num_blocks": 120})
    return parse_scenario_dict(raw, "<planted>")


def _check_steps_follow_their_pops(trace) -> int:
    """Every step's evictions are exactly the popped blocks that held a hash, in pop order;
    returns how many evictions were checked."""
    checked = 0
    for k, step in enumerate(trace.steps, start=1):
        before = trace.snapshot_at(k - 1)
        new_ids = list(step.new_block_ids or ())
        hashed_before = [b for b in new_ids if before.blocks[b][1] is not None]
        evicted = [b for b, _ in evictions(step)]
        if step.op.op == "generate":
            # a generate op pops one block at a time, between samples: check membership only
            assert set(evicted) <= set(new_ids)
        else:
            assert evicted == hashed_before, f"step {k}: evicted {evicted}, popped with a hash {hashed_before}"
        for b, h in evictions(step):
            assert before.blocks[b][1] == h, f"step {k}: block {b} lost {h.hex()[:8]}, it held another hash"
        for c in step.of(CachedBlock):
            assert trace.snapshot_at(k).blocks[c.block_id][1] == c.hash
        checked += len(evicted)
    return checked


def test_planted_pop_order_is_what_the_panels_record(monkeypatch):
    sc = _scenario()
    real = replay(sc)
    assert _check_steps_follow_their_pops(real) > 50, "the scenario must evict"
    monkeypatch.setattr(FreeKVCacheBlockQueue, "popleft_n", _pop_from_tail)
    planted = replay(sc)
    assert _check_steps_follow_their_pops(planted) > 50
    differ = [
        k
        for k, (a, b) in enumerate(zip(real.steps, planted.steps, strict=True), start=1)
        if a.new_block_ids and a.new_block_ids != b.new_block_ids
    ]
    assert differ, "the planted order changed nothing: the test would not notice a predicted panel"
    # Where the planted core popped a block that was not at the queue head, a head-of-queue
    # prediction would have drawn another block; the record drew the one the core popped.
    k = differ[0]
    head = list(planted.snapshot_at(k - 1).free_queue)
    popped = list(planted.steps[k - 1].new_block_ids or ())
    assert popped != head[: len(popped)]


@pytest.mark.parametrize("record", [True, False])
def test_lean_and_recorded_replays_print_the_same_json(record):
    sc = _scenario()
    assert replay(sc, record=record).to_json() == replay(sc).to_json()
