"""Why it missed, in a real browser: the explorer's lookup panel colours the prompt's blocks by
the miss record's reasons and its button goes to the step that evicted the first missed block;
the Trace replay page draws vLLM beside its two bounds and the missed tokens by reason."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from explorer.miss.sentence import miss_sentence
from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario
from tests.e2e.conftest import REPO, settled_url, shot, wait_idle

pytestmark = pytest.mark.e2e

LESSON = "00_two_chat_turns"


def _open(page, url: str, expect_text: str) -> None:
    page.goto(url)
    expect(page.locator(".px-now .px-headline")).to_contain_text(expect_text, timeout=90_000)
    wait_idle(page)


def test_the_lookup_panel_says_why_and_goes_to_the_evicting_step(px_page, px_app_url):
    trace = replay(load_scenario(REPO / "lessons" / f"{LESSON}.toml"))
    n = len(trace.steps)
    k, miss = next((k, s.miss) for k, s in enumerate(trace.steps, 1) if s.miss and s.miss.first_miss == "evicted")
    assert miss is not None and miss.evicted_by is not None
    page = px_page
    _open(page, f"{px_app_url}/?lesson={LESSON}&step={k}", f"Step {k} of {n}")
    part = page.locator(f'.px-why[data-px-why="{miss.request_id}"]')
    expect(part).to_be_visible()
    cells = part.locator(".px-why-cell[data-px-index]")
    reasons = [cells.nth(i).get_attribute("data-px-reason") for i in range(cells.count())]
    assert reasons[: len(miss.block_reasons)] == ["hit" if r is None else r for r in miss.block_reasons]
    expect(part.locator(".px-why-sentence")).to_have_text(miss_sentence(miss))
    shot(page, "why_missed_lookup")
    target = miss.evicted_by.step + 1
    part.locator(".px-b-goto").click()
    expect(page.locator(".px-now .px-headline")).to_contain_text(f"Step {target} of {n}: ", timeout=30_000)
    assert f"step={target}" in settled_url(page)
    headline = page.locator(".px-now .px-headline").inner_text()
    assert miss.evicted_by.request_id in headline  # the allocation that popped the block
    # a step with no lookup has no "Why it missed" part
    plain = next(j for j, s in enumerate(trace.steps, 1) if s.miss is None and not s.misses)
    page.locator(".px-range").fill(str(plain))
    expect(page.locator(".px-now .px-headline")).to_contain_text(f"Step {plain} of {n}")
    expect(page.locator(".px-why-part")).to_have_count(0)


def _fill(page, role: str, name: str, value: str) -> None:
    box = page.get_by_role(role, name=name)
    box.fill(value)
    box.press("Enter")
    wait_idle(page)


def test_trace_replay_draws_vllm_beside_its_bounds_and_the_reasons(px_page, px_app_url):
    from explorer.traffic.sweep import run_sweep, sweep_to_dict
    from explorer.traffic.trace import load_trace, shipped_trace_path
    from explorer.viz.replay_bounds import largest_reason_line

    sizes, limit, bs = [400, 800, 3000], 60, 64
    # the same sweep run serially here: the page's Ray grid must tell the same sentence
    want = sweep_to_dict(run_sweep(load_trace(shipped_trace_path(), limit=limit), bs, sizes, ("vllm",)))
    page = px_page
    page.goto(f"{px_app_url}/replay")
    page.get_by_role("button", name="Run replay").wait_for(timeout=90_000)
    wait_idle(page)
    _fill(page, "textbox", "Block sizes (tokens)", str(bs))
    _fill(page, "spinbutton", "Requests to replay (0 = all)", str(limit))
    _fill(page, "textbox", "Cache sizes (blocks)", ", ".join(map(str, sizes)))
    page.get_by_role("button", name="Run replay").click()
    why = page.locator(".st-key-replay_why")
    done = page.locator('.st-key-replay_why, [data-testid="stAlert"]').first
    done.wait_for(timeout=240_000)
    assert why.count() == 1, page.locator('[data-testid="stAlert"]').first.inner_text()
    wait_idle(page)
    said = why.locator("p").first.inner_text().replace("\u2060", "")  # md() keeps Markdown off with joiners
    assert said == largest_reason_line(want, "vllm")
    chart = page.locator(".st-key-replay_fig_size")
    expect(chart.locator(".legendtext", has_text="Belady's MIN")).to_have_count(1)
    expect(chart.locator(".legendtext", has_text="infinite cache")).to_have_count(1)
    bars = page.locator(".st-key-replay_fig_reasons")
    for label in ("never seen before", "evicted", "lookup skipped"):
        expect(bars.locator(".legendtext", has_text=label).first).to_be_visible()
    drawn = {t.text_content() for t in bars.locator(".xtick text").all()}
    assert drawn == {f"{s:,}" for s in sizes}
    shot(page, "why_missed_replay", full=True)


def test_lesson_21_shows_a_prefix_in_flight_and_its_eviction_button(px_page, px_app_url):
    stem = "21_why_it_missed"
    trace = replay(load_scenario(REPO / "lessons" / f"{stem}.toml"))
    n = len(trace.steps)
    page = px_page
    _open(page, f"{px_app_url}/?lesson={stem}&step=3", f"Step 3 of {n}")
    b = trace.steps[2].misses["B"]  # type: ignore[index]
    part = page.locator('.px-why[data-px-why="B"]')
    cells = part.locator(".px-why-cell[data-px-index]")
    reasons = [cells.nth(i).get_attribute("data-px-reason") for i in range(cells.count())]
    assert reasons == ["hit" if r is None else r for r in b.block_reasons] + ["partial_block"]
    assert "not_yet_cached" in reasons
    k, d = next(
        (k, m) for k, s in enumerate(trace.steps, 1) for m in (s.misses or {}).values() if m.first_miss == "evicted"
    )
    assert d.evicted_by is not None
    page.locator(".px-range").fill(str(k))
    expect(page.locator(".px-now .px-headline")).to_contain_text(f"Step {k} of {n}")
    page.locator(f'.px-why[data-px-why="{d.request_id}"] .px-b-goto').click()
    expect(page.locator(".px-now .px-headline")).to_contain_text(f"Step {d.evicted_by.step + 1} of {n}")


def test_practice_asks_why_a_block_missed_and_the_record_grades_it(px_page, px_app_url):
    from explorer.miss.sentence import REASON_LABELS
    from explorer.practice.generate import generate

    page = px_page
    page.goto(f"{px_app_url}/practice?seed=2&kind=why_miss")
    page.get_by_text("Score this session").wait_for()
    wait_idle(page)
    seed = int(page.get_by_role("spinbutton", name="Seed").input_value())
    q = generate(seed, "why_miss")
    expect(page.get_by_role("heading", name=q.title)).to_be_visible()
    page.get_by_text(f"{q.answer}: {REASON_LABELS[q.answer]}", exact=True).click()
    wait_idle(page)
    page.get_by_role("button", name="Check my answer").click()
    wait_idle(page)
    expect(page.get_by_text(re.compile(r"^Right"))).to_be_visible()
    expect(page.get_by_text("The lookup's record", exact=False).first).to_be_visible()


def test_the_router_puts_achieved_beside_available(px_page, px_app_url):
    from explorer.router.fleet_file import example_fleets, load_fleet
    from explorer.router.simulate import simulate
    from explorer.viz.router_available import gap_sentence

    want = gap_sentence(simulate(load_fleet(next(iter(example_fleets().values())))))
    page = px_page
    page.goto(f"{px_app_url}/router")
    part = page.locator(".st-key-router_available")
    part.wait_for(timeout=180_000)
    wait_idle(page)
    said = part.locator("p").first.inner_text().replace("\u2060", "")
    assert said == want
    chart = page.locator(".st-key-router_fig_available")
    expect(chart.locator(".legendtext", has_text="available (every instance's cache pooled)")).to_have_count(1)
    expect(chart.locator(".legendtext", has_text="achieved")).to_have_count(1)
