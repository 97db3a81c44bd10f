"""The offloading connector with hybrid KV cache groups (design sections 8 and 10) against
vLLM 0.31.0's and 0.33.0's own Scheduler with a hybrid KVCacheConfig and their real
``OffloadingConnector`` (vllm_sched_offloading_groups_driver.py).

Random scenarios (``random_offloading_groups_raw_scenario``: full attention and windows in
either order, sometimes two windows or a coarser group, every retention form; a CPU tier
that is sometimes too small; prompts repeated after the GPU prefix cache forgot them) under
both schedulers, compared field by field with zero differences: 40 seeds under 0.31.0, 12
under 0.33.0; the same with EAGLE drafts (12 and 6 seeds); and the one case vLLM fails on
(a store naming a window block twice after a reset) stopping both replays at the same step.
The goldens tests/scenario/golden/engine_steps/offloading_groups_*.toml run
with the other engine-step goldens in test_engine_steps_conformance.py; here: that they exist
and go to this driver. A missing vLLM fails, as the whole tier does.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest

from explorer.errors import BadInput
from explorer.scenario.connector_reports import CpuLoad, CpuStore
from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario, parse_scenario_dict
from explorer.scenario.records import DraftsVerified
from tests.conformance.fidelity_scenarios import (
    random_offloading_groups_raw_scenario,
    random_offloading_groups_spec_raw_scenario,
)
from tests.conformance.oracle import RELEASES, at_release, compare, refusal
from tests.conformance.sched_oracle import VllmSchedOffloadingGroupsOracle, golden_paths, oracle_kind
from vllm_drivers.engine_step_scenarios import under_both_schedulers

pytestmark = pytest.mark.conformance

SEEDS = {"0.31.0": range(40), "0.33.0": range(12)}
GOLDENS = {"offloading_groups_window_back_from_cpu", "offloading_groups_reachable_window_stores"}


@pytest.fixture(scope="module", params=RELEASES)
def groups_oracle(request, vllm_oracles):
    return vllm_oracles.get(VllmSchedOffloadingGroupsOracle, request.param)


def scenarios(release: str) -> list:
    out = []
    for seed in SEEDS[release]:
        for r in under_both_schedulers(random_offloading_groups_raw_scenario(seed)):
            out.append(parse_scenario_dict(r, f"random offloading groups seed {seed} ({r['engine']['scheduler']})"))
    return out


def test_there_are_offloading_groups_goldens_and_they_go_to_the_groups_driver():
    paths = {p.stem: p for p in golden_paths() if p.stem.startswith("offloading_groups_")}
    assert set(paths) >= GOLDENS
    for p in paths.values():
        assert oracle_kind(load_scenario(p)) is VllmSchedOffloadingGroupsOracle, p
    assert oracle_kind(scenarios("0.31.0")[0]) is VllmSchedOffloadingGroupsOracle


def _window_group_ids(sc) -> set[int]:
    return {i for i, g in enumerate(sc.groups.groups) if g.kind == "sliding_window"}


def test_random_offloading_groups_scenarios_match_vllm(groups_oracle):
    scs = [at_release(sc, groups_oracle) for sc in scenarios(groups_oracle.vllm)]
    answers = groups_oracle.replay_many(sc.normalized(sc.engine.hash_seed or None) for sc in scs)
    differing = {}
    seen: Counter[str] = Counter()
    for sc, theirs in zip(scs, answers, strict=True):
        assert "error" not in theirs, (sc.source, theirs)
        trace = replay(sc)
        diffs = compare(trace.to_json(), theirs)
        if diffs:
            differing[sc.source] = diffs[:5]
        windows = _window_group_ids(sc)
        stored: Counter[int] = Counter()
        for step in trace.steps:
            es = step.engine_step
            if es is None:
                continue
            for report in es.connector:
                if isinstance(report, CpuLoad):
                    seen["cpu_load_with_a_window_group"] += bool(windows)
                elif isinstance(report, CpuStore):
                    seen["store_refused" if report.refused else "cpu_store"] += 1
                    seen["cpu_evicted"] += bool(report.cpu_evicted)
            for e in step.events:
                if getattr(e, "medium", None) == "CPU" and type(e).__name__ == "BlockStored":
                    stored[e.group_idx] += 1
                    seen["cpu_stored_window_chunk"] += e.group_idx in windows
        full = [g for g in range(len(sc.groups.groups)) if g not in windows]
        # a window group stored fewer chunks than the full-attention group: only reachable ones
        seen["window_stores_fewer"] += any(stored[w] < stored[f] for w in windows for f in full)
    assert differing == {}, f"{len(differing)} of {len(scs)} scenarios differ: {differing}"
    least = 10 if groups_oracle.vllm == "0.31.0" else 3
    for what in ("cpu_load_with_a_window_group", "cpu_store", "store_refused", "cpu_evicted", "window_stores_fewer"):
        assert seen[what] >= least, seen
    assert seen["cpu_stored_window_chunk"] >= 10 * least, seen


def _stopped_at(error: str) -> int:
    """The op index an error names: our labels count from 1, the driver's from 0."""
    found = re.search(r"(: )?step (\d+) \(", error)
    assert found is not None, error
    return int(found.group(2)) - (1 if found.group(1) else 0)


def test_a_store_naming_a_window_block_twice_stops_both_replays_at_the_same_step(groups_oracle):
    """Seed 90 (sync): after a reset with external, R2's stores restart from its first chunk
    while its window group lists block 40 twice (freed below the window, given back to R2
    later); vLLM raises KeyError when that store completes, and the explorer refuses the same
    step in one line."""
    raw = next(
        r
        for r in under_both_schedulers(random_offloading_groups_raw_scenario(90))
        if r["engine"]["scheduler"] == "sync"
    )
    sc = at_release(parse_scenario_dict(raw, "seed 90 (sync)"), groups_oracle)
    theirs = groups_oracle.replay(sc.normalized(sc.engine.hash_seed or None), allow_error=True)
    try:
        replay(sc, record=False)
        mine = None
    except BadInput as exc:
        mine = str(exc)
    if "error" not in theirs:  # a release that runs it: the replays agree
        assert mine is None
        assert compare(replay(sc).to_json(), theirs) == []
        return
    assert "KeyError" in theirs["error"], theirs["error"]
    assert mine is not None and "names one window-group block twice" in mine and "\n" not in mine
    assert _stopped_at(mine) == _stopped_at(theirs["error"])


SPEC_SEEDS = {"0.31.0": range(12), "0.33.0": range(6)}


def test_random_offloading_groups_scenarios_with_drafts_match_vllm(groups_oracle):
    """With EAGLE drafts too, under both schedulers and both releases."""
    scs = []
    for seed in SPEC_SEEDS[groups_oracle.vllm]:
        for r in under_both_schedulers(random_offloading_groups_spec_raw_scenario(seed)):
            sc = parse_scenario_dict(
                r, f"random offloading groups with drafts seed {seed} ({r['engine']['scheduler']})"
            )
            assert refusal(sc, groups_oracle.vllm) is None, sc.source
            scs.append(at_release(sc, groups_oracle))
    answers = groups_oracle.replay_many(sc.normalized(sc.engine.hash_seed or None) for sc in scs)
    differing, rolled_back, loads = {}, 0, 0
    for sc, theirs in zip(scs, answers, strict=True):
        assert "error" not in theirs, (sc.source, theirs)
        trace = replay(sc)
        diffs = compare(trace.to_json(), theirs)
        if diffs:
            differing[sc.source] = diffs[:5]
        rolled_back += sum(1 for st in trace.steps for d in st.of(DraftsVerified) if d.num_rejected)
        loads += sum(
            1 for st in trace.steps if st.engine_step for r in st.engine_step.connector if r.kind == "cpu_load"
        )
    assert differing == {}, f"{len(differing)} of {len(scs)} scenarios differ: {differing}"
    assert rolled_back >= 10 and loads >= 2, (rolled_back, loads)
