"""`explorer run FILE --json --records`: the replay JSON with each step's records, written from
the record types (records.record_to_json), and otherwise the same JSON key for key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from explorer.scenario import cli as scenario_cli
from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario
from explorer.scenario.records import RECORD_TYPES, record_to_json
from tests.cli_run import run_explorer

ROOT = Path(__file__).resolve().parents[2]
LESSONS = ROOT / "lessons"
GOLDEN = ROOT / "tests" / "scenario" / "golden"
# one scenario of each family the records come from: manager-level, engine steps, a sliding
# window, speculative decoding, a KV connector, CPU offloading, three hybrid groups with EAGLE
SAMPLES = [
    LESSONS / "00_two_chat_turns.toml",
    LESSONS / "07_eviction_preemption.toml",
    LESSONS / "14_engine_step.toml",
    LESSONS / "16_sliding_window.toml",
    LESSONS / "17_speculative_decoding.toml",
    LESSONS / "18_external_tier.toml",
    LESSONS / "19_cpu_offloading.toml",
    GOLDEN / "hybrid_three_groups.toml",
    GOLDEN / "hybrid_rule74_eagle_dense.toml",
]


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_records_are_added_and_nothing_else_changes(path):
    plain = run_explorer("run", path, "--json")
    with_records = run_explorer("run", path, "--json", "--records")
    assert plain.returncode == with_records.returncode == 0, (plain.stderr, with_records.stderr)
    base, full = json.loads(plain.stdout), json.loads(with_records.stdout)
    steps = full["steps"]
    written = [s.pop("records") for s in steps]
    assert full == base  # the replay JSON itself is untouched
    trace = replay(load_scenario(path))
    assert written == [[record_to_json(r) for r in s.records] for s in trace.steps]
    names = {t.__name__ for t in RECORD_TYPES}
    assert all(r["type"] in names for one in written for r in one)
    assert sum(map(len, written)) > 0


def test_the_samples_write_every_record_kind():
    seen = {type(r) for path in SAMPLES for s in replay(load_scenario(path)).steps for r in s.records}
    assert seen == set(RECORD_TYPES)


def test_the_core_order_is_kept():
    # an admit reports its lookup, then its admission check, then the blocks it popped
    out = json.loads(run_explorer("run", LESSONS / "00_two_chat_turns.toml", "--json", "--records").stdout)
    admit = next(s for s in out["steps"] if s["op"] == "admit")
    kinds = [r["type"] for r in admit["records"]]
    assert kinds.index("Lookup") < kinds.index("AdmissionCheck") < kinds.index("Popped")
    popped = [r for r in admit["records"] if r["type"] == "Popped"]
    assert [r["block_id"] for r in popped] == admit["new_block_ids"]
    assert all(r["request_id"] == admit["id"] for r in popped)


@pytest.mark.parametrize("flags", [["--records"], ["--records", "--vllm-diff"], ["--json", "--records", "--vllm-diff"]])
def test_records_without_the_replay_json_is_one_message(flags):
    run = run_explorer("run", LESSONS / "00_two_chat_turns.toml", *flags)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr == (
        "error: --records adds each step's records to the replay JSON: use it with --json, without --vllm-diff\n"
    )


def test_more_records_than_the_cap_is_one_message(monkeypatch):
    path = LESSONS / "00_two_chat_turns.toml"
    total = sum(len(s.records) for s in replay(load_scenario(path)).steps)
    monkeypatch.setattr(scenario_cli, "MAX_RECORDS_WRITTEN", total - 1)
    run = run_explorer("run", path, "--json", "--records")
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1
    assert f"hold {total:,} records, more than the {total - 1:,} `--records` writes" in run.stderr
    monkeypatch.setattr(scenario_cli, "MAX_RECORDS_WRITTEN", total)
    assert run_explorer("run", path, "--json", "--records").returncode == 0
