"""AppTest: app.py routes with st.navigation to every page module."""

from __future__ import annotations

import ast
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app.py"

OTHER_PAGES = {
    "page_prefill": "What a hit saves",
    "page_live": "Live events",
    "page_replay": "Trace replay",
    "page_router": "Router",
    "page_practice": "Practice",
    "page_lessons": "Lessons",
}


def _registry() -> dict[str, str]:
    tree = ast.parse(APP.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "PAGES":
            return {elt.elts[0].value: elt.elts[1].value for elt in node.value.elts}
    raise AssertionError("app.py has no PAGES registry")


def test_registry_lists_every_page_with_its_title():
    reg = _registry()
    assert reg["page_explorer"] == "Explorer" and reg["page_hash"] == "Hash calculator"
    for module, title in OTHER_PAGES.items():
        assert reg[module] == title


def test_app_opens_on_the_explorer():
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    assert not at.exception, [e.message for e in at.exception]
    assert '<span class="px-title-main">Two chat turns</span>' in "".join(h.value for h in at.html)


def test_app_switches_to_the_hash_calculator():
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    # AppTest.switch_page only knows file pages; ours are callables registered by url path,
    # so pick the page the way a browser at /hash would.
    pages = getattr(at, "_registered_pages", {})
    found = [h for h, info in pages.items() if info.get("url_pathname") == "hash"]
    assert found, pages
    at._page_hash = found[0]
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    assert at.title[0].value == "Hash calculator"
