"""Lesson files on disk: each lessons/NN_slug.md narrative with the NN_slug.toml scenario it replays.

Shared by the lessons page and the practice page (which links a question to the lesson that
teaches it); page scripts are run by Streamlit, never imported, so this lives outside them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from explorer.errors import BadInput
from explorer.scenario.step_spec import is_engine_step_scenario
from explorer.toml_read import loads_toml

LESSONS_DIR = Path(__file__).resolve().parents[2] / "lessons"
_STEM = re.compile(r"^\d\d_[a-z0-9_]+$")
ENGINE_STEPS = "engine steps"
MANAGER_OPS = "manager-level ops"


@dataclass(frozen=True)
class LessonFile:
    stem: str
    title: str
    md: Path
    toml: Path
    kind: str = MANAGER_OPS  # or ENGINE_STEPS (design section 7): lesson_kind


def list_lessons(directory: Path = LESSONS_DIR) -> list[LessonFile]:
    """Every lesson with both files, in order of its number."""
    out = []
    for md in sorted(directory.glob("*.md")):
        toml = md.with_suffix(".toml")
        if not _STEM.match(md.stem) or not toml.is_file():
            continue
        first = md.read_text(encoding="utf-8").split("\n", 1)[0]
        title = first[2:].strip() if first.startswith("# ") else md.stem
        out.append(LessonFile(md.stem, title, md, toml, lesson_kind(toml)))
    return out


def lesson_kind(toml: Path) -> str:
    """Which kind of scenario a lesson replays: manager-level ops, or engine steps (one with a
    `step` op); a file that does not read counts as manager-level (its page says why)."""
    try:
        raw = loads_toml(toml.read_text(encoding="utf-8"), str(toml))
    except (OSError, UnicodeDecodeError, BadInput):
        return MANAGER_OPS
    return ENGINE_STEPS if is_engine_step_scenario(raw.get("steps")) else MANAGER_OPS


def lesson_title(stem: str, directory: Path = LESSONS_DIR) -> str:
    """A lesson's title (the first line of its narrative), or its stem."""
    md = directory / f"{stem}.md"
    if _STEM.match(stem) and md.is_file():
        first = md.read_text(encoding="utf-8").split("\n", 1)[0]
        if first.startswith("# "):
            return first[2:].strip()
    return stem
