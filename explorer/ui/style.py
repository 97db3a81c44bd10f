"""The explorer's stylesheet (assets/explorer.css), shared by the pages that draw its panels and tables."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

CSS_PATH = Path(__file__).resolve().parents[2] / "assets" / "explorer.css"


def page_css(presenter: bool) -> None:
    """The stylesheet, plus presenter mode's larger type and hidden sidebar."""
    try:
        css = CSS_PATH.read_text(encoding="utf-8")
    except OSError:
        css = ""
    if presenter:
        css += (
            "\nhtml { font-size: 24px; }"
            '\nsection[data-testid="stSidebar"], [data-testid="stSidebarCollapsedControl"], [data-testid="stSidebarNav"] { display: none !important; }'
            '\n[data-testid="stHeader"] { display: none; }'
            "\n.block-container { padding-top: 1rem; max-width: 100% !important; }"
            "\n.px-blk { font-size: 0.85rem; }"
        )
    st.html(f"<style>{css}</style>")
