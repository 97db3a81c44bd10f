"""vLLM 0.31.0 beside 0.33.0 (design section 15): the engine key, the release switches, and
`run --vllm-diff`. The numbers are the ones measured with both releases' own classes; the
conformance tier compares whole replays with each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from explorer.cli import main
from explorer.errors import BadInput
from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario, parse_scenario_text
from explorer.scenario.parse_release import with_release
from explorer.scenario.vllm_diff import vllm_diff

REPO = Path(__file__).resolve().parents[2]
LESSON = REPO / "lessons" / "20_what_changed_in_033.toml"

EAGLE = """
title = "eagle twice"
[engine]
vllm = "{vllm}"
speculative = {{ method = "eagle", num_speculative_tokens = 3 }}
[[steps]]
op = "arrive"
id = "a"
prompt = "0:40"
[[steps]]
op = "admit"
id = "a"
[[steps]]
op = "finish"
id = "a"
[[steps]]
op = "arrive"
id = "b"
prompt = "0:40"
[[steps]]
op = "admit"
id = "b"
"""


def _eagle(vllm: str) -> dict:
    return replay(parse_scenario_text(EAGLE.format(vllm=vllm)), record=False).to_json()


def test_the_default_is_0_31_0_and_the_json_says_which():
    sc = load_scenario(REPO / "lessons" / "00_two_chat_turns.toml")
    assert sc.vllm == "0.31.0"
    assert replay(sc, record=False).to_json()["final"]["vllm"] == "0.31.0"
    assert replay(with_release(sc, "0.33.0"), record=False).to_json()["final"]["vllm"] == "0.33.0"


def test_eagle_hashes_carry_the_next_token_under_0_33_and_the_hit_keeps_its_last_block():
    old, new = _eagle("0.31.0"), _eagle("0.33.0")
    # tokens 0..15, sha256: the digests measured with each release's own hasher
    assert next(iter(old["final"]["cached"])).startswith("fe8fa5dd")
    assert next(iter(new["final"]["cached"])).startswith("c693822d")
    assert old["steps"][4]["hit_tokens"] == 16  # 0.31.0 drops the last hit block
    assert new["steps"][4]["hit_tokens"] == 32
    stored = new["steps"][1]["events"][0]
    assert stored["lookahead_token_ids"] == [[16], [32]]
    assert "lookahead_token_ids" not in old["steps"][1]["events"][0]


def test_without_drafts_the_two_releases_replay_alike():
    for name in ("00_two_chat_turns", "09_kv_events", "15_async_hash_later"):
        diff = vllm_diff(load_scenario(REPO / "lessons" / f"{name}.toml"))
        assert diff.identical, (name, diff.fields)


def test_vllm_diff_names_the_first_differing_step():
    diff = vllm_diff(parse_scenario_text(EAGLE.format(vllm="0.31.0")))
    assert (diff.step, diff.fields) == (1, ("events",))
    assert diff.text(parse_scenario_text(EAGLE.format(vllm="0.31.0"))) == (
        "first difference at step 2 (admit a): events"
    )


def test_0_33_refuses_a_hash_block_size_other_than_the_block_size_with_one_group():
    text = '[engine]\nvllm = "{v}"\nblock_size = 32\nhash_block_size = 16\n[[steps]]\nop = "reset"\n'
    parse_scenario_text(text.format(v="0.31.0"))  # ignored by 0.31.0
    with pytest.raises(BadInput, match="refuses hash_block_size = 16"):
        parse_scenario_text(text.format(v="0.33.0"))
    sc = parse_scenario_text(text.format(v="0.31.0"))
    with pytest.raises(BadInput, match="refuses"):
        with_release(sc, "0.33.0")


def test_an_unknown_release_is_bad_input(capsys):
    with pytest.raises(BadInput, match="engine.vllm"):
        parse_scenario_text('[engine]\nvllm = "0.32.0"\n')
    assert main(["run", str(LESSON), "--vllm", "0.32.0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--vllm" in err


@pytest.mark.parametrize("vllm", ["0.31.0", "0.33.0"])
def test_the_0_33_lesson_meets_its_expects_under_both(vllm):
    trace = replay(with_release(load_scenario(LESSON), vllm))
    assert trace.expect_failures == []


def test_run_vllm_diff_on_the_command_line(capsys):
    assert main(["run", str(LESSON), "--vllm-diff", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["identical"] is False and out["step"] == 1
    assert main(["run", str(REPO / "lessons" / "00_two_chat_turns.toml"), "--vllm-diff"]) == 0
    assert capsys.readouterr().out == "identical under 0.31.0 and 0.33.0\n"


PARTIAL_TAIL = REPO / "tests" / "scenario" / "golden" / "hybrid_partial_tail_release.toml"


def test_0_33_registers_the_full_attention_partial_tail_below_the_last_prompt_token():
    """The golden (compared with both releases' own classes in the conformance tier): 0.33.0
    adds one full-attention BlockStored, block size 1, for the tail at num_prompt - 1."""

    def admit_events(vllm: str) -> list:
        trace = replay(with_release(load_scenario(PARTIAL_TAIL), vllm), record=False).to_json()
        return [(e["group_idx"], e["block_size"], e["token_ids"]) for e in trace["steps"][1]["events"]]

    full, window = (0, 3, [0, 1, 2, 3, 4, 5]), (1, 1, [0, 1, 2, 3, 4, 5])
    assert admit_events("0.31.0") == [full, window]
    assert admit_events("0.33.0") == [full, (0, 1, [4]), window]


OFFLOADING = REPO / "tests" / "scenario" / "golden" / "engine_steps" / "offloading_back_from_cpu.toml"


def test_both_releases_replay_the_offloading_connector(capsys):
    sc = load_scenario(OFFLOADING)
    assert sc.connector is not None and sc.connector.kind == "offloading" and sc.vllm == "0.31.0"
    assert with_release(sc, "0.33.0").vllm == "0.33.0"
    text = OFFLOADING.read_text().replace("[engine]\n", '[engine]\nvllm = "0.33.0"\n', 1)
    assert parse_scenario_text(text).vllm == "0.33.0"
    for version in ("0.33.0", "0.31.0"):
        assert main(["run", str(OFFLOADING), "--vllm", version]) == 0
    assert "Traceback" not in capsys.readouterr().err


# A reset with running preempts B, whose re-admission loads from the CPU tier in that step.
RESET_THEN_CPU_HIT = (
    """
title = "reset with running, then a CPU hit"
[engine]
block_size = 4
num_blocks = 20
scheduler = "sync"
kv_connector = { kind = "offloading", cpu_blocks = 8 }
[[steps]]
op = "arrive"
id = "A"
prompt = "0:13"
output = [100]
"""
    + '[[steps]]\nop = "step"\n' * 4
    + """
[[steps]]
op = "arrive"
id = "B"
prompt = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 50, 51]
output = [101, 102, 103, 104]
"""
    + '[[steps]]\nop = "step"\n' * 2
    + """
[[steps]]
op = "reset"
running = true
"""
    + '[[steps]]\nop = "step"\n' * 8
)


def test_a_reset_that_preempts_a_cpu_load_runs_under_0_33_only():
    sc = parse_scenario_text(RESET_THEN_CPU_HIT)
    with pytest.raises(BadInput, match="loads from the CPU tier in the same step"):
        replay(sc, record=False)
    trace = replay(with_release(sc, "0.33.0"), record=False).to_json()
    assert trace["final"]["vllm"] == "0.33.0"
    loads = [st["external"] for st in trace["steps"] if st.get("external")]
    assert any(n > 0 for ext in loads for n in ext.values()), loads


def test_explorer_metrics_exports_the_chosen_releases_families(capsys):
    golden = REPO / "tests" / "scenario" / "golden" / "engine_steps" / "chunked_prefill_1200.toml"
    assert main(["metrics", str(golden), "--vllm", "0.33.0"]) == 0
    new = capsys.readouterr().out
    assert main(["metrics", str(golden), "--vllm", "0.31.0"]) == 0
    old = capsys.readouterr().out
    assert "vllm:prefix_cache_queries" in old and "vllm:prefix_cache_queries" in new
    for family in ("vllm:prompt_tokens_cached_by_source", "vllm:admission_rejections"):
        assert family in new and family not in old


STOPPED_IN_A_VERIFY_STEP = """
title = "stopped inside a verify step"
[engine]
block_size = 4
num_blocks = 16
scheduler = "sync"
speculative = { method = "ngram", num_speculative_tokens = 2 }
[[steps]]
op = "arrive"
id = "R"
prompt = "0:5"
output = [300, 301, 302]
accepted = [2]
[[steps]]
op = "step"
[[steps]]
op = "step"
[[steps]]
op = "step"
"""


def test_0_33_trims_num_computed_when_a_verify_step_stops_the_request():
    # R's verify step samples 3 tokens where 2 are left: it finishes holding 8 tokens (two full
    # blocks). 0.33.0 caches when the tokens arrive, but only up to the 7 it keeps computed
    # after the trim (scheduler.py:2752-2769 there), so, as under 0.31.0, the second block is
    # never stored; both releases' own Schedulers answer so.
    scenario = parse_scenario_text(STOPPED_IN_A_VERIFY_STEP)
    steps = replay(with_release(scenario, "0.33.0"), record=False).to_json()["steps"]
    assert [[e["type"] for e in st["events"]] for st in steps] == [[], ["BlockStored"], [], []]
    assert steps[2]["finished"] == ["R"] and steps[2]["outputs"] == {"R": [301, 302]}
    assert vllm_diff(scenario).identical


def test_0_33_keeps_a_decode_step_inside_the_sequence_an_async_load_reserves():
    # The golden's two async loads with drafts (spec_step_within_sequence): 0.31.0 keeps a
    # block more free for A's decode step, so B's load waits until A finishes; under 0.33.0 it
    # starts beside A's. Both releases' own Schedulers answer so (the engine-step goldens).
    golden = REPO / "tests" / "scenario" / "golden" / "engine_steps" / "connector_drafts_load_reservation.toml"
    scenario = load_scenario(golden)
    runs = {v: replay(with_release(scenario, v), record=False).to_json()["steps"] for v in ("0.31.0", "0.33.0")}
    steps = {v: [st for st in run if st["op"] == "step"] for v, run in runs.items()}
    assert steps["0.31.0"][0]["external"] == {"A": 32} and steps["0.33.0"][0]["external"] == {"A": 32, "B": 32}
    assert [st["finished"] for st in steps["0.31.0"]] == [[], [], ["A"], [], ["B"], []]
    assert [st["finished"] for st in steps["0.33.0"]] == [[], [], ["A", "B"], [], [], []]
    assert not vllm_diff(scenario).identical
