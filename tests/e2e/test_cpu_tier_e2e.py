"""The offloading lesson (19_cpu_offloading) in a real browser: step it to the end; the External
tier panel draws the CPU tier where the connector acted, with A's store, B's load from the CPU
and C's store evicting the tier's least recently used chunks."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import shot, step_through_lesson

pytestmark = pytest.mark.e2e


def test_step_the_offloading_lesson_to_the_end(px_page, px_app_url):
    page = px_page
    seen = set()
    for k, _ in step_through_lesson(page, px_app_url, "19_cpu_offloading"):
        for attr, key in (("cpu-store", "pxCpuStore"), ("cpu-load", "pxCpuLoad")):
            ids = page.locator(f"[data-px-{attr}]").evaluate_all(f"els => els.map(e => e.dataset.{key})")
            seen.update(f"{attr}:{i}" for i in ids)
        if page.locator("[data-px-cpu-tier]").count():
            seen.add(f"tier:{k}")
        if k == 8:
            shot(page, "cpu-tier-load-from-cpu")
    assert {"cpu-store:A", "cpu-store:X", "cpu-load:B", "cpu-store:C", "tier:8", "tier:12"} <= seen
    expect(page.locator(".px-b-next").first).to_be_disabled()
