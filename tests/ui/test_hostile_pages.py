"""Every page under AppTest with hostile strings in every field a user controls (uploads and their
file names, shared links, URL parameters, typed fields, endpoints, fleet files): each is shown as
text (tests/ui/hostile.py checks every element), bad input gives one error line, a lone
surrogate in a link is refused when decoded, never raised when drawn (a browser's fields cannot
carry one: its messages are UTF-8), and the page still works after."""

from __future__ import annotations

import base64
import json
import time
import zlib

import pytest
from streamlit.testing.v1 import AppTest

from explorer.router.share import encode_share
from explorer.ui.state import ViewState, encode_blob
from tests.ui.helpers import (
    bound,
    errors,
    explorer,
    hash_page,
    n_steps,
    now_text,
    page_title,
    plain,
    stage_bodies,
    stage_data,
    stage_now_text,
    step_to,
    view,
)
from tests.ui.hostile import EVIL, HOSTILE, SURROGATES, check_page, html_problems, page_problems


def _toml_str(s: str) -> str:
    return json.dumps(s).replace("\x7f", "\\u007f")  # JSON's escapes are TOML's, but for DEL


def hostile_scenario() -> bytes:
    lines = [f"title = {_toml_str(HOSTILE[0])}", f"description = {_toml_str(HOSTILE[2])}"]
    for i, h in enumerate(HOSTILE):
        rid, short = h[:150], h[:60]
        lines += ["[[steps]]", 'op = "arrive"', f"id = {_toml_str(rid)}", f'prompt = "{i * 1000}:{i * 1000 + 40}"']
        lines += [f"lora = {_toml_str(short)}", f"cache_salt = {_toml_str(short)}", f"note = {_toml_str(h)}"]
        lines += [f"mm = [{{id = {_toml_str(h[:30])}, offset = 2, length = 5}}]"]
        lines += ["[[steps]]", 'op = "admit"', f"id = {_toml_str(rid)}"]
    lines += ["[[steps]]", 'op = "finish"', f"id = {_toml_str(HOSTILE[1])}"]
    return "\n".join(lines).encode()


def _blob(obj) -> str:
    """A link value as encode_blob makes it, but with JSON's \\u escapes: a browser can carry
    a lone surrogate that way, never as UTF-8."""
    raw = json.dumps(obj, separators=(",", ":")).encode("ascii")
    return base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode("ascii").rstrip("=")


UPLOAD_NAME = f"![x](http://{EVIL}/f.png) <img src=http://{EVIL}/n.png>.toml"


def test_the_check_sees_markup_that_is_not_escaped():
    at = AppTest.from_string(
        f"import streamlit as st\nst.markdown({HOSTILE[0]!r})\nst.html('<img src=\"http://{EVIL}/x.png\">')"
    ).run()
    problems = page_problems(at)
    assert any(p.startswith("markdown") for p in problems) and any(p.startswith("html") for p in problems)
    assert html_problems("<b onclick=x>a</b><script>1</script>") == ["<b onclick=...>", "<script>"]


def test_a_hostile_upload_is_text_on_every_step_and_in_the_block_history():
    at = explorer()
    at.file_uploader(key="px_w_upload").upload(UPLOAD_NAME, hostile_scenario(), "application/toml").run()
    check_page(at)
    assert not errors(at), errors(at)
    assert page_title(at) == HOSTILE[0]
    n = n_steps(at)
    assert n == 2 * len(HOSTILE) + 1
    for k in range(n + 1):
        step_to(at, k)
        check_page(at)
        assert not errors(at), (k, errors(at))
    assert 'data-px-history="2"' in "".join(stage_bodies(stage_data(at), block=2))  # checked with every part
    bound(at, "selectbox", "px_a_req").set_value(bound(at, "selectbox", "px_a_req").options[0]).run()
    check_page(at)


def test_hostile_playground_fields_and_a_link_that_carries_them():
    at = explorer()
    at.radio(key="px_p_kind").set_value("Token spec").run()
    at.checkbox(key="px_p_img").check().run()
    at.text_input(key="px_p_id").set_value(HOSTILE[3][:40])
    at.text_input(key="px_p_spec").set_value("0:64")
    at.text_input(key="px_p_lora").set_value(HOSTILE[0][:64])
    at.text_input(key="px_p_salt").set_value(HOSTILE[2][:64])
    at.text_input(key="px_p_img_id").set_value(HOSTILE[4][:40])
    at.button(key="FormSubmitter:px_arrive-Arrive").click().run()
    check_page(at)
    assert not errors(at), errors(at)
    assert view(at).edits[-1]["id"] == HOSTILE[3][:40]
    at.button(key="px_b_admit").click().run()
    check_page(at)
    link = explorer(query={"ed": encode_blob(list(view(at).edits)), "step": "22"})
    check_page(link)
    assert not errors(link) and HOSTILE[3][:40] in now_text(link)
    # a typed spec that echoes itself in the error
    at.text_input(key="px_p_spec").set_value(HOSTILE[1])
    at.button(key="FormSubmitter:px_arrive-Arrive").click().run()
    check_page(at)
    assert len(errors(at)) == 1


@pytest.mark.parametrize("s", SURROGATES)
@pytest.mark.parametrize("where", ["id", "lora", "cache_salt", "mm"])
def test_a_lone_surrogate_in_a_shared_link_is_refused_when_decoded(where, s):
    step = {"op": "arrive", "id": "A9", "prompt": "0:40"}
    step[where] = [{"id": s, "offset": 0, "length": 4}] if where == "mm" else f"x{s}y"
    at = explorer(query={"ed": _blob([step]), "step": "21"})
    check_page(at)
    errs = errors(at)
    assert len(errs) == 1 and "playground edits holds a lone surrogate" in errs[0], errs
    assert view(at).edits == () and page_title(at) == "Two chat turns"
    up = explorer(query={"up": _blob({"name": "a\ud800.toml", "toml": "title = 'x'"})})
    check_page(up)
    assert len(errors(up)) == 1 and "lone surrogate" in errors(up)[0]


@pytest.mark.parametrize(
    ("q", "needle"),
    [
        ({"step": "²"}, "step='\u00b2'"),
        ({"step": "٣"}, "ASCII digits"),
        ({"bs": "①"}, "ASCII digits"),
        ({"nb": "３２"}, "ASCII digits"),
        ({"block": "²"}, "ASCII digits"),
        ({"lesson": HOSTILE[0]}, "No lesson named"),
        ({"lesson": HOSTILE[6]}, "No lesson named"),
        ({"algo": HOSTILE[2]}, "Hash algorithm"),
        ({"pc": HOSTILE[3]}, "prefix caching"),
        ({"up": HOSTILE[4]}, "not valid"),
        ({"ed": HOSTILE[8]}, "not valid"),
    ],
)
def test_hostile_url_parameters_give_one_error_and_the_page_still_works(q, needle):
    at = explorer(query=q)
    check_page(at)
    errs = errors(at)
    assert len(errs) == 1 and needle in errs[0], errs
    at.run()
    check_page(at)
    assert "arrive A1" in stage_now_text(at, 1)


@pytest.mark.parametrize("h", [HOSTILE[0], HOSTILE[3], HOSTILE[6]])
def test_a_hostile_seed_from_a_link_is_shown_as_text(h):
    at = explorer(query={"seed": h, "algo": "xxhash", "step": "1"})
    check_page(at)
    assert not errors(at)
    at = explorer(query={"dseed": h, "algo": "xxhash", "step": "1"})
    check_page(at)
    assert not errors(at) and view(at).drawn_seed == h


def test_the_hash_page_shows_hostile_fields_as_text_and_echoes_them_in_one_error():
    at = hash_page()
    for key in ("px_h_lora", "px_h_salt", "px_h_seed"):
        at.text_input(key=key).set_value(HOSTILE[0][:64])
    at.text_input(key="px_h_mm").set_value(f"{HOSTILE[2][:40]}:5:20")
    at.run()
    check_page(at)
    assert not at.error
    for mm in ("img:²:5", "img:5:①", f"{HOSTILE[1]}:x:y"):
        at.text_input(key="px_h_mm").set_value(mm).run()
        check_page(at)
        assert len(at.error) == 1 and "ASCII digits" in plain(at.error[0].value)
    at.text_input(key="px_h_mm").set_value("")
    at.text_input(key="px_h_spec").set_value(HOSTILE[5]).run()
    check_page(at)
    assert len(at.error) == 1
    at.text_input(key="px_h_spec").set_value("0:48")
    at.text_input(key="px_h_salt").set_value("").run()
    assert not at.error and "data-px-hash-table" in "".join(h.value for h in at.html)


def _live() -> AppTest:
    def app():
        from explorer.ui.pages.live import render

        render()

    return AppTest.from_function(app, default_timeout=30).run()


@pytest.mark.parametrize(
    ("endpoints", "needle"),
    [
        ("tcp://127.0.0.1:²", "ASCII digits"),
        (f"tcp://{EVIL}:5557", "not loopback"),
        (f"tcp://127.0.0.1:5557 tcp://<img_src=http://{EVIL}/r.png>:1", "replay endpoint"),
        (f"![p](http://{EVIL}/x.png)", "expected tcp"),
        ("tcp://[::1%lo]:0;127.0.0.3:5701", "source;destination endpoint is not accepted"),
    ],
)
def test_live_endpoints_that_echo_markup_give_one_plain_error(endpoints, needle):
    at = _live()
    at.text_area(key="live_endpoints").set_value(endpoints)
    at.button(key="live_connect").click().run()
    check_page(at)
    assert len(at.error) == 1 and needle in plain(at.error[0].value), [e.value for e in at.error]
    assert at.session_state["live_session"] is None if "live_session" in at.session_state else True


def test_a_live_ipc_endpoint_with_markup_is_drawn_as_text():
    from explorer.ui.live_view import SESSION

    at = _live()
    at.text_area(key="live_endpoints").set_value(f"ipc://a![p](http://{EVIL}/x.png)")
    at.text_input(key="live_topic").set_value(HOSTILE[2][:80])
    at.button(key="live_connect").click().run()
    try:
        for _ in range(20):  # the session's thread publishes its first snapshot
            at.run()
            if any("evil\\.test" in m.value for m in at.markdown):
                break
            time.sleep(0.2)
        check_page(at)
        assert any("evil\\.test" in m.value for m in at.markdown)  # the endpoint, escaped
    finally:
        sess = at.session_state[SESSION]
        if sess is not None:
            sess.stop()


def test_the_router_page_shows_a_hostile_fleet_file_as_text():
    from tests.ui.test_page_router import SMALL, page

    toml = SMALL.to_toml().replace(f'title = "{SMALL.title}"', f"title = {_toml_str(HOSTILE[0])}")
    toml = f"description = {_toml_str(HOSTILE[2])}\n" + toml
    at = page()
    at.text_area(key="router_toml").set_value(toml).run()
    check_page(at)
    assert not at.error, [e.value for e in at.error]
    at.text_area(key="router_toml").set_value(f"[fleet]\ninstances = {_toml_str(HOSTILE[0])}\n").run()
    check_page(at)
    assert len(at.error) == 1
    at.text_area(key="router_toml").set_value(SMALL.to_toml()).run()
    at.text_input(key="router_ask").set_value(HOSTILE[3]).run()
    check_page(at)
    assert len(at.error) == 1
    link = page(cfg=None, token=f"v1.{HOSTILE[0]}")
    check_page(link)
    assert encode_share(SMALL)


def test_the_replay_page_echoes_a_hostile_upload_name_as_text():
    from tests.ui.test_page_replay import fresh, upload

    at = fresh()
    upload(at, b"{oops\n", f"![x](http://{EVIL}/t.png) <script>x</script>.jsonl")
    at.button(key="replay_run").click().run()
    check_page(at)
    assert len(at.error) == 1 and EVIL in plain(at.error[0].value)


def test_practice_and_lessons_with_hostile_answers_and_links():
    from tests.ui.helpers import app_page

    at = app_page("explorer/ui/pages/practice.py")
    at.query_params.update({"seed": "²", "kind": HOSTILE[0]})
    at.run()
    check_page(at)
    at.session_state["practice_seed"] = 11
    at.session_state["practice_kind"] = "hit_length"
    at.run()
    answer = next(t for t in at.text_input if str(t.key).startswith("practice_answer_"))
    answer.input(HOSTILE[0])
    at.button(key="practice_check").click().run()
    check_page(at)
    assert at.error or at.success
    lessons = app_page("explorer/ui/pages/lessons.py")
    lessons.query_params["lesson"] = HOSTILE[0]
    lessons.run()
    check_page(lessons)


def test_after_the_hostile_sessions_a_new_session_sees_the_default_view():
    at = explorer()
    check_page(at)
    assert not errors(at) and page_title(at) == "Two chat turns" and view(at) == ViewState()
