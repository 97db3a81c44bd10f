"""The golden scenarios of the conformance tier replay with every expectation met.

tests/scenario/golden/*.toml are worked examples whose numbers come from outside this project: the
design document's example, the interview walkthrough and the shared vLLM oracle demo. The
conformance tier replays them through vLLM's own classes too; here we check our replay and
the facts `expect` cannot express.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario
from explorer.scenario.records import CachedBlock, Freed, HashedBlock, Lookup
from tests.step_records import evictions

GOLDEN = Path(__file__).resolve().parent / "golden"
FILES = sorted(GOLDEN.glob("*.toml"))


def _trace(name: str):
    return replay(load_scenario(GOLDEN / f"{name}.toml"))


def test_the_three_goldens_exist():
    assert {p.stem for p in FILES} >= {"design_doc", "interview", "oracle_demo"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_golden_replays_with_every_expect_met(path):
    trace = replay(load_scenario(path))
    assert trace.expect_failures == []
    assert sum(len(s.op.expect) for s in trace.steps) >= 10


def test_interview_duplicate_of_the_last_block():
    trace = _trace("interview")
    a_again = trace.steps[7]
    assert a_again.hit_tokens == 1184
    assert [(c.block_id, c.index, c.duplicate_of) for c in a_again.of(CachedBlock)] == [(89, 74, (75,))]
    lora = trace.steps[9]
    assert lora.hit_tokens == 0 and lora.last(Lookup).probes[0][1] is False


def test_interview_b_first_miss_is_block_62():
    lk = _trace("interview").steps[4].last(Lookup)
    assert lk.probes[-1] == (62, False, None) and len(lk.probes) == 63


def test_design_doc_differs_from_the_figures_where_documented():
    trace = _trace("design_doc")
    time5, time6, time7 = trace.steps[6], trace.steps[7], trace.steps[9]
    assert [f.to for f in time5.of(Freed)] == ["front", "back", "back", "held", "held"]
    assert trace.snapshot_at(time6.index + 1).free_queue == (7, 5, 8, 9, 10, 4, 3, 6, 2, 1)
    assert evictions(time7) == []


def test_oracle_demo_evicts_a2_b2_a1_in_pop_order():
    trace = _trace("oracle_demo")
    a, b = trace.steps[0].of(HashedBlock), trace.steps[3].of(HashedBlock)
    removed = [e.block_hashes[0] for e in trace.steps[7].events if type(e).__name__ == "BlockRemoved"]
    assert removed == [a[2].external, b[2].external, a[1].external]
    assert [bid for bid, _ in evictions(trace.steps[7])] == [3, 4, 2]
    stored = trace.steps[4].events[0]
    assert stored.parent_block_hash == a[1].external
    assert stored.block_hashes == [b[2].external]
