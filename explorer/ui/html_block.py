"""The explorer stage's HTML: one small component that writes its body into the page only when
the body changed.

A step of the explorer redraws about twenty blocks of HTML (the NOW box, the panels, the pool,
the free queue, the hash map, the KV events). Drawn with ``st.html``, every rerun sanitizes each
body again in the browser (DOMPurify over ~100 KB of markup per step) and rebuilds its nodes,
even when the body is the one already shown: that was a third of the browser's time per Next.
This component compares the body with the one it holds and sets ``innerHTML`` only on a change,
so an unchanged block costs nothing and a changed one costs one parse.

The bodies come only from the builders in ``explorer.viz`` and ``explorer.ui``, which escape
every string a user controls (``explorer.viz.text.esc``); the hostile-input tests parse every
body drawn here as they parse ``st.html`` bodies (no script, frame or object tag, no ``on*``
attribute, no foreign URL). A block keeps its place by its key, so a caller names each block.
"""

from __future__ import annotations

import streamlit as st

COMPONENT = "px_html"  # the name tests look for (tests/ui/helpers.py)

_JS = """
export default function ({ data, parentElement }) {
  const body = typeof data === 'string' ? data : '';
  if (parentElement.__pxBody !== body) {
    parentElement.innerHTML = body;
    parentElement.__pxBody = body;
  }
}
"""


@st.cache_resource
def _component():
    # isolate_styles=False: the app's stylesheet (explorer/ui/style.py) styles the blocks
    return st.components.v2.component(COMPONENT, js=_JS, isolate_styles=False)


def html_block(body: str, key: str) -> None:
    """Draw ``body`` (HTML built by this app, user strings escaped) as the block ``key``."""
    _component()(data=body, key=key)
