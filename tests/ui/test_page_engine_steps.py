"""The explorer page on engine-step scenarios: every step of the two engine-step lessons renders,
and the batch panel shows what the step record says (scheduled tokens, the budget, who was
preempted and the allocation that failed, the tokens in flight under async scheduling)."""

from __future__ import annotations

import re

import pytest

from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario
from explorer.scenario.records import AdmissionCheck
from explorer.ui.lesson_files import ENGINE_STEPS, MANAGER_OPS, list_lessons
from explorer.ui.state import ViewState
from tests.ui.helpers import (
    ROOT,
    all_html,
    app_page,
    bound,
    errors,
    explorer,
    n_steps,
    no_exception,
    step_through_lesson,
    step_to,
)

ENGINE_LESSONS = ["14_engine_step", "15_async_hash_later"]


def _trace(name: str):
    return replay(load_scenario(ROOT / "lessons" / f"{name}.toml"))


@pytest.mark.parametrize("name", ENGINE_LESSONS)
def test_every_step_of_an_engine_step_lesson_renders(name):
    trace = _trace(name)
    for k, step, at in step_through_lesson(name):
        html = all_html(at)
        assert f'data-px-now="{k}"' in html
        if step.op.op == "step":
            es = step.engine_step
            assert 'data-px-panel="batch"' in html, k
            used = sum(es.scheduled.values())
            assert f'data-px-budget="{used}/{trace.scenario.sched.max_num_batched_tokens}"' in html, k
            shown = dict(re.findall(r'data-px-sched="([^":]+):(\d+)"', html))
            assert {r: int(n) for r, n in shown.items()} == dict(es.scheduled), k
            assert f'data-px-events="{len(step.events)}"' in html, k
            assert re.findall(r'data-px-preempted="([^"]+)"', html) == list(step.preempted), k
            assert re.findall(r'data-px-finished="([^"]+)"', html) == list(es.finished), k
        else:
            assert 'data-px-panel="batch"' not in html, k


def test_the_shared_budget_step_shows_both_requests_and_the_full_budget():
    at = explorer({"lesson": "14_engine_step", "step": "4"})
    html = all_html(at)
    assert 'data-px-budget="64/64"' in html
    assert 'data-px-sched="A:44"' in html and 'data-px-sched="B:20"' in html
    rows = re.findall(r'<tr data-px-sched="(\w):\d+">(.*?)</tr>', html)
    kinds = {rid: ("prefill chunk" in row, "last chunk" in row) for rid, row in rows}
    assert kinds == {"A": (False, True), "B": (True, False)}
    assert "44 (prefill (last chunk))" in html and "B 20 (prefill chunk)" in html


def test_the_preemption_step_shows_the_victim_its_reason_and_the_failed_allocation():
    trace = _trace("14_engine_step")
    step = trace.steps[8]
    assert step.preempted == ("B",)
    reason = dict(step.engine_step.preemption_reasons)["B"]
    failed = [a for a in step.of(AdmissionCheck) if not a.ok]
    at = explorer({"lesson": "14_engine_step", "step": "9"})
    html = all_html(at)
    assert 'data-px-preempted="B"' in html and reason in html
    assert [f'data-px-failed="{a.request_id}"' for a in failed] == re.findall(r'data-px-failed="[^"]+"', html)
    a = failed[0]
    assert f"{a.num_required_blocks} &gt; {a.num_free_blocks} free" in html
    assert 'data-px-budget="1/64"' in html


def test_async_in_flight_tokens_and_block_1_hashed_one_step_later():
    # k = 4: the third engine step; block 1 is full of known tokens but not cached yet.
    html = all_html(explorer({"lesson": "15_async_hash_later", "step": "4"}))
    assert 'data-px-inflight="A:1:0"' in html and "? = a placeholder" in html
    assert "31 tokens known when this batch was planned, 2 in flight" in html
    # k = 5: the fourth engine step's allocation caches block 1.
    html = all_html(explorer({"lesson": "15_async_hash_later", "step": "5"}))
    assert 'data-px-inflight="A:2:0"' in html and 'data-px-inflight="A:1:' not in html
    assert 'data-px-panel="caching"' in html
    assert "data-px-inflight" not in all_html(explorer({"lesson": "14_engine_step", "step": "6"}))  # sync


def test_request_ids_and_reasons_are_escaped():
    toml = (
        "[engine]\nmax_num_batched_tokens = 16\nmax_num_seqs = 4\nnum_blocks = 4\n"
        '[[steps]]\nop = "arrive"\nid = "<b>x</b>"\nprompt = "0:40"\noutput = "1:3"\n'
        '[[steps]]\nop = "arrive"\nid = "<i>y</i>"\nprompt = "100:140"\noutput = "1:3"\n'
        + '[[steps]]\nop = "step"\n'
        * 6
    )
    view = ViewState(lesson=None, upload=("evil.toml", toml.encode()))
    at = explorer(view=view)
    no_exception(at)
    assert errors(at) == [] and n_steps(at) == 8
    seen = ""
    for k in range(1, 9):
        at = step_to(at, k)
        no_exception(at)
        html = all_html(at)
        assert "<b>x</b>" not in html and "<i>y</i>" not in html, k
        seen += html
    assert re.findall(r"data-px-sched=\"[^\"]*\"", seen)[:1] == ['data-px-sched="&lt;b&gt;x&lt;/b&gt;:16"']


def test_a_manager_level_lesson_draws_no_batch():
    html = all_html(explorer({"lesson": "00_two_chat_turns", "step": "2"}))
    assert "data-px-panel" in html and 'data-px-panel="batch"' not in html and "data-px-budget" not in html


def test_the_lessons_page_says_which_kind_each_lesson_is():
    at = app_page("explorer/ui/pages/lessons.py").run()
    radio = bound(at, "radio", "lessons_w_pick")
    kinds = [label.rsplit(" · ", 1)[1] for label in radio.options]
    lessons = list_lessons()
    assert kinds == [lf.kind for lf in lessons] and set(kinds) == {ENGINE_STEPS, MANAGER_OPS}
    assert {"14_engine_step", "15_async_hash_later"} <= {lf.stem for lf in lessons if lf.kind == ENGINE_STEPS}
    at = radio.set_value("14_engine_step").run()
    assert f'data-px-lesson-kind="{ENGINE_STEPS}"' in all_html(at)
    at = bound(at, "radio", "lessons_w_pick").set_value("00_two_chat_turns").run()
    assert f'data-px-lesson-kind="{MANAGER_OPS}"' in all_html(at)
