"""Widget values a page keeps across a visit to another page.

Streamlit drops the key of every widget that a script run did not draw, so after a run of
another page a page's controls come back at their defaults: its settings are lost, and a page
that caches a result by its settings (the router) computes it again. A page calls `restore`
before it draws its widgets and `keep` after: the values live on under one plain session-state
key, which Streamlit leaves alone. File uploaders cannot be given a value, so they are never kept.
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from typing import Any, cast

import streamlit as st


def _ss(ss: MutableMapping[str, Any] | None) -> MutableMapping[str, Any]:
    return cast("MutableMapping[str, Any]", st.session_state) if ss is None else ss


def restore(store: str, ss: MutableMapping[str, Any] | None = None) -> None:
    """Give back each kept widget value whose key Streamlit dropped."""
    state = _ss(ss)
    kept = state.get(store) or {}
    for key, value in kept.items():
        if key not in state:
            state[key] = value


def keep(store: str, keys: Iterable[str], ss: MutableMapping[str, Any] | None = None) -> None:
    """Remember the widgets' current values under ``store``."""
    state = _ss(ss)
    state[store] = {k: state[k] for k in keys if k in state}
