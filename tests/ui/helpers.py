"""Shared helpers for the AppTest tests of the explorer's pages."""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[2]
LESSON = ROOT / "lessons" / "00_two_chat_turns.toml"
EDGE = Path(__file__).resolve().parent / "edge_cases.toml"


def _explorer_app() -> None:
    from explorer.ui import page_explorer

    page_explorer.render()


def _hash_app() -> None:
    from explorer.ui import page_hash

    page_hash.render()


def explorer(query: dict[str, str] | None = None, view=None, timeout: float = 60) -> AppTest:
    at = AppTest.from_function(_explorer_app, default_timeout=timeout)
    if query:
        at.query_params.update(query)
    if view is not None:
        at.session_state["px_view"] = view
    return at.run()


def hash_page(timeout: float = 60) -> AppTest:
    return AppTest.from_function(_hash_app, default_timeout=timeout).run()


def html_bodies(at: AppTest) -> list[str]:
    return [h.value for h in at.html]


def all_html(at: AppTest) -> str:
    return "\n".join(html_bodies(at))


def markdown_text(at: AppTest) -> str:
    return "\n".join(m.value for m in at.markdown)


def now_text(at: AppTest) -> str:
    """The NOW box's text (tags stripped)."""
    box = next(b for b in html_bodies(at) if 'class="px-now"' in b)
    return unescape(re.sub(r"<[^>]+>", " ", box))


def panel_keys(at: AppTest) -> list[str]:
    return re.findall(r'data-px-panel="(\w+)"', all_html(at))


def errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error]


def no_exception(at: AppTest) -> None:
    assert not at.exception, [e.message for e in at.exception]


def step_to(at: AppTest, k: int) -> AppTest:
    return at.slider(key="px_w_step").set_value(k).run()


def view(at: AppTest):
    return at.session_state["px_view"]


def block_ids_in(html: str, marker: str) -> list[int]:
    """Block ids of the chips in the row whose label starts with `marker`."""
    i = html.find(marker)
    if i < 0:
        return []
    row_end = html.find("</div>", html.find("px-rowlabel", i) if "px-rowlabel" in html[i:] else i)
    return [int(x) for x in re.findall(r'data-px-block="(\d+)"', html[i:row_end])]


def page_title(at: AppTest) -> str:
    m = re.search(r'<span class="px-title-main">(.*?)</span>', all_html(at))
    return unescape(m.group(1)) if m else ""


def title_line(at: AppTest) -> str:
    m = re.search(r'<div class="px-title">(.*?)</div>', all_html(at))
    return unescape(re.sub(r"<[^>]+>", " ", m.group(1))) if m else ""
