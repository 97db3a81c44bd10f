"""The server's garbage collector: keep its full collections short.

A full collection walks every object the collector tracks. In the app's server about 90,000
of them are the imported modules of Streamlit, Plotly and the explorer, alive for the process's
life, and a full collection took about 70 ms: Streamlit's collection after every script run
(turned off in .streamlit/config.toml) took that much of each step, and one Python starts by
itself, or a session's release asks for (explorer/ui/budget.py), still does.
"""

from __future__ import annotations

import gc


def freeze_imports() -> None:
    """Once per server process: import the explorer page's modules and move every object alive
    now to the collector's permanent generation, which full collections skip (about 3 ms
    instead of 70 afterwards). What is frozen is freed by reference counting as before; only a
    reference cycle among frozen objects would stay, and these live as long as the process."""
    if gc.get_freeze_count():
        return
    import explorer.ui.stage  # noqa: F401  (the default page's imports, frozen with the rest)

    gc.freeze()
