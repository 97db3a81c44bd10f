"""Speculative decoding in scenarios (design section 9): the worked example, rules 72-74's
vectors, the `run` output, and every refusal as one line of bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from explorer.errors import BadInput
from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario, parse_scenario_text
from explorer.scenario.write import scenario_to_toml
from tests.cli_run import run_explorer

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "scenario" / "golden"
SPEC = 'speculative = { method = "eagle", num_speculative_tokens = 3 }'


def test_the_worked_example_of_the_proposal():
    """Spec part 2's example, 8 steps: hits 80 and 0 (the drop), no event for the draft decode,
    block 1 hashed once known; R ends at 37 computed tokens; stats 3 / 280 / 80."""
    trace = replay(load_scenario(GOLDEN / "eagle_worked_example.toml"))
    assert trace.expect_failures == []
    out = trace.to_json()
    admits = [s for s in out["steps"] if s["op"] == "admit"]
    assert [s["hit_tokens"] for s in admits] == [0, 80, 0]
    assert [s["new_block_ids"] for s in admits] == [[1, 2, 3, 4, 5, 6, 7], [7, 8, 9, 10, 11], [12, 13, 14]]
    assert [len(s["events"][0]["block_hashes"]) for s in admits] == [6, 4, 1]
    decodes = [s for s in out["steps"] if s["op"] == "decode"]
    assert decodes[0]["events"] == [] and len(decodes[1]["events"][0]["token_ids"]) == 16
    assert out["final"]["requests"]["R"]["num_computed_tokens"] == 37
    stats = out["final"]["stats"]
    assert (stats["requests"], stats["queries"], stats["hits"]) == (3, 280, 80)
    # The same scenario without drafts hits 96 and hashes nothing less.
    plain = parse_scenario_text(
        (GOLDEN / "eagle_worked_example.toml").read_text().replace(SPEC, "").replace("draft_tokens = 3", "")
    )
    assert [s.hit_tokens for s in replay(plain).steps if s.op.op == "admit"] == [0, 96, 16]


def test_rule_74_the_drop_through_the_scheduler():
    trace = replay(load_scenario(GOLDEN / "engine_steps" / "eagle_hit_drop.toml"))
    assert trace.expect_failures == []
    hits = [s.engine_step.step_stats["hits"] for s in trace.steps if s.engine_step and s.engine_step.step_stats]
    assert hits == [0, 80, 80, 0]


def test_rule_72_sync_table_with_drafts():
    """exp_c2_eagle, sync: step 2 schedules 1 + 3, reaches 34 computed and hashes nothing;
    the rollback leaves 33; block 1 is hashed in step 3."""
    trace = replay(load_scenario(GOLDEN / "engine_steps" / "eagle_drafts_sync.toml"))
    assert trace.expect_failures == []
    steps = [s for s in trace.steps if s.op.op == "step"]
    assert [dict(s.engine_step.scheduled) for s in steps[:3]] == [{"R": 30}, {"R": 4}, {"R": 4}]
    assert steps[1].engine_step.outputs == {"R": (501, 502, 503)}
    assert [r.num_computed_tokens for r in steps[1].engine_step.batch] == [34]
    assert [sum(len(e.block_hashes) for e in s.events) for s in steps[:3]] == [1, 0, 1]
    after = trace.snapshot_at(steps[1].index + 1)
    assert [r for r in after.requests if r.request_id == "R"][0].num_computed_tokens == 33


def test_a_speculative_scenario_writes_back_out_unchanged():
    for path in (GOLDEN / "eagle_worked_example.toml", GOLDEN / "engine_steps" / "eagle_drafts_sync.toml"):
        scenario = load_scenario(path)
        again = parse_scenario_text(scenario_to_toml(scenario), str(path))
        assert again.speculative == scenario.speculative and again.ops == scenario.ops


def test_run_prints_json_and_text(tmp_path):
    path = GOLDEN / "eagle_worked_example.toml"
    for args in (["--json"], []):
        done = run_explorer("run", str(path), *args, cwd=REPO)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip()


MANAGER = """
[engine]
{engine}
[[steps]]
op = "arrive"
id = "R"
prompt = "0:30"
[[steps]]
op = "admit"
id = "R"
[[steps]]
op = "sample"
id = "R"
tokens = [1]
{steps}
"""
STEPS = """
[engine]
scheduler = "sync"
{engine}
[[steps]]
op = "arrive"
id = "R"
prompt = "0:30"
output = [1, 2]
{arrive}
[[steps]]
op = "step"
"""
DECODE = '[[steps]]\nop = "decode"\nid = "R"\ndraft_tokens = 2\n'


def test_drafts_under_the_async_scheduler_parse():
    """Async is the default scheduler, and drafts are modelled under it (design section 9)."""
    for text in (
        STEPS.format(engine=SPEC, arrive="accepted = [1]").replace('"sync"', '"async"'),
        STEPS.format(engine=SPEC, arrive="accepted = [1]").replace('scheduler = "sync"\n', ""),
    ):
        scenario = parse_scenario_text(text, "s.toml")
        assert scenario.sched is not None and scenario.sched.scheduler == "async"
        assert scenario.speculative is not None and scenario.speculative.method == "eagle"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (MANAGER.format(engine="", steps=DECODE), "draft_tokens: needs engine.speculative"),
        (STEPS.format(engine="", arrive="accepted = [1]"), "accepted: needs engine.speculative"),
        (
            STEPS.format(engine=SPEC.replace("eagle", "ngram"), arrive="").replace('"sync"', '"async"'),
            "vLLM refuses async scheduling with 'ngram'",
        ),
        (
            STEPS.format(engine=SPEC.replace("eagle", "ngram"), arrive="").replace('scheduler = "sync"\n', ""),
            "vLLM refuses async scheduling with 'ngram'",
        ),
        (MANAGER.format(engine=SPEC.replace("eagle", "mtp"), steps=""), "vLLM refuses 'mtp' for this model"),
        (MANAGER.format(engine=SPEC.replace("eagle", "dflash"), steps=""), "vLLM refuses 'dflash'"),
        (MANAGER.format(engine=SPEC.replace("eagle", "medusa"), steps=""), "unknown method 'medusa'"),
        (MANAGER.format(engine=SPEC.replace("3", "0"), steps=""), "num_speculative_tokens: expected an integer"),
        (MANAGER.format(engine=SPEC.replace("3", "true"), steps=""), "num_speculative_tokens: expected an integer"),
        (MANAGER.format(engine='speculative = { method = "eagle" }', steps=""), "missing `num_speculative_tokens`"),
        (MANAGER.format(engine='speculative = "eagle"', steps=""), "expected a table"),
        (MANAGER.format(engine=SPEC.replace("}", ", k = 1 }"), steps=""), "unknown key 'k'"),
        (
            MANAGER.format(engine=SPEC, steps=DECODE.replace("2", "4")),
            "draft_tokens: 4 is out of range|expected an integer in",
        ),
        (
            MANAGER.format(engine=SPEC, steps=DECODE + '[[steps]]\nop = "finish"\nid = "R"\n'),
            "its next op must be `sample`",
        ),
        (
            MANAGER.format(engine=SPEC, steps=DECODE + '[[steps]]\nop = "decode"\nid = "R"\n'),
            "its next op must be `sample`",
        ),
        (
            MANAGER.format(engine=SPEC, steps=DECODE + '[[steps]]\nop = "sample"\nid = "R"\ntokens = [1, 2, 3, 4]\n'),
            "4 tokens after a decode of 2 drafts: expected 1 to 3",
        ),
        (
            MANAGER.format(engine=SPEC, steps="").replace('prompt = "0:30"', 'prompt = "0:30"\naccepted = [1]'),
            "only an engine-step scenario",
        ),
        (STEPS.format(engine=SPEC, arrive="accepted = [4]"), "accepted: expected an integer in \\[0, 3\\]"),
        (STEPS.format(engine=SPEC, arrive="accepted = [1, 1, 1]"), "3 entries, more than the 2 decode steps"),
        (STEPS.format(engine=SPEC, arrive="accepted = 1"), "expected an array"),
        (
            STEPS.format(engine=SPEC.replace("eagle", "draft_model"), arrive="").replace(
                'scheduler = "sync"', 'scheduler = "sync"\nmax_num_batched_tokens = 1\nmax_num_seqs = 1'
            ),
            "not enough slots",
        ),
    ],
)
def test_bad_input(text, message):
    with pytest.raises(BadInput, match=message):
        parse_scenario_text(text, "s.toml")


def test_the_cli_refuses_in_one_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(MANAGER.format(engine="", steps=DECODE))
    done = run_explorer("run", str(path), cwd=REPO)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "draft_tokens: needs engine.speculative" in done.stderr


def test_a_decode_whose_drafts_reach_max_model_len_is_bad_input():
    text = MANAGER.format(engine=SPEC + "\nmax_model_len = 33", steps=DECODE)
    with pytest.raises(BadInput, match="draft_tokens: 31 tokens \\+ 2 drafts reach max_model_len = 33"):
        replay(parse_scenario_text(text, "s.toml"))


def test_a_reset_that_preempts_drops_the_pending_drafts():
    steps = DECODE + '[[steps]]\nop = "reset"\nrunning = true\n'
    trace = replay(parse_scenario_text(MANAGER.format(engine=SPEC, steps=steps), "s.toml"))
    assert trace.steps[-1].preempted == ("R",)


def test_the_snapshot_budget_counts_draft_positions_and_lookahead_slots():
    from explorer.scenario.budget import snapshot_cells

    text = MANAGER.format(engine="block_size = 1", steps="")
    plain = snapshot_cells(parse_scenario_text(text, "s.toml"), record=True)
    spec = snapshot_cells(
        parse_scenario_text(text.replace("block_size = 1", "block_size = 1\n" + SPEC), "s.toml"), True
    )
    # Per snapshot with R live (3 of the 4), 7 more entries: 3 draft positions and 4 slots.
    assert spec - plain == 3 * 7
