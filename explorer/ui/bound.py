"""Widgets whose value the page owns (a view), safe against stale and default reports from the browser.

The browser sends every widget's value with each rerun, and Streamlit fires a widget's
``on_change`` callback whenever the value it receives differs from the one it holds. Under load
the value can be one the user never chose: stale (the browser sent it before it received the
value the app had just set, so a click on Next sent the old slider position along and the
step went back) or a default (the browser rebuilt a widget it had dropped from the value the
widget was created with: the lesson picker's first lesson, a number input's minimum). The
callback then moved the view by itself.

So a page never writes a bound widget's key. It creates the widget with ``value=`` (or
``index=``) taken from its view, under the key ``key(name, value)``: ``<name>__<generation>``.
When the view's value differs from what the widget holds (the app changed the view: a click on
Next, a new lesson), the generation moves on and the browser gets a new widget, created with
the new value, so even its default is the view's. Callbacks get the key they were created
with and ignore a report for a key that is no longer current (``is_current``).
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any, cast

import streamlit as st

GENERATIONS = "bound_generations"  # session-state key: widget name -> its current generation


def _ss(ss: MutableMapping[str, Any] | None) -> MutableMapping[str, Any]:
    return cast("MutableMapping[str, Any]", st.session_state) if ss is None else ss


def current(name: str, ss: MutableMapping[str, Any] | None = None) -> str:
    """The key the widget ``name`` has now."""
    gens = _ss(ss).get(GENERATIONS) or {}
    return f"{name}__{gens.get(name, 0)}"


def key(name: str, value: Any, ss: MutableMapping[str, Any] | None = None) -> str:
    """The key to create the widget ``name`` under so that it shows ``value``: its current key
    while it holds that value (or has not been drawn yet), else a new one."""
    state = _ss(ss)
    k = current(name, state)
    if k in state and state[k] != value:
        gens = dict(state.get(GENERATIONS) or {})
        gens[name] = gens.get(name, 0) + 1
        state[GENERATIONS] = gens
        k = current(name, state)
    return k


def is_current(name: str, k: str, ss: MutableMapping[str, Any] | None = None) -> bool:
    """Whether a callback's key is still the widget's: a report for an older one is stale."""
    return k == current(name, ss)
