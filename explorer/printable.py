"""Printable text: control characters, lone surrogates and bidi overrides made visible escapes.

The one rule for showing a string a user controls, on a terminal (the CLI's text output) or a
page (explorer/viz/text.py builds its HTML and Markdown escaping on it).
"""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL, C1 controls, lone surrogates, bidi embeddings/overrides/isolates.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _visible(m: re.Match[str]) -> str:
    c = ord(m.group(0))
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text: str) -> str:
    """``text`` with every unprintable character as a visible escape (``\\x7f``, ``\\udcff``)."""
    return _UNPRINTABLE.sub(_visible, text)
