"""The explorer page draws hybrid KV cache groups (design section 8) from what each step
recorded: each group's own hit and every pass of the fixed point, one block-table row per group
with the null blocks, retention's choice and reason, the blocks freed below a window, the pool
coloured by group."""

from __future__ import annotations

import re

from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario
from explorer.scenario.records import GroupLookup, Retention, SkippedFreed
from tests.ui.helpers import ROOT, all_html, explorer, step_through_lesson, step_to

LESSON = "16_sliding_window"


def _trace():
    return replay(load_scenario(ROOT / "lessons" / f"{LESSON}.toml"))


def test_every_step_of_the_sliding_window_lesson_renders_its_groups():
    trace = _trace()
    for k, step, at in step_through_lesson(LESSON):
        html = all_html(at)
        # a block-table row per group for every live request, its null blocks counted
        for r in trace.snapshot_at(k).requests:
            for gid, ids in enumerate(r.block_ids_by_group):
                assert f'data-px-group-row="{r.request_id}:{gid}:{ids.count(0)}"' in html, (k, r.request_id, gid)
        assert 'data-px-pool-groups="1"' in html
        for lookup in step.of(GroupLookup):
            assert f'data-px-group-lookup="{lookup.request_id}"' in html
            assert f'data-px-reconciled="{lookup.hit_tokens}"' in html
            shown = re.findall(r'data-px-group-hit="(\d+):(\d+)"', html)
            assert [int(h) for _, h in shown] == list(lookup.group_hit_tokens), k
            passes = re.findall(r'data-px-pass="([^"]+)"', html)
            assert len(passes) == len(lookup.calls), k
        for r in step.of(Retention):
            assert f'data-px-retention="{r.request_id}:{r.group_id}"' in html, k
        for sf in step.of(SkippedFreed):
            assert f'data-px-skipped="{sf.request_id}:{sf.group_id}"' in html, k


def test_c_shows_128_alone_and_96_reconciled_with_its_boundary():
    at = step_to(explorer({"lesson": LESSON}), 6)
    html = all_html(at)
    assert 'data-px-group-hit="0:128"' in html and 'data-px-group-hit="1:96"' in html
    assert 'data-px-reconciled="96"' in html and 'data-px-spb="128"' in html
    assert "shared_prefix_boundary 128" in html


def test_retention_says_why_and_the_decode_frees_below_the_window():
    at = explorer({"lesson": LESSON})
    html = all_html(step_to(at, 2))
    assert 'data-px-retained="4:1"' in html and 'data-px-retained="3:0"' in html
    assert "retention 0 (the engine default)" in html
    html = all_html(step_to(at, 12))
    assert 'data-px-skipped="A:1"' in html and "last skipped first" in html


def test_a_scenario_without_groups_draws_no_group_panel():
    html = all_html(step_to(explorer({"lesson": "00_two_chat_turns"}), 2))
    assert "data-px-group-row" not in html and 'data-px-panel="groups"' not in html


def test_group_html_escapes_request_ids_and_draws_engine_step_lookups():
    from explorer.scenario.parse import parse_scenario_text
    from explorer.viz.groups_html import group_tables_html, lookup_html, retention_html

    text = (ROOT / "tests" / "scenario" / "golden" / "engine_steps" / "hybrid_rule67_sync.toml").read_text()
    trace = replay(parse_scenario_text(text.replace('id = "C"', 'id = "<b>C</b>"')))
    specs = trace.scenario.groups.groups
    html = ""
    for k, step in enumerate(trace.steps, start=1):
        html += "".join(lookup_html(lk, specs) for lk in step.of(GroupLookup)) + retention_html(step.of(Retention))
        html += group_tables_html(trace.snapshot_at(k), specs)
    assert "<b>C</b>" not in html and "&lt;b&gt;C&lt;/b&gt;" in html
    assert 'data-px-group-hit="0:128"' in html and 'data-px-spb="128"' in html
