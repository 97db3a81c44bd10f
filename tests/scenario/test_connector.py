"""The KV connector in engine-step scenarios (design section 10): replay, bad input, invariants.

The numbers are spec part 2's verified vectors (rules 53-59); the goldens of
tests/scenario/golden/engine_steps/connector_*.toml carry the same, and the conformance tier
compares them with vLLM's own scheduler.
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
from vllm_drivers.engine_step_scenarios import random_connector_raw_scenario

REPO = Path(__file__).resolve().parents[2]
GOLDEN = sorted((REPO / "tests/scenario/golden/engine_steps").glob("connector_*.toml"))

HEAD = """
[engine]
block_size = 16
num_blocks = 64
scheduler = "sync"
kv_connector = {{ kind = "static", load = "{load}", failure_policy = "{policy}" }}

[[steps]]
op = "arrive"
id = "A"
prompt = "0:100"
output = "7, 7"
{arrive}
"""


def scenario(arrive: str = "external_tokens = 64", load: str = "async", policy: str = "fail", steps: int = 4):
    text = HEAD.format(load=load, policy=policy, arrive=arrive) + '\n[[steps]]\nop = "step"\n' * steps
    return parse_scenario_text(text, "test.toml")


def test_async_load_waits_then_caches_at_the_next_schedule():
    j = replay(scenario(), record=False).to_json()
    s1, s2 = j["steps"][1], j["steps"][2]
    assert s1["scheduled"] == {} and s1["external"] == {"A": 64} and s1["events"] == []
    assert s1["step_stats"]["queries"] == 100
    assert s2["scheduled"] == {"A": 36} and s2["external"] == {"A": 0}
    assert [(len(e["block_hashes"]), len(e["token_ids"])) for e in s2["events"]] == [(4, 64), (2, 32)]
    stats = j["final"]["stats"]
    assert (stats["external_queries"], stats["external_hits"]) == (100, 64)


SPEC_RESERVE = """
[engine]
block_size = 16
num_blocks = 15
scheduler = "sync"
kv_connector = {{ kind = "static", load = "async" }}
{spec}
[[steps]]
op = "arrive"
id = "A"
prompt = "0:139"
output = [7]
external_tokens = 54
[[steps]]
op = "arrive"
id = "B"
prompt = "500:550"
output = [7]
external_tokens = 50
[[steps]]
op = "step"
"""


def test_with_drafts_an_async_load_keeps_a_decode_step_of_slots_free():
    """vLLM's _spec_decode_step_blocks: B's async load (4 blocks) must leave A's remaining 5
    blocks, and, with EAGLE's 3 drafts, one decode step's block for A and one for itself; of 10
    free blocks that leaves 3, so only A's load starts (without drafts, both do)."""
    plain = replay(parse_scenario_text(SPEC_RESERVE.format(spec=""), "t.toml"), record=False).to_json()
    spec = 'speculative = { method = "eagle", num_speculative_tokens = 3 }'
    drafts = replay(parse_scenario_text(SPEC_RESERVE.format(spec=spec), "t.toml"), record=False).to_json()
    assert plain["steps"][2]["external"] == {"A": 54, "B": 50}
    assert drafts["steps"][2]["external"] == {"A": 54}


def test_the_request_waits_for_remote_kv_holding_its_blocks():
    engine = EngineStepReplay(scenario(), record=False)
    for op in engine.scenario.ops[:2]:
        engine.apply(op)
    a = engine.scheduler.requests["A"]
    assert a.status == RequestStatus.WAITING_FOR_REMOTE_KVS and a.num_computed_tokens == 64
    assert engine.manager.get_block_ids("A") == ([1, 2, 3, 4],)
    assert all(b.block_hash is None for b in engine.manager.block_pool.blocks)


def test_load_steps_keeps_the_request_waiting_longer():
    j = replay(scenario("external_tokens = 64\nload_steps = 3", steps=5), record=False).to_json()
    assert [s["scheduled"] for s in j["steps"][1:5]] == [{}, {}, {}, {"A": 36}]


def test_an_empty_store_still_counts_external_queries():
    stats = replay(scenario("external_tokens = 0"), record=False).to_json()["final"]["stats"]
    assert (stats["external_requests"], stats["external_queries"], stats["external_hits"]) == (1, 100, 0)


def test_a_scenario_without_a_connector_reports_no_external_fields():
    text = '[[steps]]\nop = "arrive"\nid = "A"\nprompt = "0:40"\noutput = "1"\n[[steps]]\nop = "step"\n'
    j = replay(parse_scenario_text(text), record=False).to_json()
    assert "external" not in j["steps"][1] and "external_queries" not in j["final"]["stats"]


def test_a_connector_builds_the_hasher_even_with_caching_off():
    text = HEAD.format(load="async", policy="fail", arrive="").replace(
        'scheduler = "sync"', 'scheduler = "sync"\nenable_prefix_caching = false'
    )
    j = replay(parse_scenario_text(text + '[[steps]]\nop = "step"\n'), record=False).to_json()
    assert j["final"]["none_hash"] is not None


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_connector_goldens_meet_their_expects(path):
    assert replay(load_scenario(path), record=False).expect_failures == []


def _replay_checking_invariants(sc) -> None:
    engine = EngineStepReplay(sc, record=False)
    for op in sc.ops:
        try:
            engine.apply(op)
        except BadInput:
            return  # a scenario vLLM cannot replay either (an order from a set)
        sched = engine.scheduler
        # Deferred frees hold their blocks too: give them back in a copy before checking.
        assert all(b.ref_cnt > 0 for _, blocks in sched.deferred_frees for b in blocks)
        if not sched.deferred_frees:
            check_invariants(engine.manager, [r for r in sched.requests.values() if not r.is_finished()])
        # A request waiting for remote KV sits in the queue of block holders and holds blocks.
        for r in sched.requests.values():
            if r.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                assert r in sched.kv_holding_waiting and engine.manager.get_block_ids(r.request_id)[0]


@pytest.mark.parametrize("seed", range(40))
def test_invariants_after_every_op_of_random_connector_scenarios(seed):
    from explorer.scenario.parse import parse_scenario_dict

    _replay_checking_invariants(parse_scenario_dict(random_connector_raw_scenario(seed)))


BAD = [
    # (what, TOML, the field the message names)
    (
        "connector in a manager-level scenario",
        '[engine]\nkv_connector = { kind = "static" }\n[[steps]]\nop = "arrive"\nid = "A"\nprompt = "1"\n',
        "engine.kv_connector",
    ),
    (
        "external_tokens in a manager-level scenario",
        '[[steps]]\nop = "arrive"\nid = "A"\nprompt = "1"\nexternal_tokens = 1\n',
        "external_tokens",
    ),
    (
        "external_tokens without a connector",
        '[[steps]]\nop = "arrive"\nid = "A"\nprompt = "0:9"\noutput = "1"\nexternal_tokens = 1\n[[steps]]\nop = "step"\n',
        "needs a KV connector",
    ),
    ("external_tokens beyond the prompt", None, "beyond the 100-token prompt"),
    ("a sync load of the whole prompt", None, "vLLM asserts"),
    ("invalid block outside the request", None, "outside the request"),
    ("load_steps with a sync load", None, "only an async load"),
    ("an unknown connector kind", None, "kv_connector.kind"),
    ("offloading without cpu_blocks", None, "needs cpu_blocks"),
    (
        "invalid blocks with hybrid groups",
        None,
        "step 1 (arrive A): invalid_external_blocks: with more than one KV cache group vLLM cannot map",
    ),
    (
        "external stats expected without a connector",
        '[[steps]]\nop = "arrive"\nid = "A"\nprompt = "0:9"\noutput = "1"\n[[steps]]\nop = "step"\nexpect = { stats_external_hits = 0 }\n',
        "only with a KV connector",
    ),
]


def _bad_text(what: str) -> str:
    arrive = {
        "external_tokens beyond the prompt": "external_tokens = 101",
        "a sync load of the whole prompt": 'external_tokens = 100\nexternal_load = "sync"',
        "invalid block outside the request": "external_tokens = 64\ninvalid_external_blocks = [7]",
        "load_steps with a sync load": 'external_tokens = 64\nexternal_load = "sync"\nload_steps = 2',
        "invalid blocks with hybrid groups": "external_tokens = 64\ninvalid_external_blocks = [1]",
    }.get(what, "")
    text = HEAD.format(load="async", policy="fail", arrive=arrive) + '\n[[steps]]\nop = "step"\n'
    if what == "an unknown connector kind":
        text = text.replace('kind = "static"', 'kind = "lmcache"')
    if what == "offloading without cpu_blocks":
        text = text.replace('kind = "static", load = "async"', 'kind = "offloading"')
    groups = {
        "hybrid groups": '[{ kind = "full_attention" }, { kind = "sliding_window", sliding_window = 32 }]',
        "invalid blocks with hybrid groups": '[{ kind = "full_attention" }, { kind = "sliding_window", sliding_window = 32 }]',
        "one window group": '[{ kind = "sliding_window", sliding_window = 32 }]',
    }.get(what)
    if groups:
        text = text.replace("[engine]\n", f"[engine]\nkv_cache_groups = {groups}\n", 1)
    return text


@pytest.mark.parametrize("what, text, needle", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_one_line(what, text, needle):
    with pytest.raises(BadInput) as info:
        parse_scenario_text(text if text is not None else _bad_text(what), "bad.toml")
    msg = str(info.value)
    assert needle in msg and "\n" not in msg and msg.startswith("bad.toml: ")


def test_reset_running_while_waiting_for_remote_kv_is_bad_input_exit_2(tmp_path):
    path = tmp_path / "reset.toml"
    arrive = "external_tokens = 64\nload_steps = 3"
    path.write_text(
        HEAD.format(load="async", policy="fail", arrive=arrive)
        + '[[steps]]\nop = "step"\n[[steps]]\nop = "reset"\nrunning = true\n'
    )
    run = run_explorer("run", str(path), "--json", cwd=REPO)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and "waiting for remote KV" in run.stderr and "Traceback" not in run.stderr


def test_invalid_blocks_with_hybrid_groups_are_bad_input_exit_2(tmp_path):
    """With more than one group vLLM raises on a load's invalid blocks (block ids are unique
    only within a group): refused before any step runs, with vLLM's reason (design section 10)."""
    path = tmp_path / "hybrid.toml"
    path.write_text(_bad_text("invalid blocks with hybrid groups"))
    run = run_explorer("run", str(path), cwd=REPO)
    assert run.returncode == 2 and run.stdout == "" and run.stderr.count("\n") == 1
    assert "vLLM cannot map a load's invalid blocks back to requests and raises" in run.stderr


@pytest.mark.parametrize("what", ["hybrid groups", "one window group"])
def test_a_connector_with_any_groups_is_modelled(what):
    """A connector runs with hybrid groups and with one window group, as in vLLM (compared in
    tests/conformance/test_feature_joins.py and the goldens connector_hybrid_groups,
    connector_one_window_group)."""
    text = _bad_text(what).replace('output = "7, 7"\n', 'output = "7, 7"\nexternal_tokens = 64\n', 1)
    scenario = parse_scenario_text(text, "groups.toml")
    assert scenario.groups is not None and scenario.connector is not None
    trace = replay(scenario, record=False)
    assert trace.to_json()["steps"][1]["external"] == {"A": 64}


def test_a_connector_with_one_full_attention_group_is_modelled():
    text = _bad_text("hybrid groups").replace(', { kind = "sliding_window", sliding_window = 32 }', "")
    assert parse_scenario_text(text, "one.toml").groups is not None


def test_external_tokens_beyond_the_prompt_exit_2(tmp_path):
    path = tmp_path / "beyond.toml"
    path.write_text(_bad_text("external_tokens beyond the prompt"))
    run = run_explorer("run", str(path), cwd=REPO)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "beyond the 100-token prompt" in run.stderr
