"""The random scenario generator: valid, deterministic, and it covers what it should."""

from __future__ import annotations

import json

import pytest

from explorer.bench import bench_scenario, time_ours
from explorer.scenario.engine import replay
from explorer.scenario.ops import Admit, Arrive, Reset
from explorer.scenario.parse import parse_scenario_dict, parse_scenario_text
from explorer.scenario.randgen import PROFILES, random_scenario, scenario_tokens
from explorer.scenario.write import scenario_to_toml
from tests.step_records import evictions

SEEDS = range(50)
NUM_OPS = 120


@pytest.fixture(scope="module")
def generated():
    return {seed: random_scenario(seed, NUM_OPS) for seed in SEEDS}


@pytest.mark.parametrize("seed", SEEDS)
def test_every_step_is_valid(generated, seed):
    """Parsing and replaying never raise BadInput: every op is valid where it stands."""
    raw = generated[seed]
    assert set(raw) == {"title", "engine", "steps"}
    assert len(raw["steps"]) == NUM_OPS
    scenario = parse_scenario_dict(raw, f"seed {seed}")
    trace = replay(scenario)
    assert len(trace.steps) == NUM_OPS
    assert not any("expect" in step for step in raw["steps"])
    # The lean replay (record=False) gives the same replay JSON as the full one.
    lean = replay(scenario, hash_seed=trace.hash_seed, record=False)
    assert lean.to_json() == trace.to_json()


@pytest.mark.parametrize("seed", [0, 7, 31])
def test_same_seed_same_scenario_same_json(seed):
    a, b = random_scenario(seed, NUM_OPS), random_scenario(seed, NUM_OPS)
    assert json.dumps(a, sort_keys=False) == json.dumps(b, sort_keys=False)
    sa, sb = parse_scenario_dict(a), parse_scenario_dict(b)
    ta = replay(sa)
    tb = replay(sb, hash_seed=ta.hash_seed)  # a drawn xxhash seed is pinned to repeat it
    assert json.dumps(ta.to_json()) == json.dumps(tb.to_json())


def test_different_seeds_differ():
    assert random_scenario(1, 40) != random_scenario(2, 40)


def test_prefix_of_a_longer_run_is_the_shorter_run():
    """Op k depends only on the ops before it: a longer run extends a shorter one."""
    short, long = random_scenario(5, 30), random_scenario(5, 60)
    assert long["engine"] == short["engine"]
    assert long["steps"][:30] == short["steps"]


@pytest.mark.parametrize("seed", [3, 11])
def test_round_trips_through_toml(seed):
    raw = random_scenario(seed, 60)
    scenario = parse_scenario_dict(raw)
    again = parse_scenario_text(scenario_to_toml(scenario))
    hash_seed = replay(scenario).hash_seed
    assert again.normalized(hash_seed) == scenario.normalized(hash_seed)


def test_features_are_covered(generated):
    """Over 50 seeds the generator reaches every op and every feature it promises."""
    algos, block_sizes, flags = set(), set(), set()
    for _seed, raw in generated.items():
        scenario = parse_scenario_dict(raw)
        eng = scenario.engine
        algos.add(eng.hash_algo)
        block_sizes.add(eng.block_size)
        flags.add(("explicit seed" if eng.hash_seed else "default seed", eng.hash_algo.startswith("xxhash")))
        flags.add(("caching", eng.enable_prefix_caching))
        flags.add(("events", eng.events))
        flags.add(("int hashes", eng.int_block_hashes))
        if eng.max_model_len < 1000:
            flags.add("small max_model_len")
        finished: set[str] = set()
        trace = replay(scenario)
        for k, (op, step) in enumerate(zip(scenario.ops, trace.steps)):
            flags.add(op.op)
            before = trace.snapshot_at(k).request(op.id) if op.id is not None else None
            if op.op == "admit" and before is not None:
                if before.status == "preempted":
                    flags.add("admit after preemption")
                elif before.status == "running":
                    flags.add(
                        "admit past the prompt"
                        if before.num_computed_tokens >= before.num_prompt_tokens
                        else "admit next chunk"
                    )
            if isinstance(op, Arrive):
                if op.id in finished:
                    flags.add("reused id")
                if op.lora:
                    flags.add("lora explicit path" if op.lora.path != f"loras/{op.lora.name}" else "lora default path")
                if op.cache_salt:
                    flags.add("cache_salt")
                if op.prompt_logprobs:
                    flags.add("prompt_logprobs")
                for m in op.mm:
                    bs = eng.block_size
                    if m.offset // bs != (m.offset + m.length - 1) // bs:
                        flags.add("image spanning blocks")
            if op.op == "finish":
                finished.add(op.id)
            if isinstance(op, Admit) and op.tokens is not None:
                flags.add("chunked admit")
            if op.op in ("admit", "decode", "generate") and not step.ok:
                flags.add("failed allocation")
            if op.op == "admit" and step.hit_tokens:
                flags.add("hit")
            if isinstance(op, Reset):
                flags.add(("reset", op.running, step.ok))
            if step.preempted and op.op == "reset":
                flags.add("reset preempted running")
            if evictions(step):
                flags.add("eviction")
    assert algos == {"sha256", "sha256_cbor", "xxhash", "xxhash_cbor"}
    assert {1, 2, 4, 16} <= block_sizes
    want = {
        "arrive",
        "admit",
        "sample",
        "decode",
        "generate",
        "finish",
        "preempt",
        "reset",
        "reused id",
        "lora explicit path",
        "lora default path",
        "cache_salt",
        "prompt_logprobs",
        "image spanning blocks",
        "chunked admit",
        "failed allocation",
        "hit",
        "eviction",
        "reset preempted running",
        "small max_model_len",
        "admit after preemption",
        "admit past the prompt",
        "admit next chunk",
        ("reset", True, True),
        ("reset", False, True),
        ("reset", False, False),
        ("explicit seed", True),
        ("default seed", True),
        ("explicit seed", False),
        ("default seed", False),
        ("caching", True),
        ("caching", False),
        ("events", True),
        ("events", False),
        ("int hashes", True),
        ("int hashes", False),
    }
    assert want <= flags, sorted(map(str, want - flags))


def test_bench_profile_is_valid_and_lean_replay_matches():
    scenario = bench_scenario(300, 0)
    eng = scenario.engine
    assert (eng.block_size, eng.hash_algo, eng.events, eng.enable_prefix_caching) == (16, "sha256", True, True)
    assert PROFILES["bench"].engine is not None
    seconds, lean_json = time_ours(scenario, repeat=1)
    assert len(seconds) == 1 and seconds[0] > 0
    assert lean_json == replay(scenario).to_json()
    assert scenario_tokens(scenario) > 300


def test_lean_replay_checks_expectations_too():
    raw = {
        "title": "expectations in a lean replay",
        "engine": {"block_size": 4, "num_blocks": 8},
        "steps": [
            {"op": "arrive", "id": "A", "prompt": "0:10"},
            {"op": "admit", "id": "A", "expect": {"hit_tokens": 0, "num_free_blocks": 4}},
            {"op": "finish", "id": "A", "expect": {"num_free_blocks": 99}},
        ],
    }
    scenario = parse_scenario_dict(raw)
    full, lean = replay(scenario), replay(scenario, record=False)
    assert lean.expect_failures == full.expect_failures
    assert len(lean.expect_failures) == 1 and "num_free_blocks" in lean.expect_failures[0]
    assert lean.states is None and full.states is not None  # a lean replay keeps no per-step states
    assert lean.final == full.final
    with pytest.raises(ValueError):
        lean.snapshot_at(1)
