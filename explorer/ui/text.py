"""The pages' one path for text that may hold a user's string: shown escaped, never as Markdown or HTML.

A message that echoes anything a user typed, uploaded, linked or a publisher sent (an endpoint,
a file name, a request id, a scenario's title or note, an error naming any of them) is drawn
with the functions below, which escape it with explorer.viz.text (``md`` for Streamlit's
Markdown elements, ``esc`` for HTML, ``clean`` for plain-text elements such as tables, options
and code). App-authored Markdown that embeds a user string escapes just that string:
``st.caption(f"**Source:** {md(name)}")``.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from explorer.viz.text import check_text, clean, esc, md

__all__ = [
    "alert",
    "caption",
    "check_text",
    "clean",
    "error",
    "esc",
    "info",
    "label",
    "md",
    "paragraph",
    "success",
    "toast",
    "warning",
]


def label(s: object) -> str:
    """A widget, expander or metric label (Markdown on one line) holding ``s`` as text."""
    return md(s, 200, inline=True)


def alert(kind: str, text: object) -> None:
    """``st.error`` / ``warning`` / ``info`` / ``success`` with ``text`` shown literally."""
    fn = {"error": st.error, "warning": st.warning, "info": st.info, "success": st.success}[kind]
    fn(md(text, 1_000, inline=True))


def error(text: object) -> None:
    alert("error", text)


def warning(text: object) -> None:
    alert("warning", text)


def info(text: object) -> None:
    alert("info", text)


def success(text: object) -> None:
    alert("success", text)


def caption(text: object) -> None:
    st.caption(md(text, 1_000, inline=True))


def paragraph(text: object) -> None:
    """A paragraph of plain text (newlines kept as line breaks)."""
    lines = md(text).split("\n")
    st.markdown("  \n".join(line.lstrip() for line in lines))


def toast(text: object, **kwargs: Any) -> None:
    st.toast(md(text, 500, inline=True), **kwargs)
