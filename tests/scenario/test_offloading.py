"""The offloading connector in engine-step scenarios (design section 10): replay, the CPU tier
in the run JSON and text, the scheduler's reports, bad input.

The goldens tests/scenario/golden/engine_steps/offloading_*.toml carry the same cases, and the
conformance tier compares them with vLLM's own OffloadingConnector.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from explorer.core.request import RequestStatus
from explorer.errors import BadInput
from explorer.scenario.engine import replay
from explorer.scenario.engine_steps import EngineStepReplay
from explorer.scenario.parse import load_scenario, parse_scenario_text
from tests.cli_run import run_explorer
from tests.core.invariants import check_invariants
from vllm_drivers.engine_step_scenarios import random_offloading_raw_scenario

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests/scenario/golden/engine_steps"

HEAD = """
[engine]
block_size = 16
num_blocks = {blocks}
scheduler = "{sched}"
enable_prefix_caching = {caching}
kv_connector = {{ kind = "offloading", cpu_blocks = {cpu} }}
"""


def arrive(rid: str, prompt: str, output: str = "7") -> str:
    return f'\n[[steps]]\nop = "arrive"\nid = "{rid}"\nprompt = "{prompt}"\noutput = "{output}"\n'


def steps(n: int) -> str:
    return '\n[[steps]]\nop = "step"\n' * n


def scenario(body: str, cpu: int = 16, blocks: int = 10, sched: str = "sync", caching: str = "true"):
    return parse_scenario_text(HEAD.format(cpu=cpu, blocks=blocks, sched=sched, caching=caching) + body, "t.toml")


def test_computed_prompt_blocks_go_to_the_cpu_tier_with_cpu_events():
    j = replay(scenario(arrive("A", "0:100") + steps(1)), record=False).to_json()
    events = j["steps"][1]["events"]
    assert [(e["type"], e.get("medium")) for e in events] == [("BlockStored", "GPU")] + [("BlockStored", "CPU")] * 6
    cpu = events[1]
    assert (cpu["block_size"], cpu["token_ids"], cpu["group_idx"], len(cpu["block_hashes"])) == (0, [], 0, 1)
    assert "parent_block_hash" not in cpu or cpu["parent_block_hash"] is None
    # The chunks in prefix order; A finished, so the LRU order lists its first block last.
    gpu = [h for h in events[0]["block_hashes"]]
    assert [e["block_hashes"][0] for e in events[1:]] == gpu
    assert len(j["final"]["cpu_tier"]) == 6


def test_a_block_the_gpu_lost_comes_back_from_the_cpu():
    trace = replay(load_scenario(GOLDEN / "offloading_back_from_cpu.toml"))
    assert trace.expect_failures == []
    j = trace.to_json()
    admit, after = j["steps"][7], j["steps"][8]
    assert admit["scheduled"] == {} and admit["external"] == {"B": 96}
    assert after["scheduled"] == {"B": 24} and after["external"] == {"B": 0}
    loads = [c for c in trace.steps[7].engine_step.connector if c.kind == "cpu_load"]
    assert [(c.request_id, len(c.hashes), len(c.block_ids)) for c in loads] == [("B", 6, 6)]
    done = [c for c in trace.steps[7].engine_step.connector if c.kind == "cpu_done"]
    assert done and done[0].cpu_loaded == loads[0].hashes


def test_a_request_larger_than_the_cpu_tier_is_not_stored():
    trace = replay(load_scenario(GOLDEN / "offloading_larger_than_cpu_tier.toml"))
    assert trace.expect_failures == []
    refused = [c for s in trace.steps if s.engine_step for c in s.engine_step.connector if c.kind == "cpu_store"]
    assert [(c.request_id, c.refused) for c in refused][:4] == [("A", True), ("A", True), ("A", True), ("C", False)]
    assert len(trace.final.cpu_tier) == 3


def test_the_cpu_tier_evicts_its_least_recently_used_chunks():
    trace = replay(load_scenario(GOLDEN / "offloading_cpu_lru_eviction.toml"))
    assert trace.expect_failures == []
    final = trace.to_json()["final"]
    stores = {
        c.request_id: c for s in trace.steps if s.engine_step for c in s.engine_step.connector if c.kind == "cpu_store"
    }
    a0, a1 = stores["A"].hashes
    b0, b1 = stores["B"].hashes
    c0, c1 = stores["C"].hashes
    assert stores["C"].cpu_evicted == (a1, a0) and stores["D"].cpu_evicted == (b1, b0)
    assert final["cpu_tier"] == [h.hex() for h in (c1, c0, a1, a0)]
    text = run_explorer("run", str(GOLDEN / "offloading_cpu_lru_eviction.toml"), cwd=REPO)
    assert text.returncode == 0
    assert text.stdout.splitlines()[-1] == "cpu tier (4 chunks, least recently used first): " + ", ".join(
        h.hex()[:8] for h in (c1, c0, a1, a0)
    )


def test_a_chunk_being_stored_makes_the_lookup_wait_with_nothing_recorded():
    trace = replay(load_scenario(GOLDEN / "offloading_store_pending_none.toml"))
    lookups = [c for s in trace.steps if s.engine_step for c in s.engine_step.connector if c.kind == "lookup"]
    assert [(c.request_id, c.num_external_tokens) for c in lookups] == [("A", 0), ("B", None), ("B", 64)]
    assert trace.to_json()["final"]["stats"]["external_requests"] == 2


def test_pending_jobs_keep_the_engine_stepping():
    engine = EngineStepReplay(scenario(arrive("A", "0:64") + steps(1), sched="async", blocks=32), record=False)
    engine.apply(engine.scenario.ops[0])
    sched = engine.scheduler
    engine.engine_core.step_fn()  # schedules A: its store job is in flight
    assert sched.connector.has_pending_push_work()
    while sched.get_num_unfinished_requests():
        engine.engine_core.step_fn()
    engine.engine_core.step_fn()
    assert not sched.connector.has_pending_push_work() and not sched.has_requests()
    assert not sched.requires_kv_delivery  # a best-effort cache: vLLM opts out (offloading_connector.py)


def test_reset_external_empties_the_cpu_tier():
    body = arrive("A", "0:64") + steps(2) + '\n[[steps]]\nop = "reset"\nexternal = true\n' + steps(1)
    assert replay(scenario(body), record=False).to_json()["final"]["cpu_tier"] == []
    body = arrive("A", "0:64") + steps(2) + '\n[[steps]]\nop = "reset"\n' + steps(1)
    assert len(replay(scenario(body), record=False).to_json()["final"]["cpu_tier"]) == 4


def test_without_prefix_caching_the_cpu_tier_is_the_only_cache():
    body = arrive("A", "0:64") + steps(2) + arrive("B", "0:64, 3*16") + steps(3)
    j = replay(scenario(body, caching="false"), record=False).to_json()
    assert j["steps"][4]["external"] == {"B": 64} and j["final"]["stats"]["hits"] == 0
    assert j["final"]["none_hash"] is not None


@pytest.mark.parametrize("seed", range(12))
def test_random_offloading_scenarios_keep_the_invariants(seed: int):
    from explorer.scenario.parse import parse_scenario_dict

    sc = parse_scenario_dict(random_offloading_raw_scenario(seed), f"seed {seed}")
    engine = EngineStepReplay(sc, record=False)
    for op in sc.ops:
        engine.apply(op)
        sched = engine.scheduler
        if not sched.deferred_frees:  # deferred frees hold their blocks too
            check_invariants(engine.manager, [r for r in sched.requests.values() if not r.is_finished()])
        for req in engine.scheduler.requests.values():
            assert req.status != RequestStatus.WAITING_FOR_REMOTE_KVS or req.num_computed_tokens > 0
        tier = engine.connector.cpu_tier()
        assert len(tier) <= sc.connector.cpu_blocks and len({c.key for c in tier}) == len(tier)


@pytest.mark.parametrize(
    ("connector", "arrive_extra", "message"),
    [
        ('{ kind = "offloading" }', "", 'engine.kv_connector.cpu_blocks: kind = "offloading" needs cpu_blocks'),
        ('{ kind = "offloading", cpu_blocks = 0 }', "", "cpu_blocks: expected an integer in [1, 1,048,576], got 0"),
        ('{ kind = "offloading", cpu_blocks = 1048577 }', "", "expected an integer in [1, 1,048,576]"),
        ('{ kind = "offloading", cpu_blocks = true }', "", "expected an integer in [1, 1,048,576], got True"),
        ('{ kind = "offloading", cpu_blocks = "4" }', "", "got '4'"),
        ('{ kind = "offloading", cpu_blocks = 4, load = "sync" }', "", "engine.kv_connector.load: unknown key"),
        ('{ kind = "offloading", cpu_blocks = 4 }', "external_tokens = 16", 'only kind = "static" takes it'),
    ],
)
def test_bad_offloading_input_is_one_line(tmp_path, connector: str, arrive_extra: str, message: str):
    text = (
        f"[engine]\nblock_size = 16\nnum_blocks = 8\nkv_connector = {connector}\n"
        f'\n[[steps]]\nop = "arrive"\nid = "A"\nprompt = "0:40"\noutput = "1"\n{arrive_extra}\n'
        '\n[[steps]]\nop = "step"\n'
    )
    with pytest.raises(BadInput, match=None) as info:
        parse_scenario_text(text, "bad.toml")
    assert message in str(info.value) and "\n" not in str(info.value)
    path = tmp_path / "bad.toml"
    path.write_text(text)
    cli = run_explorer("run", str(path), cwd=REPO)
    assert cli.returncode == 2 and cli.stdout == "" and len(cli.stderr.strip().splitlines()) == 1
    assert message in cli.stderr


def test_offloading_in_a_manager_level_scenario_is_bad_input():
    text = (
        '[engine]\nblock_size = 16\nnum_blocks = 8\nkv_connector = { kind = "offloading", cpu_blocks = 4 }\n'
        '\n[[steps]]\nop = "admit"\nid = "A"\nprompt = "0:40"\n'
    )
    with pytest.raises(BadInput, match="only an engine-step scenario"):
        parse_scenario_text(text, "bad.toml")


def test_the_snapshot_budget_counts_the_cpu_tier():
    from explorer.scenario.budget import snapshot_cells

    body = arrive("A", "0:100") + steps(3)
    with_tier = snapshot_cells(scenario(body, cpu=4), record=True)
    bigger = snapshot_cells(scenario(body, cpu=64), record=True)
    # 4 snapshots after A's arrival hold at most 4 chunks (cpu_blocks), then at most A's 6 full blocks.
    assert bigger - with_tier == 4 * (6 - 4)
    static = parse_scenario_text(
        HEAD.format(cpu=4, blocks=10, sched="sync", caching="true").replace(
            'kind = "offloading", cpu_blocks = 4', 'kind = "static"'
        )
        + body,
        "s.toml",
    )
    assert with_tier - snapshot_cells(static, record=True) == 4 * 4


def _cpu_stored(step) -> list[tuple[int, object]]:
    return [
        (e.group_idx, e.block_hashes[0]) for e in step.events if type(e).__name__ == "BlockStored" and e.medium == "CPU"
    ]


@pytest.mark.parametrize(
    ("retention", "window_chunks"), [("", [4, 5]), ('"dense"', [0, 1, 2, 3, 4, 5]), ("64", [2, 3, 4, 5])]
)
def test_offloading_with_hybrid_groups_stores_every_group_the_window_only_what_a_hit_reaches(retention, window_chunks):
    """Design sections 8 and 10 (compared with vLLM: test_offloading_groups_conformance.py and
    the offloading_groups_* goldens): each group stores its own chunks in the one CPU tier, a
    32-token window only the tails a later hit can reach (retention 0, vLLM's default: the
    replay boundary's 2 blocks; dense: all; 64 tokens: each segment's tail and the boundary's)."""
    extra = 'kv_cache_groups = [{ kind = "full_attention" }, { kind = "sliding_window", sliding_window = 32 }]\n'
    if retention:  # the TOML value as written; none: vLLM's default, 0
        extra += f"prefix_cache_retention_interval = {retention}\n"
    sc = parse_scenario_text(
        HEAD.format(cpu=16, blocks=40, sched="sync", caching="true") + extra + arrive("A", "0:100") + steps(2), "t.toml"
    )
    trace = replay(sc)
    stored = _cpu_stored(trace.steps[1])
    full = [h for g, h in stored if g == 0]
    assert len(full) == 6
    assert [h for g, h in stored if g == 1] == [full[i] for i in window_chunks]
    # token order, the lower group first
    order = [(full.index(h), g) for g, h in stored]
    assert order == sorted(order)
    assert len(trace.final.cpu_tier) == 6 + len(window_chunks)


def test_offloading_with_drafts_stores_the_prompt_blocks_and_verifies_drafts():
    """vLLM runs the offloading connector with speculative decoding (design section 10): the
    prompt's full blocks go to the CPU tier with the prefill, and the verify steps schedule
    1 + k tokens (compared with vLLM: golden offloading_with_drafts, test_feature_joins.py)."""
    extra = 'speculative = { method = "eagle", num_speculative_tokens = 3 }'
    text = (
        HEAD.format(cpu=4, blocks=16, sched="sync", caching="true")
        + extra
        + "\n"
        + arrive("A", "0:40", "7, 8, 9")
        + steps(4)
    )
    trace = replay(parse_scenario_text(text, "drafts.toml"))
    j = trace.to_json()
    assert j["steps"][1]["scheduled"] == {"A": 40}
    assert any(n == 4 for st in j["steps"][2:] for n in st["scheduled"].values())
    assert len(j["final"]["cpu_tier"]) == 2  # 40 tokens: two full blocks of 16
