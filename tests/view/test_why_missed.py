"""The lookup panel's "Why it missed" part (explorer.view.why_missed): drawn from each lookup's
miss record, in every lesson; the cells are the record's reasons, the sentence is the record's,
the button goes to the step whose allocation evicted the first missed block."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from markupsafe import escape

from explorer.miss.reasons import Miss, Removal
from explorer.miss.sentence import miss_sentence
from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario
from explorer.view.stage import build_steps
from explorer.view.stage_panels import phase_panels
from explorer.view.why_missed import MAX_CELLS, blocks_html, goto_step, miss_html, step_misses
from tests.step_records import evictions

ROOT = Path(__file__).resolve().parents[2]
LESSONS = sorted((ROOT / "lessons").glob("*.toml"))


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_every_lookup_of_every_lesson_is_explained_from_its_record(path):
    trace = replay(load_scenario(path))
    bs = trace.scenario.hash_block_size
    seen = 0
    for k, step in enumerate(trace.steps, start=1):
        drawn = "".join(phase_panels(trace, k, set(), {}))
        misses = step_misses(step)
        assert ("Why it missed" in drawn) == bool(misses)
        for rid, miss in misses:
            seen += 1
            one = miss_html(rid, miss, bs)
            assert one in drawn
            cells = re.findall(r'class="px-why-cell" data-px-reason="(\w+)" data-px-index="(\d+)"', one)
            want = ["hit" if r is None else r for r in miss.block_reasons]
            if miss.num_tokens > len(want) * bs:
                tail = [r for r in ("partial_block", "skipped") if r in miss.tokens]
                want.append(tail[0] if tail else "hit")  # external tokens can cover the tail
            if len(want) <= MAX_CELLS:
                assert [r for r, _ in cells] == want
                assert [int(i) for _, i in cells] == list(range(len(want)))
            assert str(escape(miss_sentence(miss))) in one
            goto = re.findall(r'data-px-goto="(\d+)"', one)
            if miss.first_miss == "evicted":
                assert miss.evicted_by is not None
                (g,) = goto
                evictor = trace.steps[int(g) - 1]
                assert int(g) < k and evictions(evictor)  # an earlier step that popped cached blocks
                popper = miss.evicted_by.request_id
                es = evictor.engine_step  # an engine step: the popper was scheduled in it
                assert evictor.op.id == popper or (es is not None and popper in es.scheduled)
            else:
                assert goto == []
    assert seen > 0


def test_the_evicted_block_of_the_first_lesson_links_to_the_allocation_that_popped_it():
    trace = replay(load_scenario(ROOT / "lessons" / "00_two_chat_turns.toml"))
    steps = build_steps(trace, len(trace.steps))
    k, miss = next((k, s.miss) for k, s in enumerate(trace.steps, 1) if s.miss and s.miss.first_miss == "evicted")
    shown = "".join(steps.parts[i] for i in steps.steps[k])
    assert f'data-px-goto="{goto_step(miss)}"' in shown
    lost = {h for _, h in evictions(trace.steps[goto_step(miss) - 1])}  # type: ignore[operator]
    assert trace.steps[k - 1].op.op == "admit" and lost  # that step popped hashes this lookup missed


def _miss(rid: str, reasons: tuple[str | None, ...], bs: int, tail: int, by: Removal | None = None) -> Miss:
    tokens: dict[str, int] = {}
    for r in reasons:
        if r is not None:
            tokens[r] = tokens.get(r, 0) + bs
    if tail:
        tokens["partial_block"] = tail
    first = next((i for i, r in enumerate(reasons) if r is not None), None)
    hit = (first if first is not None else len(reasons)) * bs
    return Miss(
        rid,
        len(reasons) * bs + tail,
        hit,
        0,
        tokens,
        reasons,
        first,
        None if first is None else reasons[first],
        by,
    )


def test_user_strings_are_escaped():
    rid = '<img src=x onerror="alert(1)">'
    miss = _miss(rid, (None, "evicted", "never_cached"), 4, 2, Removal("evicted", 3, "<script>x</script>"))
    out = str(miss_html(rid, miss, 4))
    assert "<img" not in out and "<script>" not in out
    assert "&lt;img" in out and "&lt;script&gt;" in out
    assert 'data-px-goto="4"' in out


def test_a_long_prompt_is_drawn_as_runs_covering_every_block():
    reasons = (None,) * 150 + ("evicted",) * 40 + ("never_cached",) * 60
    out = str(blocks_html(_miss("A", reasons, 16, 5), 16))
    segs = re.findall(r'data-px-reason="(\w+)" style="flex-grow:(\d+)', out)
    assert [r for r, _ in segs] == ["hit", "evicted", "never_cached", "partial_block"]
    assert sum(int(n) for _, n in segs) == 251
    assert "px-why-cell" not in out


def test_the_extra_keys_lesson_draws_blocks_cached_under_other_keys():
    trace = replay(load_scenario(ROOT / "lessons" / "02_extra_keys.toml"))
    bs = trace.scenario.hash_block_size
    drawn = [miss_html(rid, m, bs) for s in trace.steps for rid, m in step_misses(s) if "other_keys" in m.tokens]
    assert drawn and all('data-px-reason="other_keys"' in one for one in drawn)
    assert any("cached under other extra keys" in one for one in drawn)  # the legend's label
