"""AppTest: app.py routes with st.navigation to every page script, by its path."""

from __future__ import annotations

import ast

import pytest
from streamlit.testing.v1 import AppTest

from tests.ui.helpers import APP, HASH_PAGE, ROOT, app_page

OTHER_PAGES = {
    "explorer/ui/pages/prefill.py": "What a hit saves",
    "explorer/ui/pages/live.py": "Live events",
    "explorer/ui/pages/replay.py": "Trace replay",
    "explorer/ui/pages/router.py": "Router",
    "explorer/ui/pages/practice.py": "Practice",
    "explorer/ui/pages/lessons.py": "Lessons",
}


def _pages() -> list[tuple[str, str, str, str]]:
    """app.py's PAGES table: (page script, title, icon, url path), in menu order."""
    tree = ast.parse(APP.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "PAGES":
            return [tuple(ast.literal_eval(elt)) for elt in node.value.elts]
    raise AssertionError("app.py has no PAGES registry")


def _registry() -> dict[str, str]:
    return {path: title for path, title, _, _ in _pages()}


def test_registry_lists_every_page_with_its_title():
    reg = _registry()
    assert reg["explorer/ui/pages/explorer.py"] == "Explorer" and reg[HASH_PAGE] == "Hash calculator"
    for path, title in OTHER_PAGES.items():
        assert reg[path] == title


@pytest.mark.parametrize("path", [p[0] for p in _pages()])
def test_every_registered_page_exists_and_renders(path):
    assert (ROOT / path).is_file(), path
    # A page's url path is its file name: links and shared URLs (/hash, /practice?seed=...) name it.
    url = next(u for p, _, _, u in _pages() if p == path)
    assert url == (ROOT / path).stem
    at = app_page(path).run()
    assert not at.exception, [e.message for e in at.exception]


def test_app_opens_on_the_explorer():
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    assert not at.exception, [e.message for e in at.exception]
    assert '<span class="px-title-main">Two chat turns</span>' in "".join(h.value for h in at.html)


def test_app_switches_to_the_hash_calculator():
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    # The hash calculator is registered at /hash, the url a browser opens it by.
    assert any(p == HASH_PAGE and url == "hash" for p, _, _, url in _pages()), _pages()
    at.switch_page(HASH_PAGE).run()
    assert not at.exception, [e.message for e in at.exception]
    assert at.title[0].value == "Hash calculator"


def _failing_page() -> None:
    from explorer.ui.text import page_failed

    try:
        raise RuntimeError("a bug")
    except RuntimeError as exc:
        page_failed(exc)


def test_a_page_s_bug_is_one_line_and_no_traceback():
    at = AppTest.from_function(_failing_page).run()
    assert not at.exception
    assert len(at.error) == 1 and "This page hit a bug (RuntimeError)" in at.error[0].value.replace("\\", "")
