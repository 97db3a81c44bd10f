"""Lesson files on disk: each lessons/NN_slug.md narrative with the NN_slug.toml scenario it replays.

Shared by the lessons page and the practice page (which links a question to the lesson that
teaches it); page scripts are run by Streamlit, never imported, so this lives outside them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

LESSONS_DIR = Path(__file__).resolve().parents[2] / "lessons"
_STEM = re.compile(r"^\d\d_[a-z0-9_]+$")


@dataclass(frozen=True)
class LessonFile:
    stem: str
    title: str
    md: Path
    toml: Path


def list_lessons(directory: Path = LESSONS_DIR) -> list[LessonFile]:
    """Every lesson with both files, in order of its number."""
    out = []
    for md in sorted(directory.glob("*.md")):
        toml = md.with_suffix(".toml")
        if not _STEM.match(md.stem) or not toml.is_file():
            continue
        first = md.read_text(encoding="utf-8").split("\n", 1)[0]
        title = first[2:].strip() if first.startswith("# ") else md.stem
        out.append(LessonFile(md.stem, title, md, toml))
    return out


def lesson_title(stem: str, directory: Path = LESSONS_DIR) -> str:
    """A lesson's title (the first line of its narrative), or its stem."""
    md = directory / f"{stem}.md"
    if _STEM.match(stem) and md.is_file():
        first = md.read_text(encoding="utf-8").split("\n", 1)[0]
        if first.startswith("# "):
            return first[2:].strip()
    return stem
