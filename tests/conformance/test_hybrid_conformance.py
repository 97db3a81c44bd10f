"""Conformance of hybrid KV cache groups (design section 8) with vLLM 0.31.0's own hybrid
KVCacheManager (spec part 2 rule 70's recipe, in ``vllm_driver.py``).

- Rules 64 and 74 (hybrid) cannot be written as scenarios (rule 64 evicts hashes by hand and
  records every call of the fixed point; rule 74 needs EAGLE's use_eagle): the driver runs them
  with vLLM's classes and our core runs the same, and the answers must be equal.
- Engine steps: the goldens tests/scenario/golden/engine_steps/hybrid_*.toml run in
  test_engine_steps_conformance.py; random hybrid engine-step scenarios (both schedulers) run
  here through vLLM's real Scheduler with a hybrid KVCacheConfig (vllm_sched_driver.py).
- Random hybrid scenarios (randgen's "hybrid" profile: full attention and windows in either
  order, two windows, two groups of one spec, one group, group block sizes, every retention
  form, an explicit hash block size) are replayed by both, field by field. The goldens
  (tests/scenario/golden/hybrid_*.toml) run in test_conformance.py.
"""

from __future__ import annotations

import pytest

from explorer.core.hashing import init_none_hash
from explorer.core.kv_cache_interface import full_attention, sliding_window
from explorer.core.kv_cache_manager import KVCacheManager
from explorer.core.kv_cache_utils import get_request_block_hasher
from explorer.core.request import Request
from explorer.request_steps import RequestSteps
from explorer.scenario.engine import replay
from explorer.scenario.parse import parse_scenario_dict
from explorer.scenario.randgen import random_scenario
from tests.conformance.oracle import at_release, compare, seeds_for
from tests.conformance.test_conformance import _report, results_beside_vllm
from tests.core.test_hybrid import GroupLookups
from vllm_drivers.engine_step_scenarios import random_raw_scenario, under_both_schedulers

pytestmark = pytest.mark.conformance

RANDOM_SEEDS = range(200)


def _ours_vectors() -> dict:
    ctx = init_none_hash("sha256")
    hasher = get_request_block_hasher(16, ctx)

    lookups = GroupLookups()

    def manager(windows, use_eagle=False):
        groups = [full_attention(16), *(sliding_window(16, w) for w in windows)]
        return KVCacheManager(
            64,
            max_model_len=4096,
            enable_kv_cache_events=True,
            kv_cache_groups=groups,
            prefix_cache_retention_interval=None,
            use_eagle=use_eagle,
            observer=lookups,
        )

    out: dict = {}
    mgr = manager([32, 64])
    a = Request("A", list(range(140)), hasher)
    RequestSteps(mgr).admit(a)
    pool = mgr.block_pool
    _, swa32, swa64 = mgr.get_block_ids("A")
    for bid in [*swa64[4:8], *swa32[2:4]]:
        blk = pool.blocks[bid]
        pool.cached_block_hash_to_block.pop(blk.block_hash, bid)
        blk.reset_hash()
    lookups.take()
    q = Request("Q", [*range(140), *range(1000, 1020)], hasher)
    blocks, hit, spb = mgr.get_computed_blocks(q)
    (lookup,) = lookups.take()
    calls = [[c.sliding_window, c.max_length, c.hit_tokens] for c in lookup.calls]
    out["rule64"] = {"calls": calls, "hit": hit, "spb": spb, "blocks": [list(g) for g in blocks.get_block_ids()]}
    for use_eagle in (True, False):
        mgr = manager([32], use_eagle)
        a = Request("A", list(range(100)), hasher)
        RequestSteps(mgr).admit(a)
        b = Request("B", [*range(100), *([5] * 50)], hasher)
        blocks, hit, _ = mgr.get_computed_blocks(b)
        out[f"rule74_eagle_{use_eagle}"] = {
            "hit": hit,
            "blocks": [list(g) for g in blocks.get_block_ids()],
            "replay_boundaries": list(mgr.coordinator.get_replay_boundaries(a)),
            "eagle_group_ids": sorted(mgr.coordinator.eagle_group_ids),
        }
    return out


def test_rules_64_and_74_vectors_match_vllm(vllm_oracle):
    theirs = vllm_oracle.replay({"vectors": "hybrid"})
    ours = _ours_vectors()
    assert ours == theirs
    # and they are the spec's verified numbers
    assert theirs["rule64"]["calls"] == [
        [None, 159, 128],
        [32, 128, 128],
        [64, 128, 64],
        [32, 64, 32],
        [64, 32, 32],
        [32, 32, 32],
        [64, 32, 32],
    ]
    assert theirs["rule74_eagle_True"]["hit"] == 80 and theirs["rule74_eagle_True"]["replay_boundaries"] == [80]


def hybrid_case(seed: int) -> dict:
    return random_scenario(seed, 20 + (seed * 7919) % 71, profile="hybrid")


@pytest.fixture(scope="module")
def hybrid_results(vllm_oracle):
    return results_beside_vllm(
        vllm_oracle,
        {seed: parse_scenario_dict(hybrid_case(seed), f"random hybrid seed {seed}") for seed in RANDOM_SEEDS},
    )


@pytest.mark.parametrize("seed", RANDOM_SEEDS)
def test_random_hybrid_scenario_matches_vllm(hybrid_results, seed):
    ours, theirs = hybrid_results[seed]
    assert "error" not in theirs, f"random hybrid seed {seed}: vLLM raised: {theirs['error']}"
    diffs = compare(ours, theirs)
    assert not diffs, _report(f"random hybrid seed {seed}", diffs)


def test_random_hybrid_scenarios_cover_the_features(hybrid_results):
    """Hits that differ per group, shared-prefix boundaries, skipped blocks, failed
    admissions and evictions all happen in the batch."""
    seen = {"diverge": 0, "spb": 0, "null": 0, "ok_false": 0, "removed": 0, "windows_only": 0}
    for ours, _ in hybrid_results.values():
        for step in ours["steps"]:
            g = step.get("group_hit_tokens")
            if g and len(set(g)) > 1:
                seen["diverge"] += 1
            if step.get("shared_prefix_boundary"):
                seen["spb"] += 1
            if step["op"] == "admit" and not step["ok"]:
                seen["ok_false"] += 1
            seen["removed"] += sum(ev["type"] == "BlockRemoved" for ev in step["events"])
        for r in ours["final"]["requests"].values():
            if any(0 in g for g in r["block_ids_by_group"]):
                seen["null"] += 1
        if len(ours["final"]["cached_by_group"]) == 1:
            seen["windows_only"] += 1
    assert all(n >= 5 for n in seen.values()), seen


# ---- engine steps: vLLM's Scheduler with a hybrid KVCacheConfig ---------------------------------

ENGINE_STEP_SEEDS = range(150)


def _both_schedulers_hybrid(seed: int) -> list[dict]:
    return under_both_schedulers(random_raw_scenario(seed, hybrid=True))


@pytest.fixture(scope="module")
def hybrid_step_results(vllm_sched_oracle):
    scenarios = [
        at_release(
            parse_scenario_dict(raw, f"random hybrid engine steps seed {seed} ({raw['engine']['scheduler']})"),
            vllm_sched_oracle,
        )
        for seed in seeds_for(vllm_sched_oracle, ENGINE_STEP_SEEDS, 40)
        for raw in _both_schedulers_hybrid(seed)
    ]
    answers = vllm_sched_oracle.replay_many(sc.normalized(sc.engine.hash_seed or None) for sc in scenarios)
    return [(sc, replay(sc, record=False).to_json(), theirs) for sc, theirs in zip(scenarios, answers, strict=True)]


def test_random_hybrid_engine_step_scenarios_match_vllm(hybrid_step_results):
    differing = {}
    for sc, ours, theirs in hybrid_step_results:
        assert "error" not in theirs, (sc.source, theirs)
        diffs = compare(ours, theirs)
        if diffs:
            differing[sc.source] = diffs[:5]
    assert differing == {}, f"{len(differing)} of {len(hybrid_step_results)} scenarios differ: {differing}"


def test_random_hybrid_engine_steps_exercise_the_groups(hybrid_step_results):
    seen = {"diverge": 0, "spb": 0, "preempted": 0, "admit_failed": 0, "sync": 0, "async": 0}
    if hybrid_step_results[0][0].vllm != "0.31.0":
        return  # the coverage is the full 0.31.0 batch's
    for sc, ours, _ in hybrid_step_results:
        seen[sc.sched.scheduler] += 1
        for step in ours["steps"]:
            if step["op"] != "step":
                continue
            seen["diverge"] += sum(len(set(g)) > 1 for g in step["group_hit_tokens"].values())
            seen["spb"] += sum(v > 0 for v in step["shared_prefix_boundary"].values())
            seen["preempted"] += len(step["preempted"])
            seen["admit_failed"] += sum(not any(g) for g in step["new_block_ids_by_group"].values())
    assert all(n >= 10 for n in seen.values()), seen
