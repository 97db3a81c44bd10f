"""AppTest: the hash calculator page against explorer.hashcalc (the `hash` command's engine)."""

from __future__ import annotations

import re

import pytest

from explorer.core.request import LoRARequest, MultiModalFeature
from explorer.hashcalc import block_hash_table
from tests.ui.helpers import all_html, errors, hash_page, no_exception

SHA256_BLOCK0 = "fe8fa5dda3210d0ca2031e37cbe3b001186773cd1c710beb2d45fcb51d434798"
SHA256_NONE = "066b1e8987e027138e98701c46128929378935f9b6cd1549105ae6b4f0d71198"


def _digests(at) -> list[str]:
    table = next(h.value for h in at.html if "data-px-hash-table" in h.value)
    return re.findall(
        r"<td><code class='px-digest'>([0-9a-f]+)</code></td><td><code class='px-digest'>[0-9a-f]+</code>", table
    )


def test_default_tokens_give_vllms_test_vectors():
    at = hash_page()
    no_exception(at)
    assert not errors(at)
    assert _digests(at)[0] == SHA256_BLOCK0
    html = all_html(at)
    assert SHA256_NONE in html and "3262291359910021016" in html
    assert "**48 tokens** → **3 full blocks** of 16." in at.markdown[0].value


@pytest.mark.parametrize("algo", ["sha256", "sha256_cbor", "xxhash", "xxhash_cbor"])
def test_each_algorithm_matches_hashcalc(algo):
    at = hash_page()
    at.text_input(key="px_h_seed").set_value("0")
    at.selectbox(key="px_h_algo").set_value(algo).run()
    want = block_hash_table(list(range(48)), 16, algo, "0")
    assert _digests(at) == [b["hash"] for b in want["blocks"]]
    html = all_html(at)
    assert all(str(b["external"]) in html for b in want["blocks"])
    assert all(b["key"] in html for b in want["blocks"])


def test_extra_keys_and_group_id():
    at = hash_page()
    at.text_input(key="px_h_spec").set_value("0:40")
    at.text_input(key="px_h_lora").set_value("sql")
    at.text_input(key="px_h_salt").set_value("s1")
    at.text_input(key="px_h_mm").set_value("img-1:8:20")
    at.number_input(key="px_h_gid").set_value(3).run()
    no_exception(at)
    want = block_hash_table(
        list(range(40)),
        16,
        "sha256",
        None,
        LoRARequest("sql", 1, "loras/sql"),
        "s1",
        [MultiModalFeature("img-1", 8, 20)],
        3,
    )
    assert _digests(at) == [b["hash"] for b in want["blocks"]]
    assert want["blocks"][0]["key"].endswith("00000003")
    html = all_html(at)
    assert "cache_salt" in html and "img-1" in html and "partial tail of 8 tokens" in at.markdown[0].value


def test_xxhash_without_seed_draws_once_per_session():
    at = hash_page()
    at.selectbox(key="px_h_algo").set_value("xxhash").run()
    first = _digests(at)
    at.text_input(key="px_h_spec").set_value("0:48").run()
    at.number_input(key="px_h_bs").set_value(16).run()
    assert _digests(at) == first
    assert "drawn once for this browser session" in all_html(at)
    at.button(key="px_h_newseed").click().run()
    assert _digests(at) != first


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("px_h_spec", "0:16, x", "bad token spec part 'x'"),
        ("px_h_spec", "0:99999999", "more than the limit"),
        ("px_h_mm", "img-1:5", "ID:OFFSET:LENGTH"),
        ("px_h_mm", "img-1:40:20", "outside the 48-token prompt"),
        ("px_h_mm", "i" * 1_900 + ":0", "... (1,902 characters)': expected ID:OFFSET:LENGTH"),
    ],
)
def test_bad_input_shows_one_error(field, value, needle):
    at = hash_page()
    at.text_input(key=field).set_value(value).run()
    no_exception(at)
    errs = errors(at)
    assert len(errs) == 1 and needle in errs[0], errs
    at.text_input(key=field).set_value("" if field == "px_h_mm" else "0:32").run()
    assert not errors(at) and len(_digests(at)) == (3 if field == "px_h_mm" else 2)


def test_compare_all_algorithms():
    at = hash_page()
    at.checkbox(key="px_h_compare").check().run()
    table = next(h.value for h in at.html if "data-px-compare" in h.value)
    assert all(a in table for a in ("sha256", "sha256_cbor", "xxhash", "xxhash_cbor"))
    assert SHA256_BLOCK0[:16] in table


def test_text_input_uses_the_tokenizer():
    from explorer.tokens import encode_text, tokenizer_available

    at = hash_page()
    if not tokenizer_available():
        assert "Text" not in at.radio(key="px_h_kind").options
        return
    at.radio(key="px_h_kind").set_value("Text").run()
    text = at.text_area(key="px_h_text").value
    ids = encode_text(text)
    want = block_hash_table(ids, 16, "sha256", None)
    assert want["blocks"] and _digests(at) == [b["hash"] for b in want["blocks"]]


def test_without_the_tokenizer_text_is_not_offered(monkeypatch):
    from explorer import tokens as tokens_module

    monkeypatch.setattr(tokens_module, "tokenizer_available", lambda: False)
    at = hash_page()
    assert at.radio(key="px_h_kind").options == ["Token spec"]
    assert any("model file is not installed" in c.value for c in at.caption)


def test_the_extra_key_fields_hold_no_more_than_the_shared_caps():
    """The page's fields are tighter than the caps every surface shares (explorer/extra_keys.py):
    a browser cannot type past them, and what they hold is refused nowhere."""
    from explorer.extra_keys import MAX_EXTRA_KEY_CHARS

    at = hash_page()
    caps = {w.key: w.max_chars for w in at.text_input if w.key in ("px_h_lora", "px_h_salt", "px_h_mm")}
    assert caps == {"px_h_lora": 64, "px_h_salt": 128, "px_h_mm": 2_000}, caps
    assert max(caps["px_h_lora"], caps["px_h_salt"]) <= MAX_EXTRA_KEY_CHARS
    at.text_input(key="px_h_lora").set_value("l" * 64).run()
    at.text_input(key="px_h_salt").set_value("s" * 128).run()
    no_exception(at)
    assert not errors(at) and len(_digests(at)) == 3
