"""The KV connector lesson (18) in a real browser: step it to the end; the External tier panel
appears exactly where the connector acted, between the lookup and the allocation, and shows the
request waiting for its load, the finished load and the failed one."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import shot, step_through_lesson

pytestmark = pytest.mark.e2e


def test_step_the_connector_lesson_to_the_end(px_page, px_app_url):
    page = px_page
    seen = set()
    for k, step in step_through_lesson(page, px_app_url, "18_external_tier"):
        es = step.engine_step
        panel = page.locator("[data-px-panel=external]")
        if es is None or not (es.connector or es.external):
            assert panel.count() == 0, k
            continue
        expect(panel).to_have_count(1)
        for attr in ("waiting", "loaded", "failed"):
            ids = page.locator(f"[data-px-xt-{attr}]").evaluate_all(
                f"els => els.map(e => e.dataset.pxXt{attr.capitalize()})"
            )
            seen.update(f"{attr}:{i}" for i in ids)
        if k == 2:
            shot(page, "external-tier-async-load")
    assert {"waiting:A", "loaded:A", "failed:B", "waiting:D", "loaded:D"} <= seen
    expect(page.locator(".px-b-next").first).to_be_disabled()
