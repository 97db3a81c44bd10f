"""The explorer's pure logic: URL state, explanations with vLLM references, block history."""

from __future__ import annotations

import base64
import re
import zlib

import pytest

from explorer.errors import BadInput
from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario
from explorer.ui.state import (
    URL_BLOB_CAP,
    ViewState,
    build,
    check_engine,
    decode_blob,
    encode_blob,
    from_query,
    list_lessons,
    to_query,
)
from explorer.view.explain import step as explain
from explorer.view.history import block_history, changed_blocks
from explorer.viz.state_html import event_log_html, requests_html
from tests.ui.helpers import EDGE, LESSON


@pytest.fixture(scope="module")
def lesson_trace():
    return replay(load_scenario(LESSON))


@pytest.fixture(scope="module")
def edge_trace():
    return replay(load_scenario(EDGE))


def test_blob_round_trip_and_refusals():
    edits = [{"op": "arrive", "id": "é", "prompt": "0:10"}]
    assert decode_blob(encode_blob(edits), "edits") == edits
    with pytest.raises(BadInput, match="not valid"):
        decode_blob("%%%", "edits")
    bomb = base64.urlsafe_b64encode(zlib.compress(b"[" + b"0," * 2_000_000 + b"0]", 9)).decode().rstrip("=")
    assert len(bomb) < URL_BLOB_CAP * 2
    with pytest.raises(BadInput, match="unpacks to more than"):
        decode_blob(bomb, "edits")
    with pytest.raises(BadInput, match="too long"):
        decode_blob("A" * (URL_BLOB_CAP * 2 + 1), "edits")


def test_view_round_trips_through_the_url():
    v = ViewState(
        engine={"block_size": 32, "enable_prefix_caching": False, "hash_seed": "7", "vllm": "0.33.0"},
        edits=({"op": "arrive", "id": "Z", "prompt": "0:20"},),
        step=3,
        drawn_seed="ab" * 32,
        presenter=True,
        block=5,
    )
    q, warnings = to_query(v)
    assert not warnings and q["vllm"] == "0.33.0"
    back, errors = from_query(q)
    assert not errors and back == v


def test_a_link_with_an_unknown_vllm_release_is_one_error_and_the_rest_of_the_view():
    back, errors = from_query({"vllm": "0.99.0", "step": "2", "lesson": "01_hash_chain"})
    assert errors == ["The vLLM release must be one of 0.31.0, 0.33.0, got '0.99.0'"]
    assert "vllm" not in back.engine and back.step == 2


def test_edits_too_long_for_a_link_are_left_out_with_a_warning():
    import random

    rnd = random.Random(1)
    edits = tuple(
        {"op": "arrive", "id": f"R{i}", "prompt": ", ".join(str(rnd.randrange(2**31)) for _ in range(40))}
        for i in range(20)
    )
    q, warnings = to_query(ViewState(edits=edits))
    assert "ed" not in q and "too long" not in q and warnings and "download" in warnings[0].lower()


def test_check_engine_refuses_bad_values():
    assert check_engine({"block_size": 8}) == {"block_size": 8}
    for bad in (
        {"block_size": 0},
        {"num_blocks": 10**9},
        {"hash_algo": "md5"},
        {"enable_prefix_caching": "yes"},
        {"vllm": "0.32.0"},
        {"what": 1},
    ):
        with pytest.raises(BadInput):
            check_engine(bad)


def test_lessons_are_listed_and_the_default_one_keeps_its_expectations():
    assert "00_two_chat_turns" in list_lessons()
    sc, rep = build(ViewState())
    assert rep.error is None
    assert rep.trace.expect_failures == []
    assert sc.engine.num_blocks == 300


def _loc_ok(loc: str) -> bool:
    return re.fullmatch(r"vllm/[\w/]+\.py:\d+(-\d+)?", loc) is not None


@pytest.mark.parametrize("which", ["lesson", "edge"])
def test_every_panel_names_a_function_with_its_file_and_lines_and_explains_in_sentences(
    which, lesson_trace, edge_trace
):
    trace = lesson_trace if which == "lesson" else edge_trace
    for k in range(len(trace.steps) + 1):
        now = explain.now(trace, k)
        assert now.refs and all(_loc_ok(r.loc) for r in now.refs)
        assert 1 <= len(now.sentences) <= 4
        for p in explain.panels(trace, k):
            assert p.refs and all(_loc_ok(r.loc) for r in p.refs), p
            assert 2 <= len(p.sentences) <= 4, (k, p.key, p.sentences)
            assert all(
                s.strip()
                and s[0].isupper()
                or s[0].isdigit()
                or s.startswith(("get_", "touch", "free(", "reset_", "allocate_", "prompt_logprobs"))
                for s in p.sentences
            ), p.sentences


def test_explanations_carry_the_steps_numbers(lesson_trace):
    lookup = next(p for p in explain.panels(lesson_trace, 6) if p.key == "lookup")
    assert "(544 - 1) // 16 = 33" in lookup.text and "hit = 30 x 16 = 480 tokens" in lookup.text
    alloc = next(p for p in explain.panels(lesson_trace, 6) if p.key == "allocate")
    assert "4 + 30 = 34 <= 299 free" in alloc.text and "39-42" in alloc.text
    cache = next(p for p in explain.panels(lesson_trace, 6) if p.key == "caching")
    assert "min(480 + 64, 544) = 544" in cache.text
    free = next(p for p in explain.panels(lesson_trace, 4) if p.key == "free")
    assert "(39)" in free.text and "(38-1)" in free.text
    ev = next(p for p in explain.panels(lesson_trace, 17) if p.key == "eviction")
    assert "23 blocks" in ev.text and "23 events" in ev.text


def test_edge_case_explanations(edge_trace):
    by_step = {k: {p.key: p for p in explain.panels(edge_trace, k)} for k in range(1, len(edge_trace.steps) + 1)}
    assert "identical cached twin (#4 = #3)" in by_step[4]["caching"].text
    assert "2 were in use by another request" in by_step[4]["allocate"].text
    assert "Both blocks it may look at hit" in by_step[4]["lookup"].text
    assert "chunked prefill" in by_step[6]["allocate"].text
    assert "cached by earlier chunks" in by_step[7]["caching"].text
    assert "returns None" in by_step[9]["allocate"].text and "prompt_logprobs" in by_step[9]["lookup"].text
    assert "refused" in by_step[10]["eviction"].text
    assert "still cached in another block" in by_step[17]["eviction"].text
    assert "AllBlocksCleared" in by_step[19]["eviction"].text and "L, A" in by_step[19]["free"].text
    assert "holding no block" in explain.now(edge_trace, 14).text


def test_block_history_follows_a_block(lesson_trace):
    h = block_history(lesson_trace, 1)
    texts = [f"{e.step}:{e.text}" for e in h]
    assert texts[0].startswith("2:taken by A1 as its block 0 (popped from the free queue head); got hash")
    assert any(t.startswith("4:released by A1, to the back of the free queue") for t in texts)
    assert any(t.startswith("6:taken by B1 as its block 0 (cache hit, taken out of the free queue)") for t in texts)
    assert any(
        t.startswith("13:taken by B2 as its block 0 (cache hit, now shared)") and "ref_cnt 1 -> 2" in t for t in texts
    )
    assert block_history(lesson_trace, 10**6) == []


def test_changed_blocks(lesson_trace):
    assert changed_blocks(lesson_trace, 0) == set()
    assert changed_blocks(lesson_trace, 2) == set(range(1, 38))
    assert changed_blocks(lesson_trace, 1) == set()


def test_html_escapes_user_strings():
    from explorer.scenario.parse import parse_scenario_text

    sc = parse_scenario_text(
        '[[steps]]\nop = "arrive"\nid = "<img src=x onerror=alert(1)>"\nprompt = "0:40"\nlora = "<b>x</b>"\n'
        '[[steps]]\nop = "admit"\nid = "<img src=x onerror=alert(1)>"\n'
    )
    t = replay(sc)
    snap = t.snapshot_at(2)
    out = requests_html(snap, set()) + event_log_html(t, 2)
    assert "<img" not in out and "&lt;img" in out and "<b>x</b>" not in out


def test_a_generate_that_stopped_counts_the_tokens_it_sampled():
    """Lesson 07 step 8: 18 tokens asked, the 18th allocation failed, so B sampled 17 (64 + 17 = 81)."""
    trace = replay(load_scenario(LESSON.parent / "07_eviction_preemption.toml"))
    step = trace.steps[7]
    assert step.op.op == "generate" and not step.ok and step.num_sampled == 17
    assert explain.now(trace, 8).sentences[0].startswith("B generates 17 of the 18 tokens asked")
    hashing = next(p for p in explain.panels(trace, 8) if p.key == "hashing")
    assert hashing.text.startswith("17 output tokens took B to 81 tokens")
