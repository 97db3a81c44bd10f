"""The stage's whole walk (explorer.view.stage) as plain functions: every step drawn once, parts
shared between steps, the block histories the browser shows, and autoescaping of user strings."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario, parse_scenario_text
from explorer.view.history import block_history, changed_blocks, holders_of
from explorer.view.stage import build_steps, history_table

ROOT = Path(__file__).resolve().parents[2]
LESSONS = sorted((ROOT / "lessons").glob("*.toml"))


def _shown(steps, k: int) -> str:
    return "".join(steps.parts[i] for i in steps.steps[k])


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_every_step_of_every_lesson_is_drawn_once(path):
    trace = replay(load_scenario(path))
    n = len(trace.steps)
    steps = build_steps(trace, n)
    assert len(steps.steps) == n + 1 and steps.num_blocks == len(trace.initial.blocks)
    assert len(set(steps.parts)) == len(steps.parts)  # each distinct part once
    for k in range(n + 1):
        html = _shown(steps, k)
        assert html.count('class="px-now"') == 1 and f'data-px-now="{k}"' in html
        assert f"Step {k} of {n}" in html
        assert html.count("data-px-history-slot") == 1  # where the browser puts a block's history
    presenter = build_steps(trace, n, presenter=True)
    assert all('data-px-pres="metrics"' in _shown(presenter, k) for k in range(n + 1))


def test_parts_that_do_not_change_are_shared_between_steps():
    trace = replay(load_scenario(ROOT / "lessons" / "00_two_chat_turns.toml"))
    steps = build_steps(trace, len(trace.steps))
    refs = sum(len(s) for s in steps.steps)
    assert len(steps.parts) < refs  # the history slot at least, and every unchanged view


@pytest.mark.parametrize("stem", ["00_two_chat_turns", "07_eviction_preemption", "14_engine_step"])
def test_the_shared_history_walk_is_the_single_blocks_walk(stem):
    trace = replay(load_scenario(ROOT / "lessons" / f"{stem}.toml"))
    holders = [holders_of(trace.snapshot_at(k)) for k in range(len(trace.steps) + 1)]
    changed = [changed_blocks(trace, k) for k in range(len(trace.steps) + 1)]
    pairs = [{b: trace.snapshot_at(k).blocks[b] for b in changed[k]} for k in range(len(trace.steps) + 1)]
    for b in range(len(trace.initial.blocks)):
        alone = block_history(trace, b)
        assert block_history(trace, b, holders, changed) == alone
        assert block_history(trace, b, holders, changed, {}, pairs) == alone  # no state read again


def test_the_histories_cover_every_block_a_step_changed_and_name_each_rows_step():
    trace = replay(load_scenario(ROOT / "lessons" / "07_eviction_preemption.toml"))
    steps = build_steps(trace, len(trace.steps))
    touched = set().union(*(changed_blocks(trace, k) for k in range(len(trace.steps) + 1)))
    assert set(steps.histories) == {str(b) for b in touched}
    for b, table in steps.histories.items():
        rows = re.findall(r'<tr data-px-step="(\d+)">', table)
        assert [int(r) for r in rows] == [e.step for e in block_history(trace, int(b))]
    assert "Nothing has happened" in history_table(trace, 0)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.handlers: list[str] = []  # on* attributes: a hostile string that became markup

    def handle_starttag(self, tag, attrs) -> None:
        self.handlers += [f"{tag} {name}" for name, _ in attrs if name.lower().startswith("on")]


def test_user_strings_are_text_in_every_part_and_history():
    evil = "<img src=x onerror=alert(1)>"
    toml = (
        f'title = "t"\n[[steps]]\nop = "arrive"\nid = "{evil}"\nprompt = "0:40"\n'
        f'[[steps]]\nop = "admit"\nid = "{evil}"\n[[steps]]\nop = "finish"\nid = "{evil}"\n'
    )
    trace = replay(parse_scenario_text(toml, "evil.toml"))
    steps = build_steps(trace, len(trace.steps), presenter=False)
    for body in [*steps.parts, *steps.histories.values()]:
        parser = _Tags()
        parser.feed(body)
        assert parser.handlers == [] and evil not in body
    assert any("&lt;img src=x onerror=alert(1)&gt;" in p for p in steps.parts)


def test_a_stage_bigger_than_a_view_may_hold_is_one_message(monkeypatch):
    import pytest

    from explorer.errors import BadInput
    from explorer.scenario.engine import replay
    from explorer.scenario.parse import load_scenario
    from explorer.view import stage as stage_mod

    trace = replay(load_scenario(stage_mod.__file__.rsplit("/explorer/", 1)[0] + "/lessons/00_two_chat_turns.toml"))
    full = stage_mod.build_steps(trace, len(trace.scenario.ops))
    size = sum(map(len, full.parts)) + sum(map(len, full.histories.values()))
    monkeypatch.setattr(stage_mod, "MAX_STAGE_CHARS", size - 1)  # one character short of this lesson
    with pytest.raises(BadInput, match="more than the explorer keeps for one view"):
        stage_mod.build_steps(trace, len(trace.scenario.ops))
    monkeypatch.setattr(stage_mod, "MAX_STAGE_CHARS", size)
    assert stage_mod.build_steps(trace, len(trace.scenario.ops)).parts == full.parts
