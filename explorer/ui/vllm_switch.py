"""The vLLM release a page replays under, shown and switchable (design section 15).

One small widget, kept beside the page so the page's layout stays its own: it shows the
release of the replay on screen and, when the user picks the other one, sets the view's
``vllm`` engine setting (kept in the session and in the link, `vllm=0.33.0`); the page
then replays.
"""

from __future__ import annotations

import streamlit as st

from explorer.core.release import RELEASES
from explorer.ui.explorer_session import current_view, set_view

KEY = "px_vllm_release"


def vllm_switch(shown: str) -> None:
    """A segmented control of the modelled releases with ``shown`` (the replay's) selected."""
    choices = list(RELEASES)
    picked = st.segmented_control(
        "vLLM release",
        choices,
        default=shown,
        key=f"{KEY}_{shown.replace('.', '_')}",
        help="The Explorer follows this vLLM release where 0.31.0 and 0.33.0 differ (EAGLE's hashes, "
        "caching at token arrival, ...); `explorer run FILE --vllm-diff` names the first step that differs.",
    )
    if picked and picked != shown:
        view = current_view()
        set_view(view.with_(engine={**view.engine, "vllm": picked}))
        st.rerun()
