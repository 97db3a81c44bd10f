"""The TOML writer: every value a parsed scenario holds is written so that it reads back the same.

The property test round-trips random sessions (any Unicode in titles, descriptions, notes, ids,
LoRA names and paths, salts, image ids, the hash seed) through `scenario_to_toml` and
`parse_scenario_text`.
"""

from __future__ import annotations

import pytest
import rtoml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from explorer.core.hashing import HASH_ALGOS
from explorer.errors import BadInput
from explorer.scenario.parse import parse_scenario_dict, parse_scenario_text
from explorer.scenario.write import scenario_to_toml, toml_string

# Any Unicode scalar value (a lone surrogate is no text: the parser refuses it).
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30)
NAME = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)
CONTROLS = [chr(c) for c in range(0x20)] + ["\x7f", "\u0085", "\u2028", "\ufeff", "\\", '"', "'''", '"""']
NASTY = st.lists(st.sampled_from(CONTROLS) | TEXT, max_size=6).map("".join)
STRING = st.one_of(TEXT, NASTY)

SPEC = st.tuples(
    st.integers(0, 2**31 - 1).map(str),  # a first token: a prompt is never empty
    st.lists(
        st.one_of(
            st.integers(0, 2**31 - 1).map(str),
            st.tuples(st.integers(0, 100), st.integers(0, 40)).map(lambda t: f"{t[0]}:{t[0] + t[1]}"),
            st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 30)).map(lambda t: f"{t[0]}*{t[1]}"),
        ),
        max_size=3,
    ),
).map(lambda t: ", ".join([t[0], *t[1]]))
TOKENS = st.one_of(SPEC, st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=20))


@st.composite
def expect(draw, op: str):
    out = {}
    if draw(st.booleans()):
        out["ok"] = draw(st.booleans())
    if draw(st.booleans()):
        out["free_queue"] = draw(st.lists(st.integers(0, 10**6), max_size=5))
    if draw(st.booleans()):
        out["event_types"] = draw(st.lists(st.sampled_from(["BlockStored", "BlockRemoved"]) | STRING, max_size=3))
    if op == "admit" and draw(st.booleans()):
        out["hit_tokens"] = draw(st.integers(0, 10**6))
    if draw(st.booleans()):
        out["stats_hits"] = draw(st.integers(-(2**63), 2**63 - 1))
    return out


@st.composite
def step(draw):
    op = draw(st.sampled_from(["arrive", "admit", "sample", "generate", "decode", "finish", "preempt", "reset"]))
    s: dict = {"op": op}
    if op != "reset":
        s["id"] = draw(NAME | st.sampled_from(["A", "x\x7f", "\x00", "id with spaces"]))
    else:
        s["running"] = draw(st.booleans())
    if op == "arrive":
        s["prompt"] = draw(TOKENS)
        if draw(st.booleans()):
            name = draw(NAME)
            s["lora"] = name
            if draw(st.booleans()):
                s["lora_path"] = "p/" + name  # one path per name, however the name is drawn
        if draw(st.booleans()):
            s["cache_salt"] = draw(STRING)
        if draw(st.booleans()):
            s["mm"] = [{"id": draw(NAME), "offset": 0, "length": 1}]
        if draw(st.booleans()):
            s["prompt_logprobs"] = draw(st.booleans())
    elif op == "admit" and draw(st.booleans()):
        s["tokens"] = draw(st.integers(1, 10**6))
    elif op in ("sample", "generate"):
        s["tokens"] = draw(TOKENS)
    if draw(st.booleans()):
        s["note"] = draw(STRING)
    if draw(st.booleans()):
        s["expect"] = draw(expect(op))
    return s


@st.composite
def session(draw):
    engine = {
        "block_size": draw(st.integers(1, 64)),
        "num_blocks": draw(st.integers(2, 500)),
        "hash_algo": draw(st.sampled_from(HASH_ALGOS)),
        "hash_seed": draw(STRING),
        "enable_prefix_caching": draw(st.booleans()),
    }
    return {
        "title": draw(STRING),
        "description": draw(STRING),
        "engine": engine,
        "steps": draw(st.lists(step(), max_size=8)),
    }


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(session())
def test_a_session_round_trips_through_toml_unchanged(raw):
    scenario = parse_scenario_dict(raw, "<session>")
    again = parse_scenario_text(scenario_to_toml(scenario), "<session>")
    assert again.title == scenario.title
    assert again.description == scenario.description
    assert again.engine == scenario.engine
    assert again.ops == scenario.ops
    assert again.raw_steps == scenario.raw_steps


@given(STRING)
def test_toml_string_reads_back(text):
    assert rtoml.loads("k = " + toml_string(text))["k"] == text


@pytest.mark.parametrize("char", [chr(c) for c in range(0x20)] + ["\x7f"])
def test_every_control_character_is_escaped(char):
    written = toml_string(f"a{char}b")
    assert char not in written
    assert rtoml.loads(f"k = {written}")["k"] == f"a{char}b"


def test_a_title_and_an_id_with_del_round_trip():
    raw = {"title": "t\x7f", "steps": [{"op": "arrive", "id": "a\x7fb", "prompt": "0:16", "note": "n\x7f"}]}
    scenario = parse_scenario_dict(raw)
    text = scenario_to_toml(scenario)
    assert "\x7f" not in text
    assert parse_scenario_text(text).ops == scenario.ops


def test_a_lone_surrogate_is_refused_at_parse_and_by_the_writer():
    for field in ("title", "description"):
        with pytest.raises(BadInput, match=f"{field}: not valid Unicode text"):
            parse_scenario_dict({field: "x\udcff"})
    raw = {"steps": [{"op": "arrive", "id": "A", "prompt": "1", "cache_salt": "\ud800"}]}
    with pytest.raises(BadInput, match="cache_salt: not valid Unicode text"):
        parse_scenario_dict(raw)
    with pytest.raises(BadInput, match="lone surrogate"):
        toml_string("\udcff")


def test_a_datetime_in_an_expect_is_refused_at_parse():
    text = "[[steps]]\nop = 'arrive'\nid = 'A'\nprompt = '1'\nexpect = { ok = 1979-05-27 }\n"
    with pytest.raises(BadInput, match=r"expect.ok: expected true or false, got the TOML date/time 1979-05-27"):
        parse_scenario_text(text, "s.toml")
