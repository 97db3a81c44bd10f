"""The engine-step oracle: vLLM 0.31.0's real Scheduler / AsyncScheduler, driven on the CPU.

Checks the oracle side alone (no mirror of ours is involved): vllm_sched_driver.py replays every
golden of tests/scenario/golden/engine_steps/ and 50 random engine-step scenarios without error;
its answers satisfy what can be checked from the scenario and the JSON alone
(engine_step_invariants.py); the goldens' `expect` tables hold; the recorded NAME.vllm.json
files are what vLLM answers today; bad input is refused; and a missing vLLM venv fails.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tests.conformance.engine_step_invariants import check_expects, check_invariants
from tests.conformance.oracle import VllmOracleError, compare
from tests.conformance.sched_oracle import VllmSchedOracle, golden_paths, oracle_kind, read_expected
from vllm_drivers.engine_step_scenarios import load_raw, normalize, random_scenario

pytestmark = pytest.mark.conformance

GOLDEN = golden_paths()
RANDOM_SEEDS = range(50)


@pytest.fixture(scope="module")
def random_answers(vllm_sched_oracle):
    scenarios = [random_scenario(seed) for seed in RANDOM_SEEDS]
    return list(zip(scenarios, vllm_sched_oracle.replay_many(scenarios), strict=True))


def test_the_goldens_exist():
    assert {p.stem for p in GOLDEN} >= {
        "hash_one_step_later_sync",
        "hash_one_step_later_async",
        "chunked_prefill_1200",
        "shared_budget",
        "preemption_sync",
        "preemption_async",
        "reset_running",
    }


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_golden_replays_through_vllm(vllm_sched_oracle, vllm_oracles, path: Path):
    raw = load_raw(path)
    scenario = normalize(raw)
    answer = vllm_oracles.get(oracle_kind(scenario), vllm_sched_oracle.vllm).replay(scenario)
    assert check_invariants(scenario, answer) == []
    assert check_expects(raw, scenario, answer) == []
    assert sum(len(step.get("expect", {})) for step in raw["steps"]) >= 10
    assert compare(answer, read_expected(path)) == [], "re-record with: python -m tests.conformance.sched_oracle record"


def test_the_invariants_accept_a_length_capped_finish_only_at_max_model_len(vllm_sched_oracle):
    path = next(p for p in GOLDEN if p.stem == "length_capped_at_max_model_len")
    scenario = normalize(load_raw(path))
    answer = vllm_sched_oracle.replay(scenario)
    assert check_invariants(scenario, answer) == []
    # R finishing one token short of max_model_len (and of its output) is wrong.
    short = copy.deepcopy(answer)
    step = next(st for st in short["steps"] if "R" in st.get("finished", []))
    assert step["outputs"].pop("R") == [505]
    assert "steps[8] (step): R finished with 5 of 20 tokens" in check_invariants(scenario, short)
    # So is the same finish under a larger max_model_len.
    roomier = copy.deepcopy(scenario)
    roomier["engine"]["max_model_len"] += 1
    assert "steps[8] (step): R finished with 6 of 20 tokens" in check_invariants(roomier, answer)


def test_the_async_scheduler_hashes_the_decode_block_one_step_later(vllm_sched_oracle):
    # Spec part 2 rule 72: block 1 of a 30-token prompt is stored in step 3 (sync), step 4 (async).
    def stored_in(name: str) -> list[int]:
        answer = vllm_sched_oracle.replay_toml(next(p for p in GOLDEN if p.stem == name))
        return [i for i, s in enumerate(answer["steps"]) for e in s["events"] if e["type"] == "BlockStored"]

    assert stored_in("hash_one_step_later_sync") == [1, 3]
    assert stored_in("hash_one_step_later_async") == [2, 4]


def test_random_scenarios_replay_without_error(random_answers):
    errors = [(s["engine"], a["error"]) for s, a in random_answers if "error" in a]
    assert errors == []


def test_random_answers_satisfy_the_invariants(random_answers):
    bad = {i: check_invariants(s, a)[:3] for i, (s, a) in enumerate(random_answers) if "error" not in a}
    assert {i: b for i, b in bad.items() if b} == {}


def test_random_scenarios_reach_what_they_are_for(random_answers):
    """The generator is worth its seeds: both schedulers, chunks, preemption, aborts, resets."""
    seen = {
        "sync": 0,
        "async": 0,
        "preempted": 0,
        "abort": 0,
        "reset refused": 0,
        "reset running": 0,
        "chunked": 0,
        "drained": 0,
        "hit": 0,
    }
    for scenario, answer in random_answers:
        seen[scenario["engine"]["scheduler"]] += 1
        steps = answer["steps"]
        seen["preempted"] += any(s.get("preempted") for s in steps)
        seen["abort"] += any(op["op"] == "abort" for op in scenario["ops"])
        seen["reset refused"] += any(s["op"] == "reset" and not s["ok"] for s in steps)
        seen["reset running"] += any(op["op"] == "reset" and op["running"] for op in scenario["ops"])
        prompts = {op["id"]: len(op["prompt"]) for op in scenario["ops"] if op["op"] == "arrive"}
        seen["chunked"] += any(
            0 < n < prompts[r] - 1 for s in steps for r, n in s.get("scheduled", {}).items() if n > 1
        )
        seen["drained"] += not answer["final"]["requests"]
        seen["hit"] += answer["final"]["stats"]["hits"] > 0
    assert min(seen.values()) >= 3, seen


def test_the_invariants_catch_a_wrong_answer(random_answers):
    scenario, answer = next((s, a) for s, a in random_answers if any(st.get("outputs") for st in a["steps"]))
    over = copy.deepcopy(answer)
    step = next(st for st in over["steps"] if st.get("scheduled"))
    step["scheduled"][next(iter(step["scheduled"]))] += scenario["engine"]["max_num_batched_tokens"]
    assert any("over the budget" in b for b in check_invariants(scenario, over))
    wrong = copy.deepcopy(answer)
    toks = next(st for st in wrong["steps"] if st.get("outputs"))["outputs"]
    rid = next(iter(toks))
    toks[rid] = [toks[rid][0] + 1]
    assert any("not a prefix of its output" in b for b in check_invariants(scenario, wrong))


def _one_request(**engine) -> dict:
    raw = {
        "engine": engine,
        "steps": [{"op": "arrive", "id": "A", "prompt": "0:20", "output": "1:3"}, {"op": "step"}],
    }
    return normalize(raw)


def test_vllm_refuses_a_budget_below_max_num_seqs(vllm_sched_oracle):
    answer = vllm_sched_oracle.replay(_one_request(max_num_batched_tokens=32), allow_error=True)
    assert "max_num_seqs" in answer["error"]  # the default max_num_seqs is 64


def test_the_driver_refuses_bad_ops(vllm_sched_oracle):
    never = _one_request()
    never["ops"].append({"op": "abort", "id": "B"})
    assert "never arrived" in vllm_sched_oracle.replay(never, allow_error=True)["error"]
    live = _one_request()
    live["ops"].append(dict(live["ops"][0]))
    assert "still live" in vllm_sched_oracle.replay(live, allow_error=True)["error"]
    # vLLM caps a request whose prompt + output pass max_model_len; it refuses a prompt that
    # reaches it (the mirror follows, issue 29).
    long = _one_request(max_model_len=20)
    assert "max_model_len" in vllm_sched_oracle.replay(long, allow_error=True)["error"]


def test_a_missing_vllm_venv_fails_never_skips(tmp_path):
    with pytest.raises(VllmOracleError, match="not installed"):
        VllmSchedOracle(python=tmp_path / "no-venv" / "bin" / "python").replay(_one_request())


def test_an_id_still_in_a_batch_in_flight_cannot_arrive_again(vllm_sched_oracle):
    # Async: A is aborted while a batch holding it is queued; vLLM would give that batch's token
    # to a new request A (update_from_output looks requests up by id), so the driver refuses.
    sc = _one_request()
    sc["ops"] += [{"op": "abort", "id": "A"}, dict(sc["ops"][0]), {"op": "step"}]
    assert "in a batch in flight" in vllm_sched_oracle.replay(sc, allow_error=True)["error"]
    sc["engine"]["scheduler"] = "sync"  # nothing is in flight between sync steps
    assert "error" not in vllm_sched_oracle.replay(sc)


# The driver's own checks (vectors, refusals, recorded answers) are 0.31.0's: pinned to it.
@pytest.fixture(scope="module")
def vllm_sched_oracle(vllm_oracles):
    from tests.conformance.oracle import RELEASES
    from tests.conformance.sched_oracle import VllmSchedOracle

    return vllm_oracles.get(VllmSchedOracle, RELEASES[0])
