"""Where hybrid KV cache groups (design section 8), speculative decoding (section 9) and the KV
connector (section 10) meet, against vLLM 0.31.0's own classes, field by field.

- Hybrid + speculative, engine steps: vLLM's real Scheduler with a SpeculativeConfig and a
  hybrid KVCacheConfig (vllm_sched_driver.py) on random hybrid speculative scenarios
  (spec_scenarios.random_spec_engine_steps(seed, hybrid=True)).
- Hybrid + speculative, manager level: vLLM's hybrid KVCacheManager with use_eagle and the
  lookahead slots (vllm_driver.py) on random draft scenarios with groups and on the manager-level
  generator's hybrid profile with `speculative` set. Rule 74's hybrid vector is pinned by the
  goldens hybrid_rule74_eagle_*.toml (test_conformance.py, test_engine_steps_conformance.py).
- KV connector + speculative: random connector scenarios with drafts; a scenario we refuse as
  not replayable must be refused by vLLM's side at the same step.
- KV connector + groups: one full-attention group matches; more groups or a window group are
  bad input (tests/scenario/test_connector.py), as vLLM's window paths are not modelled.
"""

from __future__ import annotations

import copy
import re

import pytest

from explorer.core.errors import BadInput
from explorer.scenario.engine import replay
from explorer.scenario.parse import parse_scenario_dict
from explorer.scenario.randgen import random_scenario
from tests.conformance.engine_step_scenarios import random_connector_raw_scenario
from tests.conformance.oracle import compare
from tests.conformance.spec_scenarios import (
    METHODS,
    random_connector_spec_raw_scenario,
    random_spec_engine_steps,
    random_spec_manager,
)
from tests.conformance.test_spec_decode_conformance import _compare_all

pytestmark = pytest.mark.conformance

ENGINE_STEP_SEEDS = range(200)
MANAGER_SEEDS = range(150)
RANDGEN_SEEDS = range(100)
CONNECTOR_SEEDS = range(150)


def _multi(scenario) -> bool:
    return scenario.groups is not None and len(scenario.groups.groups) > 1


def _eagle(scenario) -> bool:
    return scenario.speculative.use_eagle_block_drop()


def test_random_hybrid_speculative_engine_steps_match_vllm(vllm_sched_oracle):
    scenarios = [
        parse_scenario_dict(random_spec_engine_steps(s, hybrid=True), f"hybrid spec engine steps seed {s}")
        for s in ENGINE_STEP_SEEDS
    ]
    assert {sc.speculative.method for sc in scenarios} == set(METHODS)
    assert sum(_multi(sc) and _eagle(sc) for sc in scenarios) >= 60
    differing, _ = _compare_all(vllm_sched_oracle, scenarios)
    assert differing == {}, f"{len(differing)} of {len(scenarios)} differ: {differing}"
    # Worth comparing: EAGLE drops in a hybrid lookup, drafts verified, padded admissions.
    seen = dict.fromkeys(("hybrid_drops", "verified", "placeholders", "window_hits"), 0)
    for sc in scenarios:
        for st in replay(sc).steps:
            if _multi(sc):
                seen["hybrid_drops"] += len(st.eagle_dropped)
                seen["window_hits"] += sum(
                    any(h for h in hits[1:]) for hits in st.to_json().get("group_hit_tokens", {}).values()
                )
            seen["verified"] += sum(not d.placeholders for d in st.drafts)
            seen["placeholders"] += sum(d.placeholders for d in st.drafts)
    assert all(n >= 50 for n in seen.values()), seen


def test_random_hybrid_speculative_manager_scenarios_match_vllm(vllm_oracle):
    scenarios = [
        parse_scenario_dict(random_spec_manager(s, hybrid=True), f"hybrid spec manager seed {s}") for s in MANAGER_SEEDS
    ]
    assert sum(_multi(sc) and _eagle(sc) for sc in scenarios) >= 40
    differing, mine = _compare_all(vllm_oracle, scenarios)
    assert differing == {}, f"{len(differing)} of {len(scenarios)} differ: {differing}"
    drafts = sum(1 for sc in scenarios for op in sc.ops if op.draft_tokens)
    hits = sum(1 for r in mine for st in r["steps"] if st.get("hit_tokens"))
    assert drafts >= 1000 and hits >= 100, (drafts, hits)


def test_manager_level_hybrid_generator_with_speculative_matches_vllm(vllm_oracle):
    scenarios = []
    for seed in RANDGEN_SEEDS:
        spec = {"method": METHODS[seed % len(METHODS)], "num_speculative_tokens": 1 + seed % 4}
        raw = random_scenario(seed, 20 + seed % 50, profile="hybrid", engine={"speculative": spec})
        scenarios.append(parse_scenario_dict(raw, f"hybrid randgen seed {seed} with {spec}"))
    differing, mine = _compare_all(vllm_oracle, scenarios)
    assert differing == {}, f"{len(differing)} of {len(scenarios)} differ: {differing}"
    assert sum(1 for r in mine for st in r["steps"] if st.get("hit_tokens")) >= 100


def _compare_connector(oracle, raws: list[dict]) -> tuple[dict, int, list[dict]]:
    """(differing, refused, our answers): a scenario we refuse as not replayable (an order vLLM
    takes from a set, a position past `output`) must be refused by vLLM's side at the same step
    (ours counts from 1, the driver from 0), as test_connector_conformance.py does."""
    scenarios = [parse_scenario_dict(raw, raw["title"]) for raw in raws]
    answers = oracle.replay_many(sc.normalized(sc.engine.hash_seed or None) for sc in scenarios)
    differing, refused, mine = {}, 0, []
    for sc, theirs in zip(scenarios, answers, strict=True):
        try:
            ours = replay(sc, record=False).to_json()
        except BadInput as exc:
            m = re.search(r"step (\d+) \(step\)", str(exc))
            t = re.search(r"step (\d+) \(step\)", theirs.get("error", ""))
            assert m and t and int(m.group(1)) == int(t.group(1)) + 1, (sc.source, str(exc), theirs)
            refused += 1
            continue
        assert "error" not in theirs, (sc.source, theirs["error"])
        mine.append(ours)
        diffs = compare(ours, theirs)
        if diffs:
            differing[sc.source] = diffs[:5]
    return differing, refused, mine


def test_random_connector_scenarios_with_drafts_match_vllm(vllm_sched_oracle):
    raws = [random_connector_spec_raw_scenario(s) for s in CONNECTOR_SEEDS]
    differing, refused, mine = _compare_connector(vllm_sched_oracle, raws)
    assert differing == {}, f"{len(differing)} of {len(raws) - refused} differ: {differing}"
    assert refused <= len(raws) // 10, refused
    loads = sum(1 for r in mine for st in r["steps"] for n in st.get("external", {}).values() if n)
    assert loads >= 200, loads


def test_random_connector_scenarios_with_one_full_attention_group_match_vllm(vllm_sched_oracle):
    raws = []
    for s in range(60):
        raw = copy.deepcopy(random_connector_raw_scenario(s))
        raw["engine"]["kv_cache_groups"] = [{"kind": "full_attention"}]
        raws.append(raw)
    differing, refused, _ = _compare_connector(vllm_sched_oracle, raws)
    assert differing == {}, f"{len(differing)} of {len(raws) - refused} differ: {differing}"
    assert refused <= len(raws) // 10, refused
