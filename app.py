"""Prefix Cache Explorer: page setup and navigation, nothing else.

Each page is a module in explorer/ui/ with a `render()`, imported only when it is shown, so a
page's heavy imports (torch, zmq) never slow the others down.
"""

from __future__ import annotations

import importlib

import streamlit as st

# (module in explorer/ui, title, icon, url path); the first is the default page.
PAGES = [
    ("page_explorer", "Explorer", ":material/view_module:", "explorer"),
    ("page_lessons", "Lessons", ":material/school:", "lessons"),
    ("page_practice", "Practice", ":material/quiz:", "practice"),
    ("page_prefill", "What a hit saves", ":material/speed:", "prefill"),
    ("page_hash", "Hash calculator", ":material/tag:", "hash"),
    ("page_live", "Live events", ":material/sensors:", "live"),
    ("page_replay", "Trace replay", ":material/replay:", "replay"),
    ("page_router", "Router", ":material/alt_route:", "router"),
]


def _runner(module: str):
    def run() -> None:
        importlib.import_module(f"explorer.ui.{module}").render()

    run.__name__ = f"render_{module}"
    return run


st.set_page_config(page_title="Prefix Cache Explorer", page_icon="🧱", layout="wide")
pages = [
    st.Page(_runner(module), title=title, icon=icon, url_path=url, default=(module == "page_explorer"))
    for module, title, icon, url in PAGES
]
st.navigation(pages).run()
