"""A lesson step's note and checks in the NOW box, on script or off it (no Streamlit here).

A lesson's notes and `expect` checks are written for its own engine settings. When the user
changes them, the replay (and so the NOW box's numbers) follows the new settings exactly, but a
note may no longer describe what happened and a check may no longer hold: the note then says
it was written for the default settings, and the checks show as not applicable instead of
failing. Playground edits never make a lesson step off-script: they are appended after the
lesson's own steps, which replay exactly as before.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from explorer.scenario.spec import EngineConfig
from explorer.scenario.trace import Step
from explorer.viz.text import esc

SETTING_WORDS = {
    "block_size": "block size",
    "num_blocks": "blocks",
    "hash_algo": "hash",
    "hash_seed": "seed",
    "enable_prefix_caching": "prefix caching",
}


def _value(key: str, value: Any) -> str:
    if key == "enable_prefix_caching":
        return "on" if value else "off"
    if key == "hash_seed":
        return repr(value[:24]) if value else "vLLM's default"
    return f"{value:,}" if isinstance(value, int) else str(value)


def off_script(changed: Mapping[str, Any], lesson_engine: EngineConfig) -> str | None:
    """None when the settings are the lesson's own; else what differs, as "block size 8
    (the lesson: 16), blocks 12 (the lesson: 300)"."""
    parts = [
        f"{SETTING_WORDS.get(key, key)} {_value(key, value)} (the lesson: {_value(key, getattr(lesson_engine, key))})"
        for key, value in changed.items()
        if hasattr(lesson_engine, key) and value != getattr(lesson_engine, key)
    ]
    return ", ".join(parts) or None


def _short(v: object) -> str:
    s = json.dumps(v) if not isinstance(v, str) else v
    return s if len(s) <= 40 else s[:37] + "..."


def note_and_checks(step: Step, off: str | None) -> tuple[str, tuple[str, ...]]:
    """(HTML of the step's note and checks, the failed checks to warn about). Off script, the
    note carries a "written for the default settings" line and no check is reported failed."""
    html = ""
    if step.op.note:
        caveat = (
            f'<div class="px-offscript" data-px-offscript="1">Written for the default settings: you changed {esc(off)}, '
            "so this note may not match the numbers above (they are this replay's, exactly).</div>"
            if off
            else ""
        )
        html += f'<div class="px-note" data-px-note="1"><b>Lesson:</b> {esc(step.op.note)}{caveat}</div>'
    if not step.op.expect:
        return html, ()
    listed = esc(", ".join(f"{key} = {_short(v)}" for key, v in step.op.expect.items()))
    if off:
        html += (
            '<div class="px-checks px-checks-na" data-px-checks="n/a">Lesson checks not applicable to your settings '
            f"(they were written for the lesson's): {listed}</div>"
        )
        return html, ()
    if step.expect_failures:
        return html, step.expect_failures
    return html + f'<div class="px-checks" data-px-checks="ok">&#10003; lesson checks hold: {listed}</div>', ()
