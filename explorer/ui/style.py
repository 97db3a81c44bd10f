"""The explorer's stylesheet (assets/explorer.css), shared by the pages that draw its panels and tables."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

ASSETS = Path(__file__).resolve().parents[2] / "assets"
CSS_PATH = ASSETS / "explorer.css"
PRESENTER_CSS_PATH = ASSETS / "presenter.css"


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return ""


def page_css(presenter: bool) -> None:
    """The stylesheet, plus presenter mode's (assets/presenter.css: one step on one 16:9 screen)."""
    css = _read(CSS_PATH)
    if presenter:
        css += "\n" + _read(PRESENTER_CSS_PATH)
    st.html(f"<style>{css}</style>")
