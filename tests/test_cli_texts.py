"""What the command line and the panels say in words: every option has help, the connector shows
in `run`'s text, `hash` says why a table is empty and which seed xxhash drew, and the allocation
panel's count of new blocks is the number of blocks that left the free queue."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from explorer.cli import build_parser, main
from explorer.scenario.cli import render_text
from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario
from explorer.scenario.records import Freed
from explorer.view.explain.engine_step import panels
from tests.step_records import from_free_ids

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "scenario" / "golden" / "engine_steps"


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    p = build_parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


@pytest.mark.parametrize("name", sorted(_subcommands()))
def test_every_option_of_every_command_says_what_it_is(name):
    for action in _subcommands()[name]._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        assert action.help, f"explorer {name}: {action.option_strings or action.dest} has no help"


@pytest.mark.parametrize("spec,said", [("0:2", "2 tokens make"), ("0:1", "1 token makes")])
def test_hash_says_why_no_block_was_hashed(capsys, spec, said):
    assert main(["hash", "--tokens", spec]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["blocks"] == []
    assert f"note: {said} no full block of 16" in out.err


def test_hash_names_the_seed_xxhash_drew_and_it_repeats(capsys):
    assert main(["hash", "--tokens", "0:32", "--algo", "xxhash"]) == 0
    first = capsys.readouterr()
    seed = re.search(r"pass --seed (\S+) to get", first.err)
    assert seed is not None and seed.group(1) == json.loads(first.out)["hash_seed"]
    assert main(["hash", "--tokens", "0:32", "--algo", "xxhash", "--seed", seed.group(1)]) == 0
    again = capsys.readouterr()
    assert json.loads(again.out) == json.loads(first.out) and "random seed" not in again.err


def test_run_text_shows_the_connector():
    text = render_text(replay(load_scenario(ROOT / "lessons" / "18_external_tier.toml")))
    assert "A: local hit 0 tokens, external 64 tokens loaded asynchronously (WAITING_FOR_REMOTE_KVS)" in text
    assert "A: remote KV loaded (64 tokens computed)" in text
    failed = render_text(replay(load_scenario(GOLDEN / "connector_failed_load_fail_sync.toml")))
    assert "load FAILED" in failed


def test_a_one_token_batch_is_one_token():
    text = render_text(replay(load_scenario(ROOT / "lessons" / "15_async_hash_later.toml")))
    assert "batch of 1 token:" in text and "batch of 1 tokens" not in text


@pytest.mark.parametrize("stem,k", [("19_cpu_offloading", 8), ("18_external_tier", 5), ("14_engine_step", 12)])
def test_the_allocation_panel_counts_the_blocks_that_left_the_free_queue(stem, k):
    trace = replay(load_scenario(ROOT / "lessons" / f"{stem}.toml"))
    step = trace.steps[k - 1]
    left = trace.snapshot_at(k - 1).num_free_blocks - trace.snapshot_at(k).num_free_blocks
    freed = sum(1 for f in step.of(Freed) if f.to != "held")
    # The queue lost the new blocks and the touched hits it held, and got the freed blocks back.
    popped = left + freed - len(from_free_ids(step))
    panel = next(p for p in panels(trace, k) if p.key == "allocate")
    text = panel.text if isinstance(panel.text, str) else " ".join(panel.text)
    said = [int(m.group(1)) for m in re.finditer(r"(\d+) new blocks?", text)]
    assert said == [popped], (panel.text, left, freed)


def test_an_empty_window_shows_no_rate():
    from explorer.viz.state_html import stat_cells

    trace = replay(load_scenario(ROOT / "lessons" / "10_metrics.toml"))
    for k in range(len(trace.steps) + 1):
        snap, prev = trace.snapshot_at(k), trace.snapshot_at(max(0, k - 1))
        window = next(c for c in stat_cells(snap, prev) if c[0] == "window")
        assert (window[2] == "none") == (snap.window_requests == 0)
