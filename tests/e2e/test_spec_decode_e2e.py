"""The speculative-decoding lesson in a real browser: step lesson 17 to the end; at every step
the speculative-decoding panel shows the dropped hit block and the drafts the step's records
hold, and the lookahead slots of each allocation."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from explorer.scenario.records import AdmissionCheck, DraftsVerified, EagleDropped
from tests.e2e.conftest import shot, step_through_lesson

pytestmark = pytest.mark.e2e


def test_step_the_speculative_decoding_lesson_to_the_end(px_page, px_app_url):
    page = px_page
    for k, step in step_through_lesson(page, px_app_url, "17_speculative_decoding"):
        dropped = page.locator("[data-px-eagle-drop]").evaluate_all("els => els.map(e => e.dataset.pxEagleDrop)")
        drops = step.of(EagleDropped)
        assert dropped == [str(d.block_id) for d in drops], k
        drafts = page.locator("[data-px-drafts]").evaluate_all("els => els.map(e => e.dataset.pxDrafts)")
        assert drafts == [f"{d.request_id}:{d.num_accepted}/{d.num_drafts}" for d in step.of(DraftsVerified)], k
        lookahead = page.locator("[data-px-lookahead]").count()
        assert lookahead == sum(
            1 for a in step.of(AdmissionCheck) if a.ok and not a.full_sequence and a.num_lookahead_tokens
        ), k
        if drops:
            assert "EAGLE drops the last" in page.locator(".st-key-px_panel_spec_decode").inner_text()
            shot(page, f"spec-decode-drop-{k}")
        if step.of(DraftsVerified):
            shot(page, f"spec-decode-drafts-{k}")
    expect(page.locator(".px-b-next").first).to_be_disabled()
