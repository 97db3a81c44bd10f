"""The address bar follows the view: a page writes the parameters that reopen what it shows.

A teacher copies the address to share a lesson or a question; an address that still names the
lesson or the seed the page opened with shares the wrong thing. A page calls ``follow`` at the
end of each run with the parameters of what it drew; the address changes only when they differ,
so a rerun that shows the same view writes nothing.
"""

from __future__ import annotations

import streamlit as st


def follow(params: dict[str, str]) -> None:
    """Make the address's query parameters exactly ``params`` (no other parameter is kept)."""
    current = {k: st.query_params.get(k) for k in st.query_params}
    if current != params:
        st.query_params.from_dict(params)
