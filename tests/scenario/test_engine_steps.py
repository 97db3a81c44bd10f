"""Engine-step scenarios (design section 7) and `explorer run`: the kind, the engine keys, the
ops, the replay JSON fields, `expect`, bad input. The conformance tier proves the numbers
against vLLM's own Scheduler; these tests pin the contract of the scenario side."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from explorer.errors import BadInput
from explorer.scenario.engine import replay
from explorer.scenario.parse import parse_scenario_dict, parse_scenario_text, with_steps
from explorer.scenario.write import scenario_to_toml
from tests.scenario.test_parse_and_run import run, write

HEAD = '[engine]\nblock_size = 16\nnum_blocks = 20\nmax_model_len = 200\nscheduler = "sync"\n'


def steps(*tables: str, head: str = HEAD) -> str:
    return head + "".join(f"\n[[steps]]\n{t}\n" for t in tables)


ARRIVE = 'op = "arrive"\nid = "A"\nprompt = "0:30"\noutput = "500:503"'
STEP = 'op = "step"'

BAD = {
    "a manager-level op": (steps(ARRIVE, STEP, 'op = "admit"\nid = "A"'), ["step 3 (admit A)", "`admit`", "manager"]),
    "arrive without output": (steps('op = "arrive"\nid = "A"\nprompt = "0:30"', STEP), ["step 1", "output", "missing"]),
    "empty output": (steps('op = "arrive"\nid = "A"\nprompt = "0:30"\noutput = []', STEP), ["output", "no tokens"]),
    "a budget of 0": (steps(STEP, head=HEAD + "max_num_batched_tokens = 0\n"), ["engine.max_num_batched_tokens", "0"]),
    "a budget below max_num_seqs": (
        steps(STEP, head=HEAD + "max_num_batched_tokens = 8\nmax_num_seqs = 16\n"),
        ["engine.max_num_batched_tokens", "max_num_seqs = 16"],
    ),
    "a threshold past max_model_len": (
        steps(STEP, head=HEAD + "long_prefill_token_threshold = 201\n"),
        ["engine.long_prefill_token_threshold"],
    ),
    "an unknown scheduler": (steps(STEP, head=HEAD.replace('"sync"', '"fifo"')), ["engine.scheduler", "fifo"]),
    "mm on arrive": (
        steps(ARRIVE + '\nmm = [{id = "i", offset = 0, length = 4}]', STEP),
        ["step 1 (arrive A)", "mm", "engine-step"],
    ),
    "text on arrive": (steps('op = "arrive"\nid = "A"\ntext = "hi"\noutput = "1"', STEP), ["text", "engine-step"]),
    "a prompt of max_model_len": (
        steps('op = "arrive"\nid = "A"\nprompt = "0:200"\noutput = "0:60"', STEP),
        ["prompt", "200 tokens", "at least max_model_len = 200"],
    ),
    "aborting an id that never arrived": (steps(STEP, 'op = "abort"\nid = "Z"'), ["step 2 (abort Z)", "'Z'"]),
    "arriving a live id": (steps(ARRIVE, STEP, ARRIVE), ["step 3 (arrive A)", "still held"]),
    "arriving an aborted id still in flight": (
        steps(ARRIVE, STEP, 'op = "abort"\nid = "A"', ARRIVE, head=HEAD.replace("sync", "async")),
        ["step 4 (arrive A)", "in a batch in flight"],
    ),
    "scheduler keys in a manager-level scenario": (
        '[engine]\nscheduler = "sync"\n[[steps]]\nop = "arrive"\nid = "A"\nprompt = "0:4"\n',
        ["engine.scheduler", "engine-step"],
    ),
    "abort in a manager-level scenario": (
        '[[steps]]\nop = "arrive"\nid = "A"\nprompt = "0:4"\n[[steps]]\nop = "abort"\nid = "A"\n',
        ["step 2 (abort A)", "`abort`"],
    ),
    "output in a manager-level scenario": (
        '[[steps]]\nop = "arrive"\nid = "A"\nprompt = "0:4"\noutput = "1"\n',
        ["step 1 (arrive A)", "output", "engine-step"],
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_line_exit_2(tmp_path: Path, case: str) -> None:
    text, words = BAD[case]
    path = write(tmp_path, text)
    proc = run(path, "--json")
    assert proc.returncode == 2, (case, proc.stdout, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "s.toml" in lines[0]
    for w in words:
        assert w in lines[0], (case, lines[0])


def test_a_step_op_makes_an_engine_step_scenario_with_the_design_defaults() -> None:
    sc = parse_scenario_text(steps(ARRIVE, STEP, head="[engine]\n"))
    assert sc.sched is not None and sc.sched.as_dict() == {
        "scheduler": "async",
        "max_num_batched_tokens": 2048,
        "max_num_seqs": 64,
        "long_prefill_token_threshold": 0,
    }
    assert parse_scenario_text('[[steps]]\nop = "arrive"\nid = "A"\nprompt = "0:4"\n').sched is None


def test_normalized_is_the_engine_steps_form_of_the_contract() -> None:
    sc = parse_scenario_text(
        steps(
            ARRIVE + '\nlora = "sql"\ncache_salt = "s"',
            STEP,
            'op = "abort"\nid = "A"',
            'op = "reset"\nrunning = true',
        )
    )
    n = sc.normalized(None)
    assert n["kind"] == "engine_steps"
    assert n["engine"] == {
        **{k: v for k, v in sc.engine.as_dict().items() if k != "hash_seed"},
        "hash_seed": None,
        "scheduler": "sync",
        "max_num_batched_tokens": 2048,
        "max_num_seqs": 64,
        "long_prefill_token_threshold": 0,
    }
    assert n["ops"] == [
        {
            "op": "arrive",
            "id": "A",
            "prompt": list(range(30)),
            "output": [500, 501, 502],
            "lora": {"name": "sql", "id": 1, "path": "loras/sql"},
            "cache_salt": "s",
            "prompt_logprobs": False,
        },
        {"op": "step"},
        {"op": "abort", "id": "A"},
        {"op": "reset", "running": True, "external": False},
    ]


def test_replay_json_of_a_step_and_the_final_requests() -> None:
    sc = parse_scenario_text(steps(ARRIVE, STEP, STEP, 'op = "reset"', 'op = "abort"\nid = "A"', STEP))
    out = replay(sc, record=False).to_json()
    arrive, s1, s2, reset, abort, s3 = out["steps"]
    assert arrive == {"op": "arrive", "id": "A", "ok": True, "events": []}
    assert {k: s1[k] for k in ("op", "id", "ok", "scheduled", "outputs", "preempted", "finished")} == {
        "op": "step",
        "id": None,
        "ok": True,
        "scheduled": {"A": 30},
        "outputs": {"A": [500]},
        "preempted": [],
        "finished": [],
    }
    assert [e["type"] for e in s1["events"]] == ["BlockStored"]
    assert s1["step_stats"] == {
        "requests": 1,
        "queries": 30,
        "hits": 0,
        "preempted_requests": 0,
        "preempted_queries": 0,
        "preempted_hits": 0,
    }
    assert s2["scheduled"] == {"A": 1} and s2["outputs"] == {"A": [501]}
    assert reset == {"op": "reset", "id": None, "ok": False, "events": []}  # A holds blocks: refused
    assert abort == {"op": "abort", "id": "A", "ok": True, "events": []}  # its effects come with the step
    assert s3["scheduled"] == {} and s3["finished"] == [] and s3["step_stats"]["requests"] == 0
    assert out["final"]["requests"] == {} and out["final"]["reset_ok"] == [False]


def test_final_requests_carry_status_and_num_output_tokens() -> None:
    sc = parse_scenario_text(
        steps(
            ARRIVE, 'op = "arrive"\nid = "B"\nprompt = "100:140"\noutput = "7"', STEP, head=HEAD + "max_num_seqs = 1\n"
        )
    )
    final = replay(sc, record=False).to_json()["final"]
    assert final["requests"]["A"]["status"] == "running" and final["requests"]["A"]["num_output_tokens"] == 1
    assert final["requests"]["B"] == {
        "block_ids": [],
        "num_computed_tokens": 0,
        "block_hashes": final["requests"]["B"]["block_hashes"],
        "status": "waiting",
        "num_output_tokens": 0,
    }
    assert len(final["requests"]["B"]["block_hashes"]) == 2


def test_expect_keys_of_a_step_are_checked(tmp_path: Path) -> None:
    ok = steps(
        ARRIVE,
        STEP + '\nexpect = { scheduled = { A = 30 }, preempted = [], finished = [], event_types = ["BlockStored"] }',
        STEP + "\nexpect = { stats_requests = 1, stats_queries = 30, num_free_blocks = 17 }",
    )
    assert run(write(tmp_path, ok), "--json").returncode == 0
    bad = steps(ARRIVE, STEP + '\nexpect = { scheduled = { A = 16 }, finished = ["A"] }')
    proc = run(write(tmp_path, bad, "bad.toml"), "--json")
    assert proc.returncode == 1 and json.loads(proc.stdout)["steps"][1]["scheduled"] == {"A": 30}
    failures = [line for line in proc.stderr.splitlines() if line.startswith("expect failed")]
    assert len(failures) == 2 and "expected scheduled = {'A': 16}, got {'A': 30}" in failures[0]


def test_async_stats_totals_count_admissions_not_yet_updated() -> None:
    sc = parse_scenario_text(
        steps(
            ARRIVE, STEP + "\nexpect = { stats_requests = 1, stats_queries = 30 }", head=HEAD.replace("sync", "async")
        )
    )
    trace = replay(sc, record=False)
    assert not trace.expect_failures
    first = trace.to_json()["steps"][1]
    assert first["step_stats"] is None and first["outputs"] == {}  # the batch queue fills
    assert trace.to_json()["final"]["stats"]["requests"] == 1


def test_an_engine_step_scenario_round_trips_through_toml_and_replays_recorded_the_same() -> None:
    sc = parse_scenario_text(steps(ARRIVE, STEP, STEP, head=HEAD + "max_num_batched_tokens = 64\n"))
    again = parse_scenario_text(scenario_to_toml(sc))
    assert again.normalized(None) == sc.normalized(None)
    assert replay(sc).to_json() == replay(sc, record=False).to_json()
    longer = with_steps(sc, [{"op": "step"}])
    assert longer.sched == sc.sched and len(longer.ops) == 4


def test_a_recorded_step_keeps_the_batch_and_why_requests_were_preempted() -> None:
    head = '[engine]\nblock_size = 16\nnum_blocks = 6\nscheduler = "sync"\n'
    sc = parse_scenario_text(
        steps(
            'op = "arrive"\nid = "A"\nprompt = "0:32"\noutput = "1*20"',
            'op = "arrive"\nid = "B"\nprompt = "100:132"\noutput = "2*20"',
            STEP,
            STEP,
            head=head,
        )
    )
    step = replay(sc).steps[3]
    assert step.preempted == ("B",)
    assert step.engine_step is not None
    assert step.engine_step.preemption_reasons == (("B", "allocate_slots for B (1 tokens) found no room"),)
    assert [(b.request_id, b.num_tokens, b.is_prefill_chunk) for b in step.engine_step.batch] == [("A", 1, False)]


def test_randomly_generated_manager_scenarios_are_unchanged_by_the_new_kind() -> None:
    """A manager-level scenario keeps its normalized form: no kind, no scheduler keys."""
    sc = parse_scenario_dict({"steps": [{"op": "arrive", "id": "A", "prompt": "0:4"}, {"op": "reset"}]})
    assert sc.normalized(None) == {
        "engine": {**sc.engine.as_dict(), "hash_seed": None},
        "ops": [
            {"op": "arrive", "id": "A", "prompt": [0, 1, 2, 3], "lora": None, "cache_salt": None, "mm": []}
            | {"prompt_logprobs": False},
            {"op": "reset", "running": False},
        ],
    }
    with pytest.raises(BadInput, match="external"):
        parse_scenario_dict({"steps": [{"op": "reset", "external": True}]})


def test_the_engine_step_bench_scenario_preempts_and_drains() -> None:
    from explorer.bench import engine_step_raw

    for scheduler in ("async", "sync"):
        raw = engine_step_raw(0, scheduler)
        out = replay(parse_scenario_dict(raw), record=False).to_json()
        assert out["final"]["requests"] == {}  # every request done
        assert sum(len(s.get("preempted", ())) for s in out["steps"]) > 0
        assert out["final"]["stats"]["requests"] == 64 and out["final"]["stats"]["hits"] > 0


def test_engine_for_picks_the_replay_of_the_scenario_kind() -> None:
    from explorer.scenario.engine import ScenarioEngine, engine_for
    from explorer.scenario.engine_steps import EngineStepReplay

    step_scenario = parse_scenario_text(steps(ARRIVE, STEP))
    engine = engine_for(step_scenario)
    assert isinstance(engine, EngineStepReplay)
    trace = engine.trace(engine.snapshot(), [engine.apply(op) for op in step_scenario.ops])
    assert trace.to_json() == replay(step_scenario).to_json()
    manager = parse_scenario_text('[[steps]]\nop = "arrive"\nid = "A"\nprompt = "0:4"\n')
    assert isinstance(engine_for(manager), ScenarioEngine)
    with pytest.raises(ValueError, match="engine-step"):
        ScenarioEngine(step_scenario)


def test_a_recorded_reset_keeps_who_it_preempted_and_the_json_does_not_show_it() -> None:
    sc = parse_scenario_text(
        steps(
            ARRIVE, 'op = "arrive"\nid = "B"\nprompt = "100:140"\noutput = "7:9"', STEP, 'op = "reset"\nrunning = true'
        )
    )
    trace = replay(sc)
    assert trace.steps[3].preempted == ("B", "A") and trace.steps[3].ok
    assert trace.to_json()["steps"][3] == {"op": "reset", "id": None, "ok": True, "events": []}
