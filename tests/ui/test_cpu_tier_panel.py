"""The CPU tier in the External tier panel (design section 10) on lesson 19_cpu_offloading:
every step renders, and the panel draws what the offloading connector reported (store jobs,
the load from the CPU, the tier's LRU order, an eviction) beside the GPU pool."""

from __future__ import annotations

from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario
from explorer.viz.cpu_tier_html import cpu_tier_html
from tests.ui.helpers import ROOT, all_html, errors, explorer, no_exception, step_to

LESSON = "19_cpu_offloading"


def _trace():
    return replay(load_scenario(ROOT / "lessons" / f"{LESSON}.toml"))


def test_every_step_of_the_offloading_lesson_renders_with_the_cpu_tier():
    at = explorer({"lesson": LESSON})
    no_exception(at)
    drawn = {}
    for k in range(1, len(_trace().steps) + 1):
        at = step_to(at, k)
        no_exception(at)
        assert errors(at) == [], (k, errors(at))
        drawn[k] = all_html(at)
    assert 'data-px-panel="external"' in drawn[2] and "cpu_blocks = 16" in drawn[2]
    assert 'data-px-cpu-store="A"' in drawn[2] and 'data-px-cpu-tier="6"' in drawn[2]
    assert 'data-px-cpu-load="B"' in drawn[8] and 'data-px-xt-waiting="B"' in drawn[8]
    assert "evicting the least recently used" in drawn[12] and "(one BlockRemoved" not in drawn[2]
    html = drawn[8]
    assert html.index('data-px-panel="external"') < html.index('data-px-panel="allocate"')


def test_the_tier_follows_the_snapshot_and_the_reports():
    trace = _trace()
    step = trace.steps[11]  # C: its store evicts X's last 5 blocks
    after = trace.snapshot_at(12)
    html = cpu_tier_html(step.engine_step.connector, after, 16)
    store = next(r for r in step.engine_step.connector if r.kind == "cpu_store")
    assert len(store.cpu_evicted) == 5
    assert "evicting the least recently used " + ", ".join(h.hex()[:8] for h in store.cpu_evicted) in html
    order = [html.index(f'data-px-cpu-chunk="{h.hex()}"') for h, _, _ in after.cpu_tier]
    assert order == sorted(order) and len(order) == 16  # drawn least recently used first
    for h in store.hashes:  # C's chunks, stored this step, are marked
        assert f'class="px-cpu-chunk px-cpu-new" data-px-cpu-chunk="{h.hex()}"' in html
    assert cpu_tier_html((), trace.snapshot_at(0), 16).endswith("empty</div>")
