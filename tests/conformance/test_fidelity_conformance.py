"""The corners where the scheduler mirror once crashed, undercounted or refused what vLLM runs
(design sections 7, 9, 10), against vLLM 0.31.0's and 0.33.0's own Scheduler and connectors.

The goldens of these cases live with the others in tests/scenario/golden/engine_steps/
(spec_padded_admission_no_room, spec_accepted_past_output, offloading_reused_id,
length_capped_at_max_model_len, spec_threshold_within_drafts) and are compared field by field
by test_engine_steps_conformance.py. Here: the random profiles of fidelity_scenarios.py, and the
scenarios vLLM itself fails on, which the mirror refuses as bad input at the same step.
"""

from __future__ import annotations

import re

import pytest

from explorer.core.errors import BadInput
from explorer.scenario.engine import replay
from explorer.scenario.parse import parse_scenario_dict
from explorer.scenario.parse_release import with_release
from tests.conformance.fidelity_scenarios import (
    random_length_capped_raw_scenario,
    random_offloading_reuse_raw_scenario,
    random_spec_threshold_raw_scenario,
    random_tight_spec_raw_scenario,
)
from tests.conformance.oracle import at_release, compare

pytestmark = pytest.mark.conformance

# A modest count per profile for CI; run more by hand when the scheduler changes.
SEEDS = range(20)
PROFILES = {
    "tight_spec": random_tight_spec_raw_scenario,
    "length_capped": random_length_capped_raw_scenario,
    "offloading_reuse": random_offloading_reuse_raw_scenario,
    "spec_threshold": random_spec_threshold_raw_scenario,
}


def _ours(raw: dict, release: str | None = None) -> dict:
    """Our replay JSON under ``release`` (None: the scenario's own), or ``{"error": ...}`` when
    the replay refused a step as bad input."""
    try:
        return replay(with_release(parse_scenario_dict(raw, raw["title"]), release), record=False).to_json()
    except BadInput as e:
        return {"error": str(e)}


def _failing_step(error: str) -> int | None:
    """The op index an error names: our labels count from 1, the driver's from 0."""
    found = re.search(r"(: )?step (\d+) \(", error)
    if found is None:
        return None
    return int(found.group(2)) - (1 if found.group(1) else 0)


def differences(raw: dict, theirs: dict, release: str | None = None) -> list[str]:
    """What differs: the replays, or where (and whether) each side stopped."""
    mine = _ours(raw, release)
    if "error" in mine or "error" in theirs:
        same_stop = "error" in mine and "error" in theirs and _failing_step(mine["error"]) is not None
        if same_stop and _failing_step(mine["error"]) == _failing_step(theirs["error"]):
            return []
        return [f"ours: {mine.get('error', 'ran')}; vLLM: {theirs.get('error', 'ran')}"]
    return compare(mine, theirs)


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_random_fidelity_profiles_match_vllm(vllm_sched_oracle, profile: str):
    release = vllm_sched_oracle.vllm
    raws = [PROFILES[profile](seed) for seed in SEEDS]
    scenarios = [at_release(parse_scenario_dict(raw, raw["title"]), vllm_sched_oracle) for raw in raws]
    answers = vllm_sched_oracle.replay_many(sc.normalized(sc.engine.hash_seed or None) for sc in scenarios)
    differing = {
        raw["title"]: d[:3]
        for raw, theirs in zip(raws, answers, strict=True)
        if (d := differences(raw, theirs, release))
    }
    assert differing == {}, f"{len(differing)} of {len(raws)} differ: {differing}"


def test_the_profiles_stop_only_at_vllm_s_threshold_assert():
    """The profiles are valid by construction; only the threshold one may meet vLLM's assert
    on a cut padded admission, and some of its seeds do."""
    stopped = {name: sum("error" in _ours(make(seed)) for seed in SEEDS) for name, make in PROFILES.items()}
    assert {name: n for name, n in stopped.items() if name != "spec_threshold"} == dict.fromkeys(
        set(PROFILES) - {"spec_threshold"}, 0
    )
    assert 0 < stopped["spec_threshold"] < len(SEEDS), stopped


def _offloading(steps: list[dict], scheduler: str = "sync") -> dict:
    return {
        "title": "offloading corner",
        "engine": {
            "block_size": 4,
            "num_blocks": 20,
            "scheduler": scheduler,
            "kv_connector": {"kind": "offloading", "cpu_blocks": 8},
        },
        "steps": steps,
    }


STEP = {"op": "step"}
# R is reused once its stores are done (fine), then again right after it finishes, while the
# earlier R's last stores are still to be made.
REUSED_TOO_SOON = _offloading(
    [
        {"op": "arrive", "id": "R", "prompt": list(range(9)), "output": [100]},
        STEP,
        STEP,
        {"op": "arrive", "id": "R", "prompt": list(range(9)), "output": [101, 102]},
        STEP,
        STEP,
        {"op": "arrive", "id": "R", "prompt": list(range(9)), "output": [101, 102]},
        *[STEP] * 6,
    ]
)
# A reset with running preempts B, whose re-admission loads from the CPU tier in the same step.
RESET_THEN_CPU_HIT = _offloading(
    [
        {"op": "arrive", "id": "A", "prompt": list(range(13)), "output": [100]},
        *[STEP] * 4,
        {"op": "arrive", "id": "B", "prompt": [*range(13), 50, 51], "output": [101, 102, 103, 104]},
        STEP,
        STEP,
        {"op": "reset", "running": True},
        *[STEP] * 8,
    ]
)


@pytest.mark.parametrize(
    ("raw", "words", "fails_in_033"),
    [
        (REUSED_TOO_SOON, "the KV connector still tracks the earlier request", True),
        # 0.31.0 asserts that a preempted request's jobs are stores (offloading/scheduler.py:
        # 1793); 0.33.0 leaves this step's load jobs out of the flush and runs it (:2137-2151).
        (RESET_THEN_CPU_HIT, "loads from the CPU tier in the same step", False),
    ],
    ids=["reused_id_too_soon", "reset_running_then_cpu_hit"],
)
def test_what_vllm_fails_on_is_one_line_of_bad_input(vllm_sched_oracle, raw: dict, words: str, fails_in_033: bool):
    release = vllm_sched_oracle.vllm
    sc = at_release(parse_scenario_dict(raw, raw["title"]), vllm_sched_oracle)
    theirs = vllm_sched_oracle.replay(sc.normalized(None), allow_error=True)
    mine = _ours(raw, release)
    if release == "0.33.0" and not fails_in_033:
        # what this release runs, we replay, with vLLM's own answer
        assert "error" not in theirs and "error" not in mine, (theirs.get("error"), mine.get("error"))
        assert compare(mine, theirs) == []
        return
    assert "error" in mine and words in mine["error"] and "\n" not in mine["error"]
    assert "vLLM raised" in theirs.get("error", ""), theirs.get("error")
    # vLLM fails at the refused step or later (a reused id fails when the earlier stores land).
    mine_at, theirs_at = _failing_step(mine["error"]), _failing_step(theirs["error"])
    assert mine_at is not None and theirs_at is not None and theirs_at >= mine_at


@pytest.mark.parametrize(
    ("engine", "arrive", "words"),
    [
        (
            {
                "kv_cache_groups": [{"kind": "full_attention"}, {"kind": "sliding_window", "sliding_window": 8}],
                "kv_connector": {"kind": "static"},
            },
            {"external_tokens": 4, "invalid_external_blocks": [0]},
            "with more than one KV cache group vLLM cannot map a load's invalid blocks back to requests and raises",
        ),
    ],
    ids=["hybrid_invalid_blocks"],
)
def test_combinations_not_modelled_are_refused_in_one_line(engine: dict, arrive: dict, words: str):
    raw = {
        "engine": {"scheduler": "sync", **engine},
        "steps": [{"op": "arrive", "id": "A", "prompt": "0:8", "output": [1], **arrive}, STEP],
    }
    with pytest.raises(BadInput) as info:
        parse_scenario_dict(raw, "combination")
    assert words in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    "engine",
    [
        {
            "kv_cache_groups": [{"kind": "full_attention"}, {"kind": "sliding_window", "sliding_window": 8}],
            "kv_connector": {"kind": "static"},
        },
        {"kv_cache_groups": [{"kind": "sliding_window", "sliding_window": 8}], "kv_connector": {"kind": "static"}},
        {
            "kv_connector": {"kind": "offloading", "cpu_blocks": 8},
            "speculative": {"method": "eagle", "num_speculative_tokens": 2},
        },
        {
            "kv_cache_groups": [{"kind": "sliding_window", "sliding_window": 8}],
            "kv_connector": {"kind": "offloading", "cpu_blocks": 8},
        },
        {
            "kv_cache_groups": [{"kind": "full_attention"}, {"kind": "sliding_window", "sliding_window": 8}],
            "kv_connector": {"kind": "offloading", "cpu_blocks": 8},
        },
    ],
    ids=[
        "connector_hybrid",
        "static_single_window",
        "offloading_spec",
        "offloading_single_window",
        "offloading_hybrid",
    ],
)
def test_combinations_vllm_runs_are_replayed(engine: dict):
    """Once refused, now mirrored (compared with vLLM in test_feature_joins.py,
    test_offloading_groups_conformance.py and the goldens connector_hybrid_groups,
    connector_one_window_group, offloading_with_drafts, offloading_groups_*)."""
    raw = {
        "title": "combination",
        "engine": {"scheduler": "sync", **engine},
        "steps": [{"op": "arrive", "id": "A", "prompt": "0:8", "output": [1, 2]}, STEP, STEP, STEP],
    }
    mine = _ours(raw)
    assert "error" not in mine, mine.get("error")
    assert [st["finished"] for st in mine["steps"][1:]].count(["A"]) == 1


def test_expect_ok_on_a_step_is_checked():
    raw = {
        "engine": {"scheduler": "sync"},
        "steps": [
            {"op": "arrive", "id": "A", "prompt": "0:8", "output": [1]},
            {"op": "step", "expect": {"ok": True}},
            {"op": "step", "expect": {"ok": False}},
        ],
    }
    failures = replay(parse_scenario_dict(raw, "ok on a step")).expect_failures
    assert failures == ["step 3 (step): expected ok = False, got True"]


def test_a_prompt_of_max_model_len_is_refused_a_longer_output_is_not():
    base = {"engine": {"scheduler": "sync", "max_model_len": 16}}
    long_output = {**base, "steps": [{"op": "arrive", "id": "A", "prompt": "0:8", "output": "100:116"}, STEP]}
    parse_scenario_dict(long_output, "capped")
    full_prompt = {**base, "steps": [{"op": "arrive", "id": "A", "prompt": "0:16", "output": [1]}, STEP]}
    with pytest.raises(BadInput, match="at least max_model_len = 16: no room to generate"):
        parse_scenario_dict(full_prompt, "full prompt")


def _capped(raw: dict) -> int:
    """How many requests of ``raw`` our replay ended at max_model_len with output still to come."""
    max_len = raw["engine"]["max_model_len"]
    replayed = _ours(raw)
    emitted: dict[str, int] = {}
    capped = 0
    spec: dict[str, dict] = {}  # each id's latest arrival
    for op, step in zip(raw["steps"], replayed["steps"], strict=True):
        if op["op"] == "arrive":
            spec[op["id"]] = op
            emitted[op["id"]] = 0
        for rid, toks in (step.get("outputs") or {}).items():
            emitted[rid] = emitted.get(rid, 0) + len(toks)
        for rid in step.get("finished") or ():
            req = spec[rid]
            if len(req["prompt"]) + emitted[rid] == max_len and emitted[rid] < len(req["output"]):
                capped += 1
    return capped


def test_the_length_capped_profile_caps_requests():
    """The profile meets what it is for: requests finished at max_model_len before their output
    ran out (vLLM's FINISHED_LENGTH_CAPPED), in most seeds."""
    per_seed = [_capped(random_length_capped_raw_scenario(seed)) for seed in SEEDS]
    assert sum(n > 0 for n in per_seed) >= len(SEEDS) // 2, per_seed
