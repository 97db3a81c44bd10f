"""Where hybrid KV cache groups (design section 8), speculative decoding (section 9) and the KV
connector (section 10) meet, against vLLM's own classes (0.31.0 and 0.33.0), field by field.

- Hybrid + speculative, engine steps: vLLM's real Scheduler with a SpeculativeConfig and a
  hybrid KVCacheConfig (vllm_sched_driver.py) on random hybrid speculative scenarios
  (spec_scenarios.random_spec_engine_steps(seed, hybrid=True)).
- Hybrid + speculative, manager level: vLLM's hybrid KVCacheManager with use_eagle and the
  lookahead slots (vllm_driver.py) on random draft scenarios with groups and on the manager-level
  generator's hybrid profile with `speculative` set. Rule 74's hybrid vector is pinned by the
  goldens hybrid_rule74_eagle_*.toml (test_conformance.py, test_engine_steps_conformance.py).
- KV connector + speculative: random connector scenarios with drafts; a scenario we refuse as
  not replayable must be refused by vLLM's side at the same step.
- KV connector + groups: one full-attention group matches, and so does one sliding-window
  group (random connector scenarios with every window and retention form: the external blocks
  below the window are null blocks, never popped), and so do hybrid groups (without
  `invalid_external_blocks`, bad input with more than one group as vLLM raises;
  tests/scenario/test_connector.py).
- KV connector (static, offloading) + speculative under the async scheduler: vLLM's
  AsyncScheduler with the connector (vllm_sched_async_connector_drafts_driver.py) on random
  static and offloading scenarios with drafts.
- Offloading + speculative: vLLM's own OffloadingConnector on random offloading scenarios with
  drafts.
- KV connector + speculative + hybrid groups, under both schedulers: where 0.33.0 keeps EAGLE's
  drop (a connector turns its lookahead hashes off) and reserves an async load's decode step
  inside the sequence.
"""

from __future__ import annotations

import copy
import random
import re

import pytest

from explorer.core.errors import BadInput
from explorer.scenario.engine import replay
from explorer.scenario.ops import Decode
from explorer.scenario.parse import parse_scenario_dict
from explorer.scenario.randgen import random_scenario
from explorer.scenario.records import DraftsVerified, EagleDropped
from tests.conformance.oracle import RELEASES, at_release, compare, refusal, seeds_for
from tests.conformance.sched_oracle import VllmSchedAsyncConnectorDraftsOracle, VllmSchedOracle
from tests.conformance.spec_scenarios import (
    METHODS,
    random_async_connector_spec_raw_scenario,
    random_async_offloading_spec_raw_scenario,
    random_connector_spec_raw_scenario,
    random_offloading_spec_raw_scenario,
    random_spec_engine_steps,
    random_spec_manager,
)
from tests.conformance.test_spec_decode_conformance import _compare_all
from vllm_drivers.engine_step_scenarios import _draw_groups, random_connector_raw_scenario

pytestmark = pytest.mark.conformance


@pytest.fixture(params=RELEASES)
def release(request) -> str:
    return request.param


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
        for s in seeds_for(vllm_sched_oracle, ENGINE_STEP_SEEDS, 40)
    ]
    assert {sc.speculative.method for sc in scenarios} == set(METHODS)
    differing, _ = _compare_all(vllm_sched_oracle, scenarios)
    assert differing == {}, f"{len(differing)} of {len(scenarios)} differ: {differing}"
    if vllm_sched_oracle.vllm != "0.31.0":
        return  # the coverage below is the full 0.31.0 batch's
    assert sum(_multi(sc) and _eagle(sc) for sc in scenarios) >= 60
    # Worth comparing: EAGLE drops in a hybrid lookup, drafts verified, padded admissions.
    seen = dict.fromkeys(("hybrid_drops", "verified", "placeholders", "window_hits"), 0)
    for sc in scenarios:
        for st in replay(sc).steps:
            if _multi(sc):
                seen["hybrid_drops"] += len(st.of(EagleDropped))
                seen["window_hits"] += sum(
                    any(h for h in hits[1:]) for hits in st.to_json().get("group_hit_tokens", {}).values()
                )
            seen["verified"] += sum(not d.placeholders for d in st.of(DraftsVerified))
            seen["placeholders"] += sum(d.placeholders for d in st.of(DraftsVerified))
    assert all(n >= 50 for n in seen.values()), seen


def test_random_hybrid_speculative_manager_scenarios_match_vllm(vllm_oracle):
    scenarios = [
        parse_scenario_dict(random_spec_manager(s, hybrid=True), f"hybrid spec manager seed {s}")
        for s in seeds_for(vllm_oracle, MANAGER_SEEDS, 40)
    ]
    differing, mine = _compare_all(vllm_oracle, scenarios)
    assert differing == {}, f"{len(differing)} of {len(scenarios)} differ: {differing}"
    if vllm_oracle.vllm != "0.31.0":
        return  # the coverage below is the full 0.31.0 batch's
    assert sum(_multi(sc) and _eagle(sc) for sc in scenarios) >= 40
    drafts = sum(1 for sc in scenarios for op in sc.ops if isinstance(op, Decode) and op.draft_tokens)
    hits = sum(1 for r in mine for st in r["steps"] if st.get("hit_tokens"))
    assert drafts >= 1000 and hits >= 100, (drafts, hits)


def test_manager_level_hybrid_generator_with_speculative_matches_vllm(vllm_oracle):
    scenarios = []
    for seed in seeds_for(vllm_oracle, RANDGEN_SEEDS, 30):
        spec = {"method": METHODS[seed % len(METHODS)], "num_speculative_tokens": 1 + seed % 4}
        raw = random_scenario(seed, 20 + seed % 50, profile="hybrid", engine={"speculative": spec})
        scenarios.append(parse_scenario_dict(raw, f"hybrid randgen seed {seed} with {spec}"))
    differing, mine = _compare_all(vllm_oracle, scenarios)
    assert differing == {}, f"{len(differing)} of {len(scenarios)} differ: {differing}"
    assert sum(1 for r in mine for st in r["steps"] if st.get("hit_tokens")) >= (100 if len(mine) >= 100 else 10)


def _compare_connector(oracle, raws: list[dict]) -> tuple[dict, int, list[dict]]:
    """(differing, refused, our answers): a scenario we refuse as not replayable (an order vLLM
    takes from a set, a position past `output`) must be refused by vLLM's side at the same step
    (ours counts from 1, the driver from 0), as test_connector_conformance.py does."""
    scenarios = [at_release(parse_scenario_dict(raw, raw["title"]), oracle) for raw in raws]
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
    raws = [random_connector_spec_raw_scenario(s) for s in seeds_for(vllm_sched_oracle, CONNECTOR_SEEDS, 40)]
    assert all(refusal(parse_scenario_dict(raw, raw["title"]), vllm_sched_oracle.vllm) is None for raw in raws)
    differing, refused, mine = _compare_connector(vllm_sched_oracle, raws)
    assert differing == {}, f"{len(differing)} of {len(raws) - refused} differ: {differing}"
    assert refused <= len(raws) // 10, refused
    loads = sum(1 for r in mine for st in r["steps"] for n in st.get("external", {}).values() if n)
    assert loads >= (200 if len(raws) == len(CONNECTOR_SEEDS) else 40), loads


def _with_hybrid_groups(raw: dict, seed: int) -> dict:
    """A copy of connector scenario ``raw`` with hybrid groups (full attention and windows in
    either order, two windows, a larger group block size, every retention form), a pool that
    holds the largest request alone in every group, and no `invalid_external_blocks` (bad input
    with more than one group, as vLLM raises)."""
    raw = copy.deepcopy(raw)
    rng = random.Random(f"connector-hybrid:{seed}")
    groups = _draw_groups(rng, raw["engine"]["block_size"])
    while len(groups["kv_cache_groups"]) == 1:
        groups = _draw_groups(rng, raw["engine"]["block_size"])
    raw["engine"].update(groups)
    sizes = [g.get("block_size", raw["engine"]["block_size"]) for g in groups["kv_cache_groups"]]
    arrivals = [st for st in raw["steps"] if st["op"] == "arrive"]
    largest = max(sum(-(-(len(r["prompt"]) + len(r["output"])) // bs) for bs in sizes) for r in arrivals)
    raw["engine"]["num_blocks"] = max(raw["engine"]["num_blocks"], largest + 1 + rng.randint(0, largest))
    for st in arrivals:
        st.pop("invalid_external_blocks", None)
    raw["title"] += ", hybrid groups"
    return raw


def test_random_connector_scenarios_with_one_full_attention_group_match_vllm(vllm_sched_oracle):
    raws = []
    for s in seeds_for(vllm_sched_oracle, range(60), 30):
        raw = copy.deepcopy(random_connector_raw_scenario(s))
        raw["engine"]["kv_cache_groups"] = [{"kind": "full_attention"}]
        raws.append(raw)
    differing, refused, _ = _compare_connector(vllm_sched_oracle, raws)
    assert differing == {}, f"{len(differing)} of {len(raws) - refused} differ: {differing}"
    assert refused <= max(len(raws) // 10, 4), refused  # 4 of the 30 seeds 0.33.0 compares


def test_random_connector_scenarios_with_one_window_group_match_vllm(vllm_sched_oracle):
    raws = []
    for s in seeds_for(vllm_sched_oracle, range(60), 30):
        raw = copy.deepcopy(random_connector_raw_scenario(s))
        rng = random.Random(f"connector-window:{s}")
        bs = raw["engine"]["block_size"]
        window = rng.choice((1, bs, bs + 1, 2 * bs, 5 * bs))
        raw["engine"]["kv_cache_groups"] = [{"kind": "sliding_window", "sliding_window": window}]
        raw["engine"]["prefix_cache_retention_interval"] = rng.choice((0, "dense", bs * rng.randint(1, 3)))
        raw["title"] += f", one window group of {window}"
        raws.append(raw)
    differing, refused, mine = _compare_connector(vllm_sched_oracle, raws)
    assert differing == {}, f"{len(differing)} of {len(raws) - refused} differ: {differing}"
    # Refused on both sides at the same step: an invalid index on a null entry (block 0, which
    # every request past its window shares) fails several requests in one step, as a set orders.
    assert refused <= len(raws) // 6, refused
    # External tokens below the window: the case that pads the table with null blocks.
    loads = sum(1 for r in mine for st in r["steps"] for n in st.get("external", {}).values() if n)
    assert loads >= (60 if len(raws) == 60 else 20), loads


def test_random_connector_scenarios_with_hybrid_groups_match_vllm(vllm_sched_oracle):
    """Full attention and windows in either order, two windows, a larger group block size,
    every retention form; no `invalid_external_blocks` (bad input with more than one group)."""
    raws = [
        _with_hybrid_groups(random_connector_raw_scenario(s), s) for s in seeds_for(vllm_sched_oracle, range(60), 30)
    ]
    differing, refused, mine = _compare_connector(vllm_sched_oracle, raws)
    assert differing == {}, f"{len(differing)} of {len(raws) - refused} differ: {differing}"
    assert refused <= len(raws) // 6, refused
    loads = sum(1 for r in mine for st in r["steps"] for n in st.get("external", {}).values() if n)
    assert loads >= (60 if len(raws) == 60 else 20), loads


def test_random_offloading_scenarios_with_drafts_match_vllm(vllm_sched_oracle):
    """vLLM's own OffloadingConnector with speculative decoding (every method, 1-4 drafts, the
    sync scheduler): the CPU tier stores prompt blocks only, under pressure, and gives back what
    the GPU cache lost, while drafts are verified and rolled back."""
    raws = [random_offloading_spec_raw_scenario(s) for s in seeds_for(vllm_sched_oracle, range(60), 30)]
    differing, refused, mine = _compare_connector(vllm_sched_oracle, raws)
    assert differing == {}, f"{len(differing)} of {len(raws) - refused} differ: {differing}"
    assert refused <= len(raws) // 6, refused
    loads = sum(1 for r in mine for st in r["steps"] for n in st.get("external", {}).values() if n)
    traces = [replay(parse_scenario_dict(raw, raw["title"])) for raw in raws[:20]]
    rolled_back = sum(1 for t in traces for st in t.steps for d in st.of(DraftsVerified) if d.num_rejected)
    assert loads >= 20 and rolled_back >= 20, (loads, rolled_back)


def _replayed(raws: list[dict]) -> list:
    """Our traces of the scenarios we replay (the others are refused on both sides at the same
    step, _compare_connector)."""
    traces = []
    for raw in raws:
        try:
            traces.append(replay(parse_scenario_dict(raw, raw["title"])))
        except BadInput:
            continue
    return traces


@pytest.mark.parametrize("scheduler", ["sync", "async"])
def test_random_connector_scenarios_with_drafts_and_hybrid_groups_match_vllm(vllm_oracles, release, scheduler):
    """The static connector, drafts and hybrid groups together: with a connector 0.33.0 keeps
    EAGLE's drop (no lookahead hashes), so its hybrid drop (eagle_lookup_to_hashed_length,
    eagle_junction_block_below) and an async load's reservation with drafts
    (spec_step_within_sequence) are compared here, under both schedulers."""
    kind = VllmSchedOracle if scheduler == "sync" else VllmSchedAsyncConnectorDraftsOracle
    oracle = vllm_oracles.get(kind, release)
    draw = random_connector_spec_raw_scenario if scheduler == "sync" else random_async_connector_spec_raw_scenario
    raws = [_with_hybrid_groups(draw(s), s) for s in seeds_for(oracle, range(60), 40)]
    assert all(refusal(parse_scenario_dict(raw, raw["title"]), oracle.vllm) is None for raw in raws)
    differing, refused, mine = _compare_connector(oracle, raws)
    assert differing == {}, f"{len(differing)} of {len(raws) - refused} differ: {differing}"
    assert refused <= len(raws) // 6, refused
    loads = sum(1 for r in mine for st in r["steps"] for n in st.get("external", {}).values() if n)
    traces = _replayed(raws)
    rolled_back = sum(1 for t in traces for st in t.steps for d in st.of(DraftsVerified) if d.num_rejected)
    eagle = sum(1 for t in traces for st in t.steps if st.of(EagleDropped))
    assert loads >= 40 and rolled_back >= 40 and eagle >= 10, (loads, rolled_back, eagle)


@pytest.mark.parametrize("kind", ["static", "offloading"])
def test_random_connector_scenarios_with_drafts_under_async_match_vllm(vllm_async_connector_drafts_oracle, kind):
    """A KV connector with speculative decoding under the async scheduler (vLLM's default):
    loads (sync, async, failing), the CPU tier, placeholders and ``-1`` drafts together."""
    oracle = vllm_async_connector_drafts_oracle
    draw = random_async_connector_spec_raw_scenario if kind == "static" else random_async_offloading_spec_raw_scenario
    raws = [draw(s) for s in seeds_for(oracle, range(40), 12)]
    assert all(refusal(parse_scenario_dict(raw, raw["title"]), oracle.vllm) is None for raw in raws)
    differing, refused, mine = _compare_connector(oracle, raws)
    assert differing == {}, f"{len(differing)} of {len(raws) - refused} differ: {differing}"
    assert refused <= len(raws) // 10, refused
    loads = sum(1 for r in mine for st in r["steps"] for n in st.get("external", {}).values() if n)
    rolled_back = sum(1 for t in _replayed(raws) for st in t.steps for d in st.of(DraftsVerified) if d.num_rejected)
    assert loads >= 10 and rolled_back >= 10, (loads, rolled_back)
