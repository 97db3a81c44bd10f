"""User strings as plain text: the one rule for showing a string someone typed, uploaded or linked.

Every string a user controls (titles, notes, request ids, LoRA names, salts, file names,
endpoints, topics, error messages that echo any of them) reaches the page through one of these:

- ``clean(s)``: printable text. Lone surrogates and control characters (C0 but tab and newline,
  DEL, C1) and the invisible bidirectional overrides become visible escapes (``\\x7f``,
  ``\\udcff``, ``\\u202e``), so nothing unprintable reaches the page and nothing fails to encode;
  a string longer than ``limit`` characters is cut with a note of its length.
- ``esc(s)``: ``clean`` + HTML escaping, for the HTML builders (``st.html`` bodies).
- ``md(s)``: ``clean`` + a backslash before every ASCII punctuation character, for anything
  Streamlit renders as Markdown (alerts, captions, labels, toasts). CommonMark treats an escaped
  punctuation character as that literal character, so no link, image, emphasis, code span,
  HTML tag, autolink, math or Streamlit directive can start inside the user's text. Two
  rewrites run on the parsed text itself, where escapes no longer count: GFM's bare-URL and
  e-mail links (``http://...``, ``www.x``, ``a@b.c``) and emoji and icon shortcodes
  (``:smile:``); so an invisible WORD JOINER (U+2060) also follows every colon and precedes
  every ``@`` and the dot after ``www``: the text reads the same, and neither rewrite matches.

``check_text`` refuses a string that is not text (a lone surrogate, say from a link's JSON).
Pure functions, no Streamlit: the HTML builders in explorer/viz use them, and explorer/ui/text.py
draws with them.
"""

from __future__ import annotations

import re
from html import escape
from typing import Any

from explorer.errors import BadInput
from explorer.printable import printable

MAX_TEXT = 10_000  # characters of one string shown on a page (a longer one is cut, with its length)

_SURROGATE = re.compile("[\ud800-\udfff]")
_MD_SPECIAL = re.compile(r"([!-/:-@\[-`{-~])")  # every ASCII punctuation character
_JOIN = "\u2060"  # WORD JOINER: invisible, and breaks the patterns of GFM's literal links and shortcodes
_WWW_DOT = re.compile(r"(www)(\\\.)", re.IGNORECASE)


def clean(s: object, limit: int = MAX_TEXT) -> str:
    """``s`` as printable text of at most about ``limit`` characters."""
    text = s if isinstance(s, str) else str(s)
    cut = len(text) > limit
    if cut:
        text = text[:limit]
    text = printable(text)
    if cut:
        text += f"... ({len(s) if isinstance(s, str) else 'more'} characters in all)"
    return text


def esc(s: object, limit: int = MAX_TEXT) -> str:
    """``s`` as text inside HTML (element content or a quoted attribute)."""
    return escape(clean(s, limit), quote=True)


def md(s: object, limit: int = MAX_TEXT, inline: bool = False) -> str:
    """``s`` as literal text inside Markdown; ``inline``: on one line (newlines and tabs become
    spaces), for labels, alerts and list items."""
    text = clean(s, limit)
    if inline:
        text = text.replace("\n", " ").replace("\t", " ")
    text = _MD_SPECIAL.sub(r"\\\1", text)
    text = text.replace("\\:", "\\:" + _JOIN).replace("\\@", _JOIN + "\\@")
    return _WWW_DOT.sub(r"\1" + _JOIN + r"\2", text)


def check_text(value: object, what: str) -> Any:
    """``value`` unchanged, or a BadInput when a string in it (at any depth of lists and
    tables) holds a lone surrogate: not text, and nothing can encode it to show or save it."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            m = _SURROGATE.search(v)
            if m:
                raise BadInput(f"{what} holds a lone surrogate ({printable(m.group(0))}), which is not text")
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return value
