"""Prefix Cache Explorer: page setup and navigation (and, once per process, the garbage
collector's freeze of the imported modules: explorer/ui/collector.py), nothing else.

Each page is a script in explorer/ui/pages/ that Streamlit runs only when it is shown, so a
page's heavy imports (torch, zmq) never slow the others down. Pages link to each other by
these file paths.
"""

from __future__ import annotations

import streamlit as st

from explorer.ui.collector import freeze_imports
from explorer.ui.text import page_failed

# (page script, title, icon, url path), in menu order; the first is the default page.
PAGES = [
    ("explorer/ui/pages/explorer.py", "Explorer", ":material/view_module:", "explorer"),
    ("explorer/ui/pages/lessons.py", "Lessons", ":material/school:", "lessons"),
    ("explorer/ui/pages/practice.py", "Practice", ":material/quiz:", "practice"),
    ("explorer/ui/pages/prefill.py", "What a hit saves", ":material/speed:", "prefill"),
    ("explorer/ui/pages/hash.py", "Hash calculator", ":material/tag:", "hash"),
    ("explorer/ui/pages/live.py", "Live events", ":material/sensors:", "live"),
    ("explorer/ui/pages/replay.py", "Trace replay", ":material/replay:", "replay"),
    ("explorer/ui/pages/router.py", "Router", ":material/alt_route:", "router"),
]

st.set_page_config(page_title="Prefix Cache Explorer", page_icon="🧱", layout="wide")
freeze_imports()  # once per process: later full collections skip the imported modules
pages = [
    st.Page(path, title=title, icon=icon, url_path=url, default=(i == 0))
    for i, (path, title, icon, url) in enumerate(PAGES)
]
try:
    st.navigation(pages).run()
except Exception as exc:  # the app's one guard: a page's bug is one line, never a traceback
    page_failed(exc)
