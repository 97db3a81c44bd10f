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
    assert not off.warning and "Lesson check failed" not in html, [w.value for w in off.warning]
    assert 'data-px-checks="n/a"' in html and "not applicable to your settings" in html
    assert "Written for the default settings: you changed block size 8 (the lesson: 16)" in html
    # the checks would fail at block size 8: the replay really is off script
    trace = build(_view(off))[1].trace
    assert trace.steps[k - 1].expect_failures
    # the NOW box's numbers are this replay's
    hit = trace.steps[k - 1].hit_tokens
    assert f"hits {hit:,} of its" in now_text(off), now_text(off)


def test_checks_still_fail_loudly_on_script():
    from explorer.view.lesson_checks import note_and_checks

    trace = build(ViewState(engine={"block_size": 8}))[1].trace
    step = next(s for s in trace.steps if s.expect_failures)
    html, failures = note_and_checks(step, None)
    assert failures == step.expect_failures and 'data-px-checks="ok"' not in html
    html, failures = note_and_checks(step, "block size 8 (the lesson: 16)")
    assert failures == () and "not applicable" in html


def test_off_script_names_only_what_differs_from_the_lesson():
    from explorer.view.lesson_checks import off_script

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


# ---- the hash page: what NONE_HASH is a hash of ----------------------------------------------


def test_hash_page_names_what_none_hash_hashes_and_the_interview_value():
    import hashlib
    import pickle

    from explorer.ui.pages.hash import INTERVIEW_NOTE, NONE_HASH_FORMULA
    from tests.ui.helpers import hash_page

    at = hash_page()
    html = all_html(at)
    none = hashlib.sha256(pickle.dumps("vllm-none-hash", protocol=5)).hexdigest()
    assert f"NONE_HASH = sha256(pickle.dumps(seed, protocol=5)) = {none}" in html
    assert "sha256(seed)" not in html
    # the walkthrough's runnable model hashes the raw bytes: the value the note quotes
    raw = hashlib.sha256(b"vllm-none-hash").hexdigest()
    assert raw.startswith("f686fa60") and raw[:8] in INTERVIEW_NOTE and none[:8] in INTERVIEW_NOTE
    assert INTERVIEW_NOTE in _captions(at)
    for algo, formula in NONE_HASH_FORMULA.items():
        at.selectbox(key="px_h_algo").set_value(algo).run()
        assert f"NONE_HASH = {formula} = " in all_html(at)
        if algo.startswith("xxhash"):
            assert "change from run to run" in _captions(at)
        else:
            assert "change from run to run" not in _captions(at)
    at.text_input(key="px_h_seed").set_value("42").run()
    assert "change from run to run" not in _captions(at) and "A typed seed" in _captions(at)


def test_the_formula_is_how_the_core_derives_none_hash():
    import pickle

    import cbor2
    import xxhash

    from explorer.core.hashing import init_none_hash

    seed = "s"
    assert init_none_hash("xxhash", seed).none_hash == xxhash.xxh3_128_digest(pickle.dumps(seed, protocol=5))
    assert init_none_hash("xxhash_cbor", seed).none_hash == xxhash.xxh3_128_digest(cbor2.dumps(seed, canonical=True))


# ---- trace replay: separators, "skipped", a readable log axis --------------------------------


def _sweep_result():
    return {
        "block_size": 16,
        "requests": 1200,
        "prompt_tokens": 12_345_678,
        "timestamps": [0, 1],
        "prompt_lengths": [10, 10],
        "results": [
            {"policy": "vllm", "num_blocks": 1000, "skipped": 1234, "hit_tokens": 9_876_543, "hit_rate": 0.8},
            {"policy": "vllm", "num_blocks": 100_000, "skipped": 0, "hit_tokens": 10_000_000, "hit_rate": 0.81},
            {"policy": "unbounded", "num_blocks": None, "skipped": 0, "hit_tokens": 10_000_001, "hit_rate": 0.82},
            {
                "policy": "scheduler",
                "num_blocks": 1000,
                "skipped": 2,
                "hit_tokens": 1_000_000,
                "hit_rate": 0.1,
                "scheduler": {
                    "steps": 51_162,
                    "preemptions": 3,
                    "peak_running": 64,
                    "mean_queueing_ms": 1234.5678,
                    "max_queueing_ms": 98765.4,
                },
            },
        ],
    }


def test_replay_table_uses_separators_and_says_what_skipped_means():
    from explorer.viz.replay import SKIPPED_HELP, results_table

    rows = results_table(_sweep_result()["results"])
    assert rows[0]["hit tokens"] == "9,876,543" and rows[0]["skipped (too big)"] == "1,234"
    assert rows[0]["cache blocks"] == "1,000" and rows[2]["cache blocks"] == "unbounded"
    assert rows[3]["engine steps"] == "51,162" and rows[3]["mean queueing (ms)"] == "1,234.6"
    assert "could not fit even in an empty cache" in SKIPPED_HELP


def test_replay_log_axis_is_labelled_with_the_swept_sizes():
    from explorer.viz.replay import hit_rate_vs_cache_size

    fig = hit_rate_vs_cache_size(_sweep_result())
    assert fig.layout.xaxis.type == "log"
    assert list(fig.layout.xaxis.tickvals) == [1000, 100_000]
    assert list(fig.layout.xaxis.ticktext) == ["1,000", "100,000"]
    assert "skipped (too big for the cache)" in fig.data[0].hovertemplate


# ---- live events: what to try when nothing is connected --------------------------------------


def _snap(connection: str, age: float | None = None, running_for: float = 30.0):
    from explorer.ui.live_view import EndpointSnap

    return EndpointSnap(
        endpoint="tcp://127.0.0.1:5557",
        replay_endpoint=None,
        connection=connection,
        replay_status=None,
        error=None,
        summary={},
        instances=[],
        recent=[],
        last_frame_age=age,
        running_for=running_for,
        malformed_reasons={},
        last_malformed=None,
        pending=0,
    )


def test_live_status_says_to_choose_bind_when_nothing_connects():
    from explorer.ui.pages.live import _status_line

    hint = "nothing connected: if your publisher connects (endpoint with a host), choose Bind"
    for conn in ("retrying (nothing answers there)", "connecting"):
        kind, text = _status_line(_snap(conn), True)
        assert hint in text and kind in ("error", "warning"), text
    kind, text = _status_line(_snap("listening"), True)
    assert "untick Bind" in text and kind == "warning"
    # a connected publisher that is quiet is not "nothing connected"
    for conn in ("connected", "publisher connected"):
        assert "nothing connected" not in _status_line(_snap(conn), True)[1]
    assert "nothing connected" not in _status_line(_snap("connecting", running_for=1.0), True)[1]
    assert _status_line(_snap("connected", age=1.0), True)[0] == "success"


# ---- publish --help and listen --help -----------------------------------------------------


def test_publish_and_listen_help_describe_every_option():
    from explorer.cli import build_parser

    parser = build_parser()
    subs = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name in ("publish", "listen"):
        sub = subs.choices[name]
        assert sub.description
        for action in sub._actions:
            if action.dest == "help":
                continue
            assert action.help and len(action.help) > 10, f"{name} {action.option_strings or action.dest} has no help"
    assert "binds, as vLLM does" in subs.choices["publish"].format_help()
    assert "--bind" in subs.choices["listen"].format_help()


def test_practice_measured_section_shows_the_checked_in_runs():
    from tests.ui.helpers import app_page, markdown_text

    at = app_page("explorer/ui/pages/practice.py").run()
    assert not at.exception
    text = markdown_text(at)
    assert "saved 77.0% (median of 4) of the full prefill = 96% of the FLOP ideal (80.3%)" in text
    assert "No measurements are checked in yet" not in text
    table = next(t.value for t in at.table if "full ms" in t.value.columns)
    assert list(table["full ms"]) == ["5,746", "5,989", "5,922", "4,381"]


def test_the_readme_quotes_the_continues_from_line_as_the_page_writes_it():
    sc, rep = build(ViewState())
    line = continues_from(rep.trace, sc.title, len(sc.ops))
    readme = (ROOT / "README.md").read_text(encoding="utf-8").replace("\n", " ")
    quoted = line.removeprefix("New steps continue ").split(" (")[0]
    assert f'("{quoted} ...",' in readme, quoted


def test_an_engine_step_scenario_offers_the_empty_pool_but_no_continues_from_line():
    at = explorer(query={"lesson": "14_engine_step"})
    assert "New steps continue" not in _captions(at)
    at.button(key="px_b_empty_pool").click().run()
    assert _view(at).lesson == BLANK_POOL and not _errors(at)
    assert "New steps continue from the start of Blank pool" in _captions(at)
