"""The hash calculator: tokens or text in; vLLM's exact block digests, group-id keys and 64-bit
event hashes out, for any algorithm and seed (the engine of `python -m explorer hash`)."""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING

import streamlit as st

from explorer.core.hashing import HASH_ALGOS, NON_CRYPTO_HASH_ALGOS, resolve_none_hash_seed
from explorer.errors import BadInput
from explorer.hashcalc import block_hash_table
from explorer.numbers import is_int
from explorer.ui.state import UI_LIMITS
from explorer.ui.style import CSS_PATH
from explorer.ui.text import check_text, error, esc

if TYPE_CHECKING:
    from explorer.core.request import MultiModalFeature

MAX_ROWS = 512
K_SEED = "px_hash_drawn_seed"


def _tokenizer_available() -> bool:
    from explorer.tokens import tokenizer_available  # the tokenizer's libraries load on use

    return tokenizer_available()


def parse_mm(text: str, num_tokens: int) -> list[MultiModalFeature]:
    """`id:offset:length` items, comma separated, into sorted MultiModalFeatures."""
    from explorer.core.request import MultiModalFeature, check_mm_features

    items = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        bits = part.rsplit(":", 2)
        if len(bits) != 3 or not all(
            is_int(b) and not b.strip().startswith("-") and len(b.strip()) <= 9 for b in bits[1:]
        ):
            shown = part if len(part) <= 60 else f"{part[:60]}... ({len(part):,} characters)"
            raise BadInput(
                f"image {shown!r}: expected ID:OFFSET:LENGTH with whole numbers in ASCII digits, e.g. img-1:5:32"
            )
        items.append(MultiModalFeature(bits[0].strip(), int(bits[1]), int(bits[2])))
    items.sort(key=lambda m: m.offset)
    check_mm_features(items, num_tokens)
    return items


def _tokens(kind: str, text: str, spec: str) -> list[int]:
    from explorer.tokens import parse_token_spec, spec_length

    cap = UI_LIMITS.max_prompt_tokens
    if kind == "Text":
        from explorer.tokens import encode_text

        if len(text) > 200_000:
            raise BadInput(f"text has {len(text):,} characters, more than the limit 200,000")
        ids = encode_text(text)
        if len(ids) > cap:
            raise BadInput(f"the text tokenizes to {len(ids):,} tokens, more than the limit {cap:,}")
        return ids
    if spec_length(spec) > cap:
        raise BadInput(f"the token spec expands to {spec_length(spec):,} tokens, more than the limit {cap:,}")
    return parse_token_spec(spec, cap)


def _seed(algo: str, typed: str) -> str | None:
    """The seed to hash with: the typed one, vLLM's default, or this session's drawn one."""
    if typed:
        return typed
    if algo in NON_CRYPTO_HASH_ALGOS:
        if K_SEED not in st.session_state:
            st.session_state[K_SEED] = resolve_none_hash_seed(algo, None)
        return st.session_state[K_SEED]
    return None


def _table_html(result: dict) -> str:
    rows = []
    for b in result["blocks"][:MAX_ROWS]:
        extra = "" if b["extra_keys"] is None else esc(json.dumps(b["extra_keys"]))
        rows.append(
            f"<tr><td>{b['index']}</td><td>{b['tokens'][0]:,}-{b['tokens'][1] - 1:,}</td>"
            f"<td><code class='px-digest'>{b['hash']}</code></td><td><code class='px-digest'>{b['key']}</code></td>"
            f"<td><code>{b['external']}</code></td><td>{extra}</td></tr>"
        )
    more = len(result["blocks"]) - MAX_ROWS
    foot = (
        f"<tr><td colspan='6' class='px-more'>&hellip; {more:,} more blocks in the JSON download</td></tr>"
        if more > 0
        else ""
    )
    return (
        "<div class='px-scroll' style='max-height:560px'><table class='px-table px-hash-table' data-px-hash-table='1'>"
        "<tr><th>block</th><th>tokens</th><th>hash (BlockHash digest)</th><th>key (hash + 4-byte group id)</th>"
        "<th>event hash (low 64 bits)</th><th>extra keys</th></tr>" + "".join(rows) + foot + "</table></div>"
    )


# How vLLM 0.31.0 derives NONE_HASH (init_none_hash, kv_cache_utils.py:160-172): the hash
# function of the algorithm applied to the seed string, so the string is serialised first.
NONE_HASH_FORMULA = {
    "sha256": "sha256(pickle.dumps(seed, protocol=5))",
    "sha256_cbor": "sha256(cbor2.dumps(seed, canonical=True))",
    "xxhash": "xxh3_128(pickle.dumps(seed, protocol=5))",
    "xxhash_cbor": "xxh3_128(cbor2.dumps(seed, canonical=True))",
}
INTERVIEW_NOTE = (
    'The interview walkthrough\'s runnable model writes NONE_HASH = sha256(b"vllm-none-hash") = f686fa60..., '
    "the hash of the seed's raw bytes, and pickles each block's tuple with pickle's default protocol; vLLM 0.31.0 "
    "hashes the pickled seed string (protocol 5), so its NONE_HASH is 066b1e89... and every block hash differs "
    "from the model's. The model's hit counts are still vLLM's: a hit needs only equal hashes for equal prefixes."
)
XXHASH_NOTE = (
    "xxhash without a seed: vLLM draws a random seed in every process (init_none_hash warns about it), so these "
    "values change from run to run and between vLLM instances. Type a seed (as PYTHONHASHSEED) to repeat them."
)


def seed_caption(algo: str, typed_seed: str) -> str:
    """What the NONE_HASH line needs beside it: the walkthrough's other value for sha256's
    default seed, the per-run seed of xxhash without one."""
    if algo in NON_CRYPTO_HASH_ALGOS and not typed_seed:
        return XXHASH_NOTE
    if algo == "sha256" and not typed_seed:
        return INTERVIEW_NOTE
    if not typed_seed:
        return (
            'vLLM\'s default seed "vllm-none-hash", CBOR-encoded: the same NONE_HASH in every vLLM process, '
            "and reproducible outside Python."
        )
    return "A typed seed is the string vLLM would read from PYTHONHASHSEED: the same seed gives the same hashes in any run."


def render() -> None:
    with contextlib.suppress(OSError):
        st.html(f"<style>{CSS_PATH.read_text(encoding='utf-8')}</style>")
    st.title("Hash calculator")
    st.caption(
        "vLLM 0.31.0's block hashes for any tokens: hash_block_tokens (vllm/v1/core/kv_cache_utils.py:684-714) chained "
        "from NONE_HASH (kv_cache_utils.py:104-172), the hash-map key with its group id (kv_cache_utils.py:61-93) and "
        "the 64-bit form KV events carry (maybe_convert_block_hash, kv_cache_utils.py:96-99). Only full blocks get a hash."
    )
    has_tok = _tokenizer_available()
    c1, c2 = st.columns([3, 2])
    with c1:
        kinds = ["Token spec", "Text"] if has_tok else ["Token spec"]
        kind = st.radio("Input", kinds, horizontal=True, key="px_h_kind")
        if not has_tok:
            st.caption("Text needs SmolLM2-135M's tokenizer, whose model file is not installed here: use a token spec.")
        if kind == "Text":
            text = st.text_area(
                "Text (SmolLM2-135M tokenizer, no special tokens added)",
                key="px_h_text",
                value=(
                    "You are a helpful assistant. Answer the user's questions briefly, cite your sources, "
                    "and say so when you do not know the answer. Never make up facts."
                ),
                height=100,
                max_chars=200_000,
            )
            spec = ""
        else:
            spec = st.text_input(
                "Token spec (a:b ranges, x*n repeats, comma separated)", key="px_h_spec", value="0:48", max_chars=4_000
            )
            text = ""
    with c2:
        a, b = st.columns(2)
        block_size = a.number_input("Block size", min_value=1, max_value=1024, value=16, step=1, key="px_h_bs")
        group_id = b.number_input(
            "KV cache group id", min_value=0, max_value=2**32 - 1, value=0, step=1, key="px_h_gid"
        )
        algo = st.selectbox("Hash algorithm", HASH_ALGOS, key="px_h_algo")
        typed_seed = st.text_input(
            "Seed (PYTHONHASHSEED; empty = vLLM's default)", key="px_h_seed", max_chars=256
        ).strip()
    with st.expander("Extra keys: LoRA, cache_salt, images"):
        a, b, c = st.columns(3)
        lora_name = a.text_input("LoRA name", key="px_h_lora", max_chars=64).strip()
        lora_path = b.text_input("LoRA path (default loras/<name>)", key="px_h_lora_path", max_chars=256).strip()
        salt = c.text_input("cache_salt", key="px_h_salt", max_chars=128)
        mm_text = st.text_input(
            "Images as ID:OFFSET:LENGTH, comma separated", key="px_h_mm", placeholder="img-1:5:32", max_chars=2_000
        )
    compare = st.checkbox("Compare all four algorithms", key="px_h_compare")

    try:
        for value, what in (
            (text, "the text"),
            (spec, "the token spec"),
            (typed_seed, "the seed"),
            (lora_name, "the LoRA name"),
            (lora_path, "the LoRA path"),
            (salt, "the cache_salt"),
            (mm_text, "the images"),
        ):
            check_text(value, what)
        tokens = _tokens(kind, text, spec)
        lora = None
        if lora_name:
            from explorer.core.request import LoRARequest

            lora = LoRARequest(lora_name, 1, lora_path or f"loras/{lora_name}")
        mm = parse_mm(mm_text, len(tokens)) if mm_text.strip() else []
        seed = _seed(algo, typed_seed)
        result = block_hash_table(tokens, int(block_size), algo, seed, lora, salt or None, mm, int(group_id))
    except BadInput as e:
        error(str(e))
        return
    except (ValueError, UnicodeError, OverflowError) as e:  # a check below this page that said nothing
        error(f"cannot hash this input: {e}")
        return

    full = len(result["blocks"])
    tail = len(tokens) % int(block_size)
    drawn = not typed_seed and algo in NON_CRYPTO_HASH_ALGOS
    st.markdown(
        f"**{len(tokens):,} tokens** → **{full:,} full blocks** of {int(block_size)}"
        + (f" and a partial tail of {tail} tokens (no hash)." if tail else ".")
    )
    seed_note = (
        " (drawn once for this browser session, as vLLM draws one per process for xxhash without PYTHONHASHSEED)"
        if drawn
        else ""
    )
    st.html(
        f"<div class='px-refs' data-px-none-hash='{result['none_hash']}'>algo {esc(result['algo'])} · seed "
        f"{esc(json.dumps(result['hash_seed']))}{seed_note}<br>NONE_HASH = {esc(NONE_HASH_FORMULA[algo])} = "
        f"{result['none_hash']}</div>"
    )
    st.caption(seed_caption(algo, typed_seed))
    if drawn and st.button("Draw a new seed", key="px_h_newseed"):
        st.session_state.pop(K_SEED, None)
        st.rerun()
    if full:
        st.html(_table_html(result))
    else:
        st.info("No full block: nothing is hashed.")
    st.download_button(
        "Download as JSON (the `hash` command's output)",
        data=json.dumps(result, indent=1),
        file_name="block_hashes.json",
        mime="application/json",
        key="px_h_dl",
        on_click="ignore",
    )

    if compare and full:
        rows = []
        per_algo = {}
        for al in HASH_ALGOS:
            s = typed_seed or (st.session_state.get(K_SEED) if al in NON_CRYPTO_HASH_ALGOS else None)
            if al in NON_CRYPTO_HASH_ALGOS and not s:
                s = _seed(al, "")
            per_algo[al] = block_hash_table(tokens, int(block_size), al, s, lora, salt or None, mm, int(group_id))
        for i in range(min(full, 64)):
            cells = "".join(
                f"<td><code>{per_algo[al]['blocks'][i]['hash'][:16]}&hellip;</code><br><small>{per_algo[al]['blocks'][i]['external']}</small></td>"
                for al in HASH_ALGOS
            )
            rows.append(f"<tr><td>{i}</td>{cells}</tr>")
        head = "".join(
            f"<th>{al}<br><small>NONE_HASH {per_algo[al]['none_hash'][:12]}&hellip;</small></th>" for al in HASH_ALGOS
        )
        st.html(
            f"<div class='px-scroll'><table class='px-table' data-px-compare='1'><tr><th>block</th>{head}</tr>{''.join(rows)}</table></div>"
        )
        st.caption(
            "sha256 and xxhash pickle the tuple (Python only); the _cbor variants hash canonical CBOR, which other languages can reproduce. "
            "xxhash digests are 16 bytes, sha256 32."
        )


# Streamlit runs a page file as __main__; importing it (a test calling render()) draws nothing.
if __name__ == "__main__":
    render()
