"""Hostile strings for every field a user controls, and the check that a page shows them only as text.

Every hostile string names the host ``evil.test`` (or a ``javascript:`` URL); the app never puts
either on a page itself. `check_page` walks every element an AppTest run drew:

- an ``st.html`` body, and the body of each HTML block of the explorer's stage, is parsed: no
  script, frame or object tag, no ``on*`` attribute, and no attribute naming a hostile URL (the only ``src`` the app makes is its own ``data:image/svg+xml``);
- every string Streamlit renders as Markdown (bodies of markdown, captions, alerts, headings
  and toasts; labels, help texts and options of widgets, expanders, metrics, tabs) must not hold
  a hostile marker unescaped: escaped, ``evil.test`` reads ``evil\\.test`` and ``<img`` reads
  ``\\<img``, which no Markdown renderer turns into a link, an image or a tag;
- plain-text elements (code, JSON, tables, text inputs' values, a select box's options) may
  show anything (the browser test checks what the browser really fetches).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from html.parser import HTMLParser

from streamlit.testing.v1 import AppTest

EVIL = "evil.test"
HOSTILE = [
    f"![p](http://{EVIL}/pixel.png)",
    f"[click me](javascript:fetch('http://{EVIL}/j'))",
    f"<img src=http://{EVIL}/i.png onerror=alert(1)>",
    f"<script>fetch('http://{EVIL}/s')</script>",
    f"<http://{EVIL}/autolink> www.{EVIL} x@{EVIL}",
    f"javascript:alert(1) :red[red] :material/home: $x^2$ `code` **bold** &lt; &#x3c;img src=http://{EVIL}/e&gt;",
    f"ctrl\x00\x07\x1b[31m\x7f\u0085\u202eevil\u2066 http://{EVIL}/c",
    f"line one\n# heading\n    indented\n> quote http://{EVIL}/q",
    f"{'A' * 5_000} http://{EVIL}/long {'B' * 5_000}",
]
SURROGATES = ["\udcff", "a\ud800b", "\udfff" * 3]  # lone surrogates: not text at all

# unescaped, each would make Markdown a link, an image or a tag (escaped: ``evil\.test``, ``\<img``)
_MARKERS = re.compile(r"evil\.test|javascript:|(?<!\\)<(?:img|script|svg|iframe|http)", re.IGNORECASE)
_MD_FIELDS = {"label", "help", "body", "captions"}
_MD_OPTIONS = {"radio", "pills", "segmented_control"}  # their options are Markdown too; a select box's are not
_PLAIN_TYPES = {"code", "json", "text", "dataframe", "arrow_data_frame", "table", "download_button"}
_URL_ATTRS = {"href", "src", "srcset", "action", "formaction", "poster", "background", "xlink:href", "style", "data"}
_BANNED_TAGS = {"script", "iframe", "frame", "object", "embed", "link", "meta", "base", "form"}


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in _BANNED_TAGS:
            self.problems.append(f"<{tag}>")
        for name, value in attrs:
            v = (value or "").lower()
            if name.startswith("on"):
                self.problems.append(f"<{tag} {name}=...>")
            if name in _URL_ATTRS and (EVIL in v or "javascript:" in v):
                self.problems.append(f"<{tag} {name}={value!r}>")
            if name == "src" and not v.startswith("data:image/svg+xml;base64,"):
                self.problems.append(f"<{tag} src={value!r}>")


# body digest -> its problems: a page draws the same stage parts and block histories run after
# run (the hostile string changes one field), and parsing them all again was most of each test
_CHECKED: dict[bytes, tuple[str, ...]] = {}


def html_problems(body: str) -> list[str]:
    key = hashlib.sha256(body.encode("utf-8", "surrogatepass")).digest()
    found = _CHECKED.get(key)
    if found is None:
        parser = _Tags()
        parser.feed(body)
        parser.close()
        found = _CHECKED[key] = tuple(parser.problems)
    return list(found)


def _strings(message, path: str = ""):
    """(field path, string) of every string field in a protobuf message, at any depth."""
    for field, value in message.ListFields():
        name = field.name
        items = value if isinstance(value, Sequence) and not isinstance(value, str) else [value]
        for item in items:
            if isinstance(item, str):
                yield f"{path}{name}", item
            elif hasattr(item, "ListFields"):
                yield from _strings(item, f"{path}{name}.")


def _elements(node):
    children = getattr(node, "children", None)
    if children is not None:
        proto = getattr(node, "proto", None)
        if proto is not None:
            yield "block", proto
        for child in children.values():
            yield from _elements(child)
        return
    proto = getattr(node, "proto", None)
    if proto is not None:
        yield node.type, proto


def page_problems(at: AppTest) -> list[str]:
    """Every place a hostile string could act as markup on the page AppTest drew."""
    out = []
    for kind, proto in _elements(at._tree):
        for path, s in _strings(proto):
            last = path.rsplit(".", 1)[-1]
            if kind == "html" and last == "body":
                out += [f"html: {p}" for p in html_problems(s)]
            elif kind == "bidi_component" and last == "json":  # the stage: every step's parts, every history
                data = json.loads(s)
                bodies = (
                    [*data.get("parts", ()), *data.get("histories", {}).values()] if isinstance(data, dict) else [s]
                )
                for body in bodies:
                    out += [f"stage part: {p}" for p in html_problems(body)]
            elif kind in _PLAIN_TYPES or not (last in _MD_FIELDS or (last == "options" and kind in _MD_OPTIONS)):
                continue
            elif _MARKERS.search(s):
                out.append(f"{kind}.{path}: {s[:160]!r}")
    return out


def check_page(at: AppTest) -> None:
    assert not at.exception, [e.message for e in at.exception]
    problems = page_problems(at)
    assert not problems, problems


def lone_surrogate_message(text: str) -> bool:
    return "lone surrogate" in re.sub(r"\\(.)", r"\1", text)
