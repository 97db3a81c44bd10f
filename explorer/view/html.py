"""HTML pieces of the stage built with markupsafe's autoescaping.

Every string given to these helpers is escaped unless it is already ``Markup`` (a body an
``explorer.viz`` builder returned, which escapes its own user strings), so the stage's own
markup never depends on a hand-escaped f-string.
"""

from __future__ import annotations

from markupsafe import Markup, escape

from explorer.viz.text import clean


def trusted(body: str) -> Markup:
    """A body built by an ``explorer.viz`` builder (its user strings already escaped)."""
    return Markup(body)


def text(s: object) -> Markup:
    """Plain text, cleaned of control characters and capped like every other shown string."""
    return escape(clean(s))


def paragraph_html(s: object) -> Markup:
    """A paragraph of plain text, newlines kept as line breaks."""
    lines = [Markup(str(text(line).lstrip())) for line in str(clean(s)).split("\n")]
    return Markup('<p class="px-p">{}</p>').format(Markup("<br>").join(lines))


def caption_html(s: object) -> Markup:
    return Markup('<div class="px-cap">{}</div>').format(text(s))


def heading_html(anchor: str, s: object) -> Markup:
    return Markup('<h3 class="px-h3" id="{}">{}</h3>').format(anchor, text(s))


def box(key: str, *parts: Markup | str) -> Markup:
    """A bordered box (what ``st.container(border=True)`` drew) around ``parts``."""
    return Markup('<section class="px-box st-key-px_panel_{}">{}</section>').format(
        key, Markup("").join(map(_m, parts))
    )


def details(summary: object, *parts: Markup | str) -> Markup:
    """A box that opens on a click (what ``st.expander`` drew)."""
    return Markup('<details class="px-details"><summary>{}</summary>{}</details>').format(
        text(summary), Markup("").join(map(_m, parts))
    )


def columns(widths: tuple[int, ...], *cells: Markup | str) -> Markup:
    """Cells side by side in the given proportions (wrapping on a narrow screen)."""
    style = " ".join(f"{w}fr" for w in widths)
    inner = Markup("").join(Markup('<div class="px-col">{}</div>').format(_m(c)) for c in cells)
    return Markup('<div class="px-cols" style="grid-template-columns: {}">{}</div>').format(style, inner)


def warning_html(s: object) -> Markup:
    return Markup('<div class="px-alert px-warn" role="alert">{}</div>').format(text(s))


def pre(s: object, cls: str = "px-json") -> Markup:
    return Markup('<pre class="{}">{}</pre>').format(cls, str(s))


def _m(part: Markup | str) -> Markup:
    # A str reaching here came from an explorer.viz builder (the callers pass nothing else).
    return part if isinstance(part, Markup) else Markup(part)
