"""The explorer page on speculative decoding (design section 9): the speculative-decoding panel
of lesson 17 draws what each step's records say (the hit block EAGLE dropped, the lookahead
slots, the drafts accepted and rolled back), and nothing on a step where drafts did nothing."""

from __future__ import annotations

import re

from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario
from explorer.scenario.records import AdmissionCheck, DraftsVerified, EagleDropped
from explorer.viz.spec_decode_html import spec_decode_html
from tests.ui.helpers import ROOT, all_html, now_text, step_through_lesson

LESSON = "17_speculative_decoding"


def test_every_step_of_the_lesson_draws_what_its_records_say():
    trace = replay(load_scenario(ROOT / "lessons" / f"{LESSON}.toml"))
    for k, step, at in step_through_lesson(LESSON):
        html = all_html(at)
        drops, verified = step.of(EagleDropped), step.of(DraftsVerified)
        assert re.findall(r'data-px-eagle-drop="(\d+)"', html) == [str(d.block_id) for d in drops], k
        drafts = re.findall(r'data-px-drafts="([^"]+)"', html)
        assert drafts == [f"{d.request_id}:{d.num_accepted}/{d.num_drafts}" for d in verified], k
        lookahead = any(a.num_lookahead_tokens and a.ok for a in step.of(AdmissionCheck))
        shown = bool(drops or verified or lookahead)
        assert ('data-px-panel="spec_decode"' in html) == shown, k
        for d in verified:
            assert f"{d.num_accepted} accepted of the {d.num_drafts} drafts" in now_text(at), k
    # The steps the lesson's notes talk about.
    assert [k for k, s in enumerate(trace.steps, 1) if s.of(EagleDropped)] == [5, 7]
    verified = [(k, s.of(DraftsVerified)) for k, s in enumerate(trace.steps, 1)]
    assert [(k, d[0].num_rejected) for k, d in verified if d] == [(10, 1), (12, 3)]


def test_the_slots_bar_splits_known_tokens_drafts_and_lookahead():
    trace = replay(load_scenario(ROOT / "lessons" / f"{LESSON}.toml"))
    decode = trace.steps[8]  # decode R with 3 drafts: 31 known tokens, 3 drafts, 3 lookahead slots
    html = spec_decode_html(decode, trace.snapshot_at(8), 16)
    assert 'data-px-lookahead="R:3"' in html
    assert "31 tokens" in html and "3 drafts" in html and "3 lookahead" in html
    assert "37 positions = 34 scheduled + 3 lookahead" in html


def test_an_engine_step_scenario_draws_the_drafts_of_its_batch():
    trace = replay(load_scenario(ROOT / "tests" / "scenario" / "golden" / "engine_steps" / "eagle_drafts_sync.toml"))
    html = spec_decode_html(trace.steps[2], trace.snapshot_at(2), 16)
    assert 'data-px-drafts="R:2/3"' in html and "1 rolled back" in html
    assert "num_computed_tokens is 33" in html
