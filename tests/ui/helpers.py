"""Shared helpers for the AppTest tests of the explorer's pages."""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Iterator
from html import unescape
from pathlib import Path

from streamlit.testing.v1 import AppTest

from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario
from explorer.scenario.trace import Step
from explorer.ui.stage import COMPONENT as STAGE

# A page run on its own is its own main script, and Streamlit puts the script's folder first on
# sys.path while it runs; there explorer/ui/pages/explorer.py would shadow the explorer package,
# so the package is imported before any page runs.
importlib.import_module("explorer")

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app.py"
EXPLORER_PAGE = "explorer/ui/pages/explorer.py"
HASH_PAGE = "explorer/ui/pages/hash.py"
LESSON = ROOT / "lessons" / "00_two_chat_turns.toml"
EDGE = Path(__file__).resolve().parent / "edge_cases.toml"


def page(path: str, timeout: float = 60) -> AppTest:
    """A page script that links to no other page, run on its own as its main script."""
    return AppTest.from_file(str(ROOT / path), default_timeout=timeout)


def app_page(path: str, timeout: float = 60) -> AppTest:
    """The app opened on one page, as a browser at its url path opens it: st.navigation registers
    the page links go through. (Each page's url path is its file name, so the page is found by
    its path before the first run.)"""
    return AppTest.from_file(str(APP), default_timeout=timeout).switch_page(path)


def explorer(query: dict[str, str] | None = None, view=None, timeout: float = 60) -> AppTest:
    at = page(EXPLORER_PAGE, timeout)
    if query:
        at.query_params.update(query)
    if view is not None:
        at.session_state["px_view"] = view
    return at.run()


def hash_page(timeout: float = 60) -> AppTest:
    return page(HASH_PAGE, timeout).run()


def stage_data(at: AppTest) -> dict | None:
    """What the page sent the stage component (explorer.ui.stage): every step's parts."""
    found: list[dict] = []

    def walk(node) -> None:
        children = getattr(node, "children", None)
        if children is not None:
            for child in children.values():
                walk(child)
        elif getattr(node, "type", "") == "bidi_component" and node.proto.component_name == STAGE:
            found.append(json.loads(node.proto.json))

    walk(at._tree)
    return found[0] if found else None


def stage_bodies(data: dict, k: int | None = None, block: int | None = None) -> list[str]:
    """The parts the stage shows at step ``k`` (the step the page sent by default), with the
    history of ``block`` (the block the page sent by default) where the browser puts it."""
    k = data["step"] if k is None else k
    block = data["block"] if block is None else block
    out = []
    for i in data["steps"][k]:
        part = data["parts"][i]
        if "data-px-history-slot" in part and block is not None:
            part += data["histories"].get(str(block), "")
        out.append(part)
    return out


def html_bodies(at: AppTest) -> list[str]:
    """Every HTML body the page drew, in page order: ``st.html``'s and the parts the stage
    component shows at the page's step (explorer.ui.stage)."""
    out: list[str] = []

    def walk(node) -> None:
        children = getattr(node, "children", None)
        if children is not None:
            for child in children.values():
                walk(child)
        elif getattr(node, "type", "") == "html":
            out.append(node.value)
        elif getattr(node, "type", "") == "bidi_component" and node.proto.component_name == STAGE:
            out.extend(stage_bodies(json.loads(node.proto.json)))

    walk(at._tree)
    return out


def all_html(at: AppTest) -> str:
    return "\n".join(html_bodies(at))


_MD_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")


def plain(s: str) -> str:
    """Markdown that the page escaped (explorer.viz.text.md) back as the text it shows."""
    return _MD_ESCAPE.sub(r"\1", s).replace("\u2060", "")


def bound(at: AppTest, kind: str, name: str):
    """The widget bound to the view under its current key (explorer.ui.bound), e.g.
    ``bound(at, "number_input", "px_w_bs")``."""
    gens = at.session_state.get("bound_generations", {})
    return getattr(at, kind)(key=f"{name}__{gens.get(name, 0)}")


def markdown_text(at: AppTest) -> str:
    """The page's Markdown and its HTML blocks as text (tags stripped): the stage draws a
    panel's paragraph inside the panel's HTML block."""
    html = (unescape(re.sub(r"<[^>]+>", " ", re.sub(r"<br>", "\n", b))) for b in html_bodies(at))
    return "\n".join([plain(m.value) for m in at.markdown] + list(html))


def now_text(at: AppTest) -> str:
    """The NOW box's text (tags stripped)."""
    box = next(b for b in html_bodies(at) if 'class="px-now"' in b)
    return unescape(re.sub(r"<[^>]+>", " ", box))


def stage_now_text(at: AppTest, k: int) -> str:
    """The NOW box's text (tags stripped) the stage shows when the browser steps to ``k``."""
    data = stage_data(at)
    assert data is not None
    box = next(b for b in stage_bodies(data, k) if 'class="px-now"' in b)
    return unescape(re.sub(r"<[^>]+>", " ", box))


def panel_keys(at: AppTest) -> list[str]:
    return re.findall(r'data-px-panel="(\w+)"', all_html(at))


def errors(at: AppTest) -> list[str]:
    return [plain(e.value) for e in at.error]


def no_exception(at: AppTest) -> None:
    assert not at.exception, [e.message for e in at.exception]


def step_to(at: AppTest, k: int) -> AppTest:
    """Step k, as a link to it opens it (AppTest cannot drive the stage component, which steps in
    the browser: the browser tests click its buttons)."""
    at.session_state["px_view"] = view(at).with_(step=k)
    return at.run()


def step_through_lesson(stem: str) -> Iterator[tuple[int, Step, AppTest]]:
    """Open lesson ``stem`` in the explorer and go to each of its steps in turn: (k, step k's
    record, the page) once step k is drawn with no exception and no error (the browser tests'
    twin: tests/e2e/conftest.py's step_through_lesson)."""
    trace = replay(load_scenario(ROOT / "lessons" / f"{stem}.toml"))
    at = explorer({"lesson": stem})
    no_exception(at)
    for k, step in enumerate(trace.steps, start=1):
        at = step_to(at, k)
        no_exception(at)
        assert errors(at) == [], (k, errors(at))
        yield k, step, at


def n_steps(at: AppTest) -> int:
    """The number of steps the stage holds."""
    data = stage_data(at)
    assert data is not None
    return len(data["steps"]) - 1


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
