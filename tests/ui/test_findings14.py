"""Issue 14's clean playground, off-script lessons and findings, under AppTest and as plain functions."""

from __future__ import annotations

from explorer.scenario.parse import load_scenario
from explorer.ui.blank_pool import BLANK_POOL, BLANK_POOL_TITLE, continues_from, empty_pool_engine
from explorer.ui.state import ViewState, build
from tests.ui.helpers import LESSON, ROOT, all_html, bound, explorer, now_text, plain


def _view(at) -> ViewState:
    return at.session_state["px_view"]


def _captions(at) -> str:
    return "\n".join(plain(c.value) for c in at.caption)


def _errors(at) -> list[str]:
    return [e.value for e in at.error]


def test_blank_pool_is_in_the_picker_with_lesson_titles():
    at = explorer(query={"lesson": "00_two_chat_turns"})
    sel = bound(at, "selectbox", "px_w_lesson")
    assert BLANK_POOL in sel.options or any(BLANK_POOL_TITLE in o for o in sel.options)
    shown = list(sel.proto.options)
    assert "Two chat turns" in shown
    assert "7. Eviction under pressure, and preemption" in shown
    assert any(o.startswith(BLANK_POOL_TITLE) for o in shown)
    assert not any(o.startswith("07_") for o in shown)  # titles, not file stems


def test_blank_pool_gives_a_0_token_hit_and_says_where_it_continues_from():
    at = explorer(query={"lesson": BLANK_POOL})
    assert not _errors(at), _errors(at)
    assert "Step 0 of 0" in now_text(at)
    assert (
        "New steps continue from the start of Blank pool: no live request, 0 blocks cached, 299 free blocks."
        in _captions(at)
    )
    at.radio(key="px_p_kind").set_value("Token spec").run()
    at.text_input(key="px_p_spec").set_value("0:64")
    at.text_input(key="px_p_id").set_value("A")
    at.button(key="FormSubmitter:px_arrive-Arrive").click().run()
    at.button(key="px_b_admit").click().run()
    assert not _errors(at), _errors(at)
    assert "Step 2 of 2: admit A" in now_text(at)
    sc, rep = build(_view(at))
    assert rep.trace.steps[-1].hit_tokens == 0
    assert "0 of its 64 tokens" in now_text(at) or "hits 0" in now_text(at), now_text(at)
    assert (
        "after step 2 of Blank pool (all from the playground): A is running, 4 blocks cached (all in use), 295 free blocks."
        in _captions(at)
    )


def test_start_from_an_empty_pool_keeps_the_pool_size_and_drops_the_steps():
    at = explorer(query={"lesson": "07_eviction_preemption", "step": "12", "bs": "8", "nb": "40"})
    assert "after step 12 of" in _captions(at)
    at.button(key="px_b_empty_pool").click().run()
    v = _view(at)
    assert v.lesson == BLANK_POOL and v.edits == () and v.step == 0
    sc, rep = build(v)
    lesson = load_scenario(ROOT / "lessons" / "07_eviction_preemption.toml")
    assert sc.engine.num_blocks == 40 and sc.engine.block_size == 8 and sc.engine.hash_algo == lesson.engine.hash_algo
    assert sc.ops == () and rep.trace.final.num_free_blocks == 39


def test_continues_from_reads_the_replay_not_the_scenario():
    sc = load_scenario(LESSON)
    trace = build(ViewState())[1].trace
    final = trace.final
    text = continues_from(trace, sc.title, len(sc.ops))
    cached = sum(1 for _, h in final.blocks if h is not None)
    assert text.startswith(f"New steps continue after step {len(trace.steps)} of Two chat turns: A3 is running, ")
    assert f"{cached:,} blocks cached" in text and f"{final.num_free_blocks:,} free blocks" in text


def test_empty_pool_engine_is_the_diff_against_the_defaults():
    sc = load_scenario(ROOT / "lessons" / "07_eviction_preemption.toml")
    eng = empty_pool_engine(sc.engine, {"hash_algo": "xxhash"})
    assert eng["num_blocks"] == sc.engine.num_blocks and eng["hash_algo"] == "xxhash"
    assert "block_size" not in eng or eng["block_size"] != 16
    assert empty_pool_engine(load_scenario(LESSON).engine, {}) == {}


# ---- off-script lessons ------------------------------------------------------------------------


def _step_with_checks_and_note(stem: str) -> int:
    sc = load_scenario(ROOT / "lessons" / f"{stem}.toml")
    return next(op.index + 1 for op in sc.ops if op.expect and op.note and "hit_tokens" in op.expect)


def test_an_off_script_lesson_shows_no_failed_check_and_exact_numbers():
    k = _step_with_checks_and_note("00_two_chat_turns")
    on = explorer(query={"lesson": "00_two_chat_turns", "step": str(k)})
    assert 'data-px-checks="ok"' in all_html(on) and "Written for the default settings" not in all_html(on)
    off = explorer(query={"lesson": "00_two_chat_turns", "step": str(k), "bs": "8"})
    html = all_html(off)
    assert not off.warning, [w.value for w in off.warning]
    assert 'data-px-checks="n/a"' in html and "not applicable to your settings" in html
    assert "Written for the default settings: you changed block size 8 (the lesson: 16)" in html
    # the checks would fail at block size 8: the replay really is off script
    trace = build(_view(off))[1].trace
    assert trace.steps[k - 1].expect_failures
    # the NOW box's numbers are this replay's
    hit = trace.steps[k - 1].hit_tokens
    assert f"hits {hit:,} of its" in now_text(off), now_text(off)


def test_checks_still_fail_loudly_on_script():
    from explorer.ui.lesson_checks import note_and_checks

    trace = build(ViewState(engine={"block_size": 8}))[1].trace
    step = next(s for s in trace.steps if s.expect_failures)
    html, failures = note_and_checks(step, None)
    assert failures == step.expect_failures and 'data-px-checks="ok"' not in html
    html, failures = note_and_checks(step, "block size 8 (the lesson: 16)")
    assert failures == () and "not applicable" in html


def test_off_script_names_only_what_differs_from_the_lesson():
    from explorer.ui.lesson_checks import off_script

    eng = load_scenario(LESSON).engine
    assert off_script({}, eng) is None
    assert off_script({"block_size": 16}, eng) is None
    assert off_script({"num_blocks": 12, "enable_prefix_caching": False}, eng) == (
        "blocks 12 (the lesson: 300), prefix caching off (the lesson: on)"
    )


def test_the_hit_rate_chart_draws_only_the_steps_so_far():
    import base64
    import re

    from explorer.viz.state_html import hit_rate_svg

    trace = build(ViewState())[1].trace
    n = len(trace.steps)

    def points(k: int) -> list[int]:
        svg = hit_rate_svg(trace, k)
        return [len(p.split()) for p in re.findall(r'<polyline[^>]*points="([^"]*)"', svg)]

    assert max(points(n)) > max(points(5))
    first_query = next(i for i in range(n + 1) if trace.snapshot_at(i).stats["queries"])
    assert points(5) and max(points(5)) == 5 - first_query + 1
    assert points(0) == []
    at = explorer(query={"lesson": "00_two_chat_turns", "step": "5"})
    img = next(h for h in all_html(at).split("<img") if "px-rate" in h)
    svg = base64.b64decode(re.search(r"base64,([^\"]+)", img).group(1)).decode()
    assert svg == hit_rate_svg(trace, 5)
