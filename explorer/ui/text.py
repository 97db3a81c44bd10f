"""The pages' one path for text that may hold a user's string: shown escaped, never as Markdown or HTML.

A message that echoes anything a user typed, uploaded, linked or a publisher sent (an endpoint,
a file name, a request id, a scenario's title or note, an error naming any of them) is drawn
with the functions below, which escape it with explorer.viz.text (``md`` for Streamlit's
Markdown elements, ``esc`` for HTML, ``clean`` for plain-text elements such as tables, options
and code). App-authored Markdown that embeds a user string escapes just that string:
``st.caption(f"**Source:** {md(name)}")``.
"""

from __future__ import annotations

import logging
from typing import Any

import streamlit as st

from explorer.viz.text import check_text, clean, esc, md

__all__ = [
    "alert",
    "caption",
    "caption_html",
    "check_text",
    "clean",
    "error",
    "esc",
    "heading_html",
    "info",
    "label",
    "md",
    "paragraph",
    "paragraph_html",
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


def paragraph_html(text: object) -> str:
    """``paragraph`` as HTML (escaped, newlines kept as line breaks), for a block of the stage
    drawn with explorer.ui.html_block together with the markup around it."""
    lines = esc(text).split("\n")
    return '<p class="px-p">' + "<br>".join(line.lstrip() for line in lines) + "</p>"


def caption_html(text: object) -> str:
    """``caption`` as HTML, for a block of the stage drawn with explorer.ui.html_block."""
    return f'<div class="px-cap">{esc(text)}</div>'


def heading_html(anchor: str, text: object) -> str:
    """A section heading (``st.subheader`` with an anchor) as HTML, for explorer.ui.html_block."""
    return f'<h3 class="px-h3" id="{esc(anchor)}">{esc(text)}</h3>'


def toast(text: object, **kwargs: Any) -> None:
    st.toast(md(text, 500, inline=True), **kwargs)


def page_failed(exc: Exception) -> None:
    """The app's one guard (app.py): a bug on a page is one line for the viewer, its traceback
    in the server's log, and the session goes on (the next action reruns the page)."""
    logging.getLogger("explorer.ui").error("a page failed", exc_info=exc)
    with st.container(key="px_page_failed"):
        error(
            f"This page hit a bug ({type(exc).__name__}); the app keeps running. "
            "Your last action was not applied; the server's log has the details."
        )
