"""The class's address as a QR code that a phone's camera reads off the projector.

segno draws the code (pure Python, no image library) as a PNG; the page shows it with
``st.image`` (its HTML sanitizer drops inline SVG and ``data:`` images) and the address in text,
escaped, under it for students who type it.
"""

from __future__ import annotations

import io

import segno
from markupsafe import Markup

# Long enough for any address a browser shows with a lesson's parameters; a longer text makes a
# code too dense to read from the back of a room, so the caller gives the bare address instead.
MAX_QR_TEXT = 400


def qr_png(text: str, scale: int = 8) -> bytes:
    """``text`` as a QR code (error correction M: readable with a sixth of it hidden), a PNG."""
    if len(text) > MAX_QR_TEXT:
        raise ValueError(f"a QR code holds at most {MAX_QR_TEXT} characters here, got {len(text)}")
    out = io.BytesIO()
    segno.make(text, error="m", micro=False).save(out, kind="png", scale=scale, border=3, dark="#111", light="#fff")
    return out.getvalue()


def join_html(url: str) -> str:
    """The invitation above the code, and the address in text under it."""
    return str(
        Markup(
            '<div class="px-join" data-px-join-url="{url}">'
            '<div class="px-join-title">Open this on your laptop or phone</div>'
            '<div class="px-join-url"><code>{url}</code></div></div>'
        ).format(url=url)
    )
