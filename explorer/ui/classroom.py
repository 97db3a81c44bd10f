"""Serving a class: the address students open, as the browser reached the server.

A class server binds the machine's network address (``make class``); the presenter's browser
opened it at that address, so the address in its bar is the one to give the room. Links and the
QR code take it from the browser's own URL, never from the address the server was told to bind,
which may be a wildcard or a name only the teacher's machine knows.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import streamlit as st

from explorer.viz.qr import MAX_QR_TEXT, join_html, qr_png


def browser_base_url() -> str:
    """The app's address as the browser reached it (scheme, host, port, path; no query)."""
    url = st.context.url or ""
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        return ""
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


def is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    return host == "localhost" or host.startswith("127.") or host == "::1"


def join_box(link: str | None = None) -> None:
    """The QR code of ``link`` (or of the page's own address) with the address under it."""
    target = link or browser_base_url()
    if not target:
        return
    if len(target) > MAX_QR_TEXT:
        target = browser_base_url()  # a long view link reads badly on a projector: the address alone
    st.html(join_html(target))
    with st.container(key="px_join_qr"):
        st.image(qr_png(target), width=224, caption="QR code of the address above")
    if is_loopback(target):
        st.caption(
            "This address is this machine's own (loopback): students cannot open it. "
            "Serve the class with `make class` and open the address it prints."
        )
