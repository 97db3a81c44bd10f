"""Token ids from what a user types: the token-spec mini-language and the text tokenizer.

Token spec (design section 3): comma-separated parts, each one of
    INT        the token itself
    a:b        the half-open range a, a+1, ..., b-1 (a <= b)
    x*n        the token x repeated n times
with every INT in [0, 2**31). ``"0:1000, 7*200"`` is the 1,200-token prompt of the interview
walkthrough. The expanded length is computed and checked against a cap *before* anything is
expanded, so a spec like ``0*2000000000`` is refused without allocating.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from explorer.errors import BadInput

MAX_TOKEN_ID = 2**31  # exclusive: every INT of a spec is in [0, 2**31)

_INT = r"\s*(\d+)\s*"
_PART = re.compile(rf"^(?:{_INT}:{_INT}|{_INT}\*{_INT}|{_INT})$")


def _parse_parts(spec: str) -> list[tuple[int, int, int]]:
    """Parse a spec into (kind, a, b) parts: kind 0 = range a:b, 1 = x*n, 2 = single a."""
    if not isinstance(spec, str):
        raise BadInput(f"token spec must be a string, got {type(spec).__name__}")
    if not spec.strip():
        raise BadInput("token spec is empty")
    parts = []
    for raw in spec.split(","):
        m = _PART.match(raw)
        if m is None:
            raise BadInput(
                f"bad token spec part {raw.strip()!r}: expected INT, INT:INT or INT*INT "
                "with non-negative integers"
            )
        g = m.groups()
        if g[0] is not None:
            a, b = int(g[0]), int(g[1])
            _check_int(a), _check_int(b)
            if a > b:
                raise BadInput(f"bad token range {raw.strip()!r}: start {a} is after end {b}")
            parts.append((0, a, b))
        elif g[2] is not None:
            x, n = int(g[2]), int(g[3])
            _check_int(x), _check_int(n)
            parts.append((1, x, n))
        else:
            x = int(g[4])
            _check_int(x)
            parts.append((2, x, 0))
    return parts


def _check_int(v: int) -> None:
    if v >= MAX_TOKEN_ID:
        raise BadInput(f"token spec number {v} is out of range [0, 2**31)")


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
    parts = _parse_parts(spec)
    total = sum(_part_len(*p) for p in parts)
    if max_tokens is not None and total > max_tokens:
        raise BadInput(f"token spec expands to {total:,} tokens, more than the limit {max_tokens:,}")
    out: list[int] = []
    for kind, a, b in parts:
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
