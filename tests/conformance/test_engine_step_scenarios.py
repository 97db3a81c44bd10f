"""The test-side engine-step loader and random generator (no vLLM needed)."""

from __future__ import annotations

import pytest

from tests.conformance.sched_oracle import golden_paths
from vllm_drivers.engine_step_scenarios import (
    ScenarioInputError,
    load_toml,
    normalize,
    parse_tokens,
    random_raw_scenario,
    random_scenario,
)


def test_token_specs():
    assert len(parse_tokens("0:1000, 7*200", "p")) == 1200
    assert parse_tokens("5, 1:3, 9*2", "p") == [5, 1, 2, 9, 9]
    assert parse_tokens([3, 4], "p") == [3, 4]
    for bad in ("", "3:1", "1:2:3", "x", "-1", "2147483648", "１"):
        with pytest.raises(ScenarioInputError):
            parse_tokens(bad, "p")
    with pytest.raises(ScenarioInputError):
        parse_tokens([1, True], "p")


def _arrive(**extra):
    return {"op": "arrive", "id": "A", "prompt": "0:20", "output": "1:3", **extra}


def test_normalize_fills_the_engine_defaults_and_the_ops():
    sc = normalize(
        {
            "engine": {"scheduler": "sync"},
            "steps": [
                _arrive(lora="x"),
                {"op": "step"},
                {"op": "abort", "id": "A"},
                {"op": "reset", "running": True},
                {**_arrive(lora="y"), "id": "B"},
                {**_arrive(lora="x"), "id": "C"},
            ],
        }
    )
    assert sc["kind"] == "engine_steps"
    eng = sc["engine"]
    assert (eng["scheduler"], eng["max_num_batched_tokens"], eng["max_num_seqs"], eng["hash_seed"]) == (
        "sync",
        2048,
        64,
        None,
    )
    assert sc["ops"][0] == {
        "op": "arrive",
        "id": "A",
        "prompt": list(range(20)),
        "output": [1, 2],
        "lora": {"name": "x", "id": 1, "path": "loras/x"},
        "cache_salt": None,
        "prompt_logprobs": False,
    }
    assert sc["ops"][1:4] == [
        {"op": "step"},
        {"op": "abort", "id": "A"},
        {"op": "reset", "running": True, "external": False},
    ]
    assert [op["lora"]["id"] for op in sc["ops"][4:]] == [2, 1]


@pytest.mark.parametrize(
    "step, words",
    [
        ({"op": "admit", "id": "A"}, "manager-level op"),
        ({"op": "arrive", "id": "A", "prompt": "0:4"}, "needs 'output'"),
        (_arrive(text="hi"), "'text' is bad input"),
        (_arrive(mm=[]), "'mm' is bad input"),
        ({"op": "jump"}, "unknown op"),
    ],
)
def test_normalize_refuses_bad_steps(step, words):
    with pytest.raises(ScenarioInputError, match=words):
        normalize({"steps": [step]})


def test_normalize_refuses_unknown_engine_keys_and_two_lora_paths():
    with pytest.raises(ScenarioInputError, match="unknown keys"):
        normalize({"engine": {"schedular": "sync"}, "steps": []})
    with pytest.raises(ScenarioInputError, match="two paths"):
        normalize({"steps": [_arrive(lora="x"), {**_arrive(lora="x", lora_path="p"), "id": "B"}]})


def test_every_golden_loads():
    paths = golden_paths()
    assert len(paths) >= 7
    for path in paths:
        sc = load_toml(path)
        assert any(op["op"] == "step" for op in sc["ops"])


def test_the_random_generator_is_seeded():
    assert random_raw_scenario(7) == random_raw_scenario(7)
    assert random_raw_scenario(7) != random_raw_scenario(8)


@pytest.mark.parametrize("seed", range(200))
def test_random_scenarios_are_valid_by_construction(seed):
    sc = random_scenario(seed)
    eng = sc["engine"]
    assert 16 <= eng["max_num_batched_tokens"] <= 512
    assert eng["max_num_seqs"] <= eng["max_num_batched_tokens"]
    assert eng["long_prefill_token_threshold"] <= eng["max_model_len"]
    if eng["hash_algo"].startswith("xxhash"):
        assert eng["hash_seed"] is not None  # else vLLM draws a random seed
    arrived = set()
    for op in sc["ops"]:
        if op["op"] == "arrive":
            assert op["id"] not in arrived
            arrived.add(op["id"])
            assert op["prompt"] and 1 <= len(op["output"]) <= 40
            tokens = len(op["prompt"]) + len(op["output"])
            assert tokens <= eng["max_model_len"]
            assert -(-tokens // eng["block_size"]) <= eng["num_blocks"] - 1  # fits the pool alone
        elif op["op"] == "abort":
            assert op["id"] in arrived
    assert len(arrived) >= 2
