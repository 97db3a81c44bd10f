"""AppTest: the explorer page drawn step by step against the replay JSON."""

from __future__ import annotations

import json
import re
from html import escape

import pytest

from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario, with_engine
from explorer.scenario.records import HashedBlock
from explorer.ui.state import ViewState, build, encode_blob, session_json, session_toml
from tests.ui.helpers import (
    EDGE,
    LESSON,
    all_html,
    bound,
    errors,
    explorer,
    html_bodies,
    markdown_text,
    n_steps,
    no_exception,
    now_text,
    page_title,
    panel_keys,
    stage_bodies,
    stage_data,
    stage_now_text,
    step_to,
    title_line,
    view,
)


@pytest.fixture(scope="module")
def lesson_json():
    return replay(load_scenario(LESSON)).to_json()


@pytest.fixture(scope="module")
def lesson_at():
    return explorer()


def test_opens_the_default_lesson_before_step_one(lesson_at):
    at = lesson_at
    no_exception(at)
    assert not errors(at)
    assert page_title(at) == "Two chat turns"
    assert "Step 0 of 20" in now_text(at)
    assert "299 blocks wait in the free queue" in now_text(at)
    assert 'data-px-pool="300"' in all_html(at)
    assert at.query_params["lesson"] == ["00_two_chat_turns"] or at.query_params["lesson"] == "00_two_chat_turns"


def test_every_step_matches_the_replay_json(lesson_json):
    at = explorer()
    steps = lesson_json["steps"]
    sc = load_scenario(LESSON)
    for k, js in enumerate(steps, start=1):
        step_to(at, k)
        no_exception(at)
        now = now_text(at)
        who = f"{js['op']} {js['id']}"
        assert f"Step {k} of {len(steps)}: {who}" in now, now
        html = all_html(at)
        text = markdown_text(at)
        kinds = [e["type"] for e in js["events"]]
        for kind in set(kinds):
            assert f"{kinds.count(kind)} {kind}" in now
        if "hit_tokens" in js:
            assert f"{js['hit_tokens']:,} tokens" in text
            assert f"hits {js['hit_tokens']:,} of" in now
        if js.get("new_block_ids"):
            popped = re.search(r"get_new_blocks: (\d+) popped", html)
            assert popped and int(popped.group(1)) == len(js["new_block_ids"])
        keys = panel_keys(at)
        assert keys == sorted(keys, key=["hashing", "lookup", "allocate", "caching", "free", "eviction"].index)
        if js["op"] == "arrive":
            assert "hashing" in keys
        if js["op"] == "admit":
            assert {"lookup", "allocate"} <= set(keys)
        if js["op"] == "finish":
            assert keys == ["free"]
        if any(k == "BlockRemoved" for k in kinds):
            assert "eviction" in keys
        if sc.ops[k - 1].note:
            assert escape(sc.ops[k - 1].note) in html
    final = lesson_json["final"]
    html = all_html(at)
    assert f'data-px-free="{len(final["free_queue"])}"' in html
    assert f'data-px-map="{len(final["cached"])}"' in html
    stats = final["stats"]
    shown = dict(
        re.findall(
            r'data-px-stat="(\w+)"><div class="px-metric-label"[^>]*>[^<]*</div><div class="px-metric-value">([^<]*)<',
            html,
        )
    )
    assert [shown["queries"], shown["hits"]] == [f"{stats['queries']:,}", f"{stats['hits']:,}"]
    assert "lesson checks hold" in all_html(at)


def test_the_stage_holds_every_step_and_opens_at_the_views_step(lesson_at):
    """Next, Back, First and Last step in the browser (tests/e2e): the page sends every step once."""
    at = lesson_at
    data = stage_data(at)
    assert data is not None and len(data["steps"]) == 21 and data["step"] == 0
    trace = replay(load_scenario(LESSON))
    for k, step in enumerate(trace.steps, start=1):
        assert f"Step {k} of 20: {step.op.op} {step.op.id}" in stage_now_text(at, k)
    at = step_to(at, 19)
    assert stage_data(at)["step"] == 19 and "Step 19 of 20: arrive A3" in now_text(at)
    # the step in the URL is the browser's to write (the component); the page writes the rest


def test_hashing_panel_shows_chain_digests_and_tail(lesson_at):
    at = step_to(lesson_at, 1)
    html = all_html(at)
    t = replay(load_scenario(LESSON))
    first = t.steps[0].of(HashedBlock)[0]
    assert "NONE_HASH" in html and t.none_hash.hex()[:16] in html
    assert first.hash.hex()[:16] in html and f"event {first.external}" in html
    assert 'data-px-tail="4"' in html
    assert "vllm/v1/core/kv_cache_utils.py:836-895" in html


def test_lookup_and_admission_numbers(lesson_at):
    at = step_to(lesson_at, 6)
    html = all_html(at)
    text = markdown_text(at)
    assert "(544 - 1) // 16 = 33 blocks" in text
    assert "Blocks 0-29 hit and block 30 missed" in text
    assert 'data-px-admission="34/299"' in html
    assert "b30 &#10007; miss: stop" in html
    assert "vllm/v1/core/kv_cache_manager.py:264-321" in html and "vllm/v1/core/block_pool.py:755-771" in html


def test_eviction_panel_and_block_history(lesson_at):
    at = step_to(lesson_at, 17)
    assert "eviction" in panel_keys(at)
    assert "23 BlockRemoved" in now_text(at)
    html = "".join(stage_bodies(stage_data(at), block=46))  # a click on block 46 in the browser
    assert 'data-px-history="46"' in html
    assert "taken by A2 as its block 40 (popped from the free queue head)" in html
    assert "lost hash" in html and "evicted" in html


def test_changed_blocks_are_marked(lesson_at):
    at = step_to(lesson_at, 2)
    grid = next(h for h in html_bodies(at) if 'class="px-grid' in h)
    changed = re.findall(r'class="px-blk [^"]*px-chg[^"]*" data-px-block="(\d+)"', grid)
    assert sorted(map(int, changed)) == list(range(1, 38))
    assert re.search(r'data-px-block="0"[^>]*>.*?N</span>', grid)
    assert '<span class="px-l">U1</span>' in grid and '<span class="px-l">F</span>' in grid


def test_settings_replay_with_engine():
    at = explorer()
    bound(at, "number_input", "px_w_bs").set_value(32).run()
    no_exception(at)
    assert view(at).engine == {"block_size": 32}
    step_to(at, 2)
    assert "(580 - 1) // 32 = 18 blocks" in markdown_text(at)
    expected = replay(with_engine(load_scenario(LESSON), block_size=32)).to_json()
    assert f"hits {expected['steps'][1]['hit_tokens']} of" in now_text(at)
    assert at.query_params["bs"] in ("32", ["32"])
    bound(at, "toggle", "px_w_pc").set_value(False).run()
    step_to(at, 1)
    assert "Prefix caching is off" in markdown_text(at)
    bound(at, "toggle", "px_w_pc").set_value(True).run()
    bound(at, "number_input", "px_w_bs").set_value(16).run()
    assert view(at).engine == {}


def test_too_few_blocks_stops_the_replay_with_an_error():
    at = explorer()
    bound(at, "number_input", "px_w_nb").set_value(20).run()
    no_exception(at)
    errs = errors(at)
    assert any("replay stopped" in e and "step 3 (generate A1)" in e for e in errs), errs
    step_to(at, 2)
    assert "does not fit" in now_text(at) and "37 > 19 free" in now_text(at)


def test_xxhash_seed_is_drawn_once_and_kept():
    at = explorer()
    bound(at, "selectbox", "px_w_algo").set_value("xxhash").run()
    no_exception(at)
    seed = view(at).drawn_seed
    assert seed and len(seed) == 64
    caption = title_line(at)
    assert "xxhash" in caption and seed[:24] in caption
    step_to(at, 1)
    step_to(at, 2)
    assert view(at).drawn_seed == seed and seed[:24] in title_line(at)
    assert at.query_params["dseed"] in (seed, [seed])
    at.button(key="px_b_newseed").click().run()
    assert view(at).drawn_seed != seed


def test_playground_arrive_admit_generate_finish():
    at = explorer(query={"lesson": "00_two_chat_turns", "step": "20"})
    at.radio(key="px_p_kind").set_value("Token spec").run()
    at.text_input(key="px_p_spec").set_value("0:480, 9000:9100")
    at.text_input(key="px_p_lora").set_value("")
    at.button(key="FormSubmitter:px_arrive-Arrive").click().run()
    no_exception(at)
    assert not errors(at), errors(at)
    assert view(at).step == 21 and "arrive P1" in now_text(at)
    assert view(at).edits[-1]["prompt"] == "0:480, 9000:9100"
    bound(at, "selectbox", "px_a_req").set_value("P1")
    at.button(key="px_b_admit").click().run()
    assert "Step 22 of 22: admit P1" in now_text(at)
    assert "hits 480 of its 580 tokens" in now_text(at)
    at.number_input(key="px_a_gen").set_value(20)
    at.button(key="px_b_generate").click().run()
    assert "generate P1" in now_text(at) and "20 tokens" in now_text(at)
    at.button(key="px_b_preempt").click().run()
    assert "preempt P1" in now_text(at)
    at.button(key="px_b_finish").click().run()
    assert "finish P1" in now_text(at)
    at.button(key="px_b_reset").click().run()
    assert "Step 26 of 26: reset" in now_text(at) and "refused" in now_text(at)  # A3 still runs
    at.checkbox(key="px_a_running").check()
    at.button(key="px_b_reset").click().run()
    assert "Step 27 of 27: reset (running = true)" in now_text(at)
    assert "preempted, the last to start first: A3" in now_text(at) and "AllBlocksCleared" in now_text(at)
    # the edits replay exactly like the scenario they extend
    sc, rep = build(view(at))
    assert rep.error is None and len(rep.trace.steps) == 27
    at.button(key="px_b_undo").click().run()
    assert len(view(at).edits) == 6
    at.button(key="px_b_clear").click().run()
    assert view(at).edits == () and view(at).step == 0


def test_playground_extras_lora_salt_image_logprobs():
    at = explorer()
    at.radio(key="px_p_kind").set_value("Token spec").run()
    at.checkbox(key="px_p_img").check().run()
    at.text_input(key="px_p_id").set_value("X")
    at.text_input(key="px_p_spec").set_value("0:64")
    at.text_input(key="px_p_lora").set_value("sql")
    at.text_input(key="px_p_salt").set_value("tenant-7")
    at.number_input(key="px_p_img_off").set_value(20)
    at.number_input(key="px_p_img_len").set_value(10)
    at.checkbox(key="px_p_logprobs").check()
    at.button(key="FormSubmitter:px_arrive-Arrive").click().run()
    assert not errors(at), errors(at)
    edit = view(at).edits[-1]
    assert edit == {
        "op": "arrive",
        "id": "X",
        "prompt": "0:64",
        "lora": "sql",
        "cache_salt": "tenant-7",
        "mm": [{"id": "img-1", "offset": 20, "length": 10}],
        "prompt_logprobs": True,
    }
    text = markdown_text(at)
    assert "The LoRA 'sql' is an extra key of every block" in text and "cache_salt 'tenant-7'" in text
    assert "image 'img-1' (tokens 20-29) is an extra key of block 1" in text
    html = all_html(at)
    assert "LoRA sql" in html and "salt tenant-7" in html and "image img-1 @+4" in html
    bound(at, "selectbox", "px_a_req").set_value("X")
    at.button(key="px_b_admit").click().run()
    assert "No lookup for X: prompt_logprobs" in markdown_text(at)


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("0:10, abc", "bad token spec part 'abc'"),
        ("0:100000000", "more than the prompt limit"),
        ("", "token spec is empty"),
    ],
)
def test_playground_bad_input_shows_one_error_and_the_page_stays_usable(spec, needle):
    at = explorer()
    at.radio(key="px_p_kind").set_value("Token spec").run()
    at.text_input(key="px_p_spec").set_value(spec)
    at.button(key="FormSubmitter:px_arrive-Arrive").click().run()
    no_exception(at)
    errs = errors(at)
    assert len(errs) == 1 and needle in errs[0], errs
    assert view(at).edits == ()
    at.run()
    assert not errors(at) and "arrive A1" in stage_now_text(at, 1)


def test_playground_refuses_an_op_the_engine_state_does_not_allow():
    at = explorer()
    at.radio(key="px_p_kind").set_value("Token spec").run()
    at.text_input(key="px_p_id").set_value("A3")
    at.text_input(key="px_p_spec").set_value("1:40")
    at.button(key="FormSubmitter:px_arrive-Arrive").click().run()
    errs = errors(at)
    assert len(errs) == 1 and "already live" in errs[0]
    assert view(at).edits == ()


def test_text_prompt_goes_through_the_tokenizer_or_says_it_is_missing():
    from explorer.tokens import encode_text, tokenizer_available

    at = explorer()
    if not tokenizer_available():
        assert "Token spec" in at.radio(key="px_p_kind").options and "Text" not in at.radio(key="px_p_kind").options
        assert any("model file is not installed" in c.value for c in at.caption)
        return
    text = "You are a helpful assistant. " * 3
    at.radio(key="px_p_kind").set_value("Text").run()
    at.text_area(key="px_p_text").set_value(text)
    at.button(key="FormSubmitter:px_arrive-Arrive").click().run()
    assert not errors(at), errors(at)
    n = len(encode_text(text))
    assert f"arrives with {n} tokens" in now_text(at)
    assert 'class="px-snip"' in all_html(at)


def test_upload_a_scenario_and_a_malformed_one():
    at = explorer()
    raw = EDGE.read_bytes()
    at.file_uploader(key="px_w_upload").upload("edge.toml", raw, "application/toml").run()
    no_exception(at)
    assert not errors(at), errors(at)
    assert page_title(at) == "Edge cases"
    assert view(at).upload[0] == "edge.toml"
    step_to(at, 4)
    assert "duplicate" in markdown_text(at)
    assert "up" in at.query_params
    at.file_uploader(key="px_w_upload").upload("bad.toml", b"title = [unclosed\n", "application/toml").run()
    no_exception(at)
    errs = errors(at)
    assert len(errs) == 1 and "bad.toml: not valid TOML" in errs[0]
    assert page_title(at) == "Edge cases"  # the page keeps the last good scenario


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b'[[steps]]\nop = "arrive"\nid = "A"\nprompt = "0*2000000000"\n', "more than the prompt limit"),
        (b"\x00\x01binary", "not a text file"),
        (b"[" * 5000, "bad.toml"),
        (b"[engine]\nnum_blocks = 100000000\n", "num_blocks"),
        (b'[[steps]]\nop = "admit"\nid = "ghost"\n', "no live request 'ghost'"),
    ],
)
def test_hostile_uploads_show_one_error(content, needle):
    at = explorer()
    at.file_uploader(key="px_w_upload").upload("bad.toml", content, "application/toml").run()
    no_exception(at)
    errs = errors(at)
    assert len(errs) == 1 and needle in errs[0], errs
    assert page_title(at) == "Two chat turns"
    at.run()
    assert not errors(at) and "arrive A1" in stage_now_text(at, 1)


def test_oversized_upload_is_refused():
    at = explorer()
    at.file_uploader(key="px_w_upload").upload("big.toml", b"# " + b"x" * (300 * 1024), "application/toml").run()
    errs = errors(at)
    assert len(errs) == 1 and "upload limit" in errs[0]


def test_downloads_round_trip():
    at = explorer()
    at.radio(key="px_p_kind").set_value("Token spec").run()
    at.text_input(key="px_p_spec").set_value("0:100")
    at.button(key="FormSubmitter:px_arrive-Arrive").click().run()
    labels = [d.proto.label for d in at.download_button]
    assert labels == ["Download the session as a scenario (TOML)", "Download the replay (JSON)"]
    sc, rep = build(view(at))
    toml_text = session_toml(sc)
    from explorer.scenario.parse import parse_scenario_text

    again = replay(parse_scenario_text(toml_text, "session.toml"))
    assert again.to_json() == json.loads(session_json(rep.trace))
    assert len(again.steps) == 21


def test_shared_url_opens_the_same_view():
    edits = [{"op": "arrive", "id": "Z", "prompt": "0:200"}, {"op": "admit", "id": "Z"}]
    q = {"lesson": "00_two_chat_turns", "bs": "32", "ed": encode_blob(edits), "step": "22", "block": "3"}
    at = explorer(query=q)
    no_exception(at)
    assert not errors(at), errors(at)
    v = view(at)
    assert v.step == 22 and v.engine == {"block_size": 32} and list(v.edits) == edits and v.block == 3
    assert "Step 22 of 22: admit Z" in now_text(at)
    assert 'data-px-history="3"' in all_html(at) and stage_data(at)["block"] == 3
    assert bound(at, "number_input", "px_w_bs").value == 32


@pytest.mark.parametrize(
    "q",
    [
        {"step": "abc"},
        {"lesson": "../../etc/passwd"},
        {"ed": "not-base64!!"},
        {"ed": encode_blob({"op": "arrive"})},
        {"bs": "0"},
        {"pc": "maybe"},
        {"up": "x" * 20000},
    ],
)
def test_bad_url_parameters_show_an_error_and_fall_back(q):
    at = explorer(query=q)
    no_exception(at)
    assert len(errors(at)) == 1
    assert page_title(at) == "Two chat turns"
    at.run()
    assert not errors(at) and "arrive A1" in stage_now_text(at, 1)


def test_edits_that_do_not_replay_from_a_link_stop_the_replay_there():
    q = {"ed": encode_blob([{"op": "admit", "id": "nobody"}]), "step": "21"}
    at = explorer(query=q)
    no_exception(at)
    errs = errors(at)
    assert len(errs) == 1 and "replay stopped" in errs[0] and "nobody" in errs[0]
    assert view(at).step == 20  # the steps before it are shown
    assert len(stage_data(at)["steps"]) == 21 and "Step 0 of 20" in stage_now_text(at, 0)


def test_presenter_mode_hides_the_sidebar_and_enlarges():
    at = explorer(query={"presenter": "1", "step": "6"})
    style = next(h.value for h in at.html if h.value.startswith("<style>"))
    assert 'section[data-testid="stSidebar"]' in style and "html { font-size: clamp(" in style
    assert stage_data(at)["presenter"]  # its control bar has "Full page" (tests/e2e)
    html = all_html(at)
    for box in ("metrics", "changed", "free"):
        assert f'data-px-pres="{box}"' in html
    at.session_state["px_view"] = view(at).with_(presenter=False)  # what "Full page" sets
    at.run()
    assert not view(at).presenter
    style = next(h.value for h in at.html if h.value.startswith("<style>"))
    assert "stSidebar" not in style and 'data-px-pres="metrics"' not in all_html(at)


def test_edge_cases_scenario_renders_every_step():
    v = ViewState(lesson=None, upload=("edge.toml", EDGE.read_bytes()))
    at = explorer(view=v)
    n = n_steps(at)
    assert n == 21
    seen = set()
    for k in range(1, n + 1):
        step_to(at, k)
        no_exception(at)
        assert not errors(at)
        seen.update(panel_keys(at))
    assert seen == {"hashing", "lookup", "allocate", "caching", "free", "eviction"}


def test_big_pool_becomes_a_heat_strip():
    toml = b'[engine]\nnum_blocks = 2000\n[[steps]]\nop = "arrive"\nid = "A"\nprompt = "0:3000"\n[[steps]]\nop = "admit"\nid = "A"\n'
    at = explorer(view=ViewState(lesson=None, upload=("big.toml", toml), step=2))
    no_exception(at)
    html = all_html(at)
    assert html.count('<svg class="px-strip"') == 1 and html.count("<rect data-px-block=") == 2000
    assert 'data-px-changed="188"' in html


def test_without_the_tokenizer_the_playground_offers_token_specs(monkeypatch):
    from explorer import tokens as tokens_module

    monkeypatch.setattr(tokens_module, "tokenizer_available", lambda: False)
    at = explorer()
    no_exception(at)
    assert at.radio(key="px_p_kind").options == ["Token spec"]
    assert any("model file is not installed" in c.value for c in at.caption)
    at.text_input(key="px_p_spec").set_value("0:40")
    at.button(key="FormSubmitter:px_arrive-Arrive").click().run()
    assert not errors(at) and "arrive P1" in now_text(at)


def _replayable_lessons() -> list[str]:
    from explorer.errors import BadInput
    from explorer.ui.state import list_lessons

    out = []
    for name in list_lessons():
        try:
            build(ViewState(lesson=name))
        except BadInput:
            continue  # a lesson being written right now; the lesson tests report it
        out.append(name)
    return out


@pytest.mark.parametrize("name", _replayable_lessons())
def test_every_lesson_renders_every_step(name):
    at = explorer(view=ViewState(lesson=name))
    no_exception(at)
    n = n_steps(at)
    for k in range(1, n + 1):
        step_to(at, k)
        no_exception(at)
        assert f"Step {k} of {n}" in now_text(at)
        assert not errors(at), (k, errors(at))


def test_a_link_from_another_page_opens_its_lesson_once():
    """The Lessons page's link (a one-time ``open`` token) opens its lesson in a session that
    already shows another; the same URL reported again later (stale) does not move the view."""
    at = explorer(query={"lesson": "00_two_chat_turns", "step": "5"})
    assert view(at).lesson == "00_two_chat_turns" and view(at).step == 5
    at.query_params.clear()
    at.query_params.update({"lesson": "03_lookup_cap", "scenario": "03_lookup_cap", "open": "t1"})
    at.run()
    assert view(at).lesson == "03_lookup_cap" and view(at).step == 0
    at.run()  # the browser may still report the link's URL
    assert view(at).lesson == "03_lookup_cap" and view(at).step == 0 and not errors(at)
    at.query_params.clear()
    at.query_params.update({"lesson": "00_two_chat_turns", "step": "9"})  # no token: the view's own URL wins
    at.run()
    assert view(at).lesson == "03_lookup_cap" and view(at).step == 0
