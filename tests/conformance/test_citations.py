"""Every vLLM file:line the explorer cites exists in the installed vLLM 0.31.0 and says what we
say it does.

The explainer's `REFS` are checked line by line: the cited range lies inside the file and
contains the code name the citation gives (a function, class or variable). Citations in the
lessons are checked for existing files and ranges inside them. A missing vLLM fails, as the
whole conformance tier does.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from explorer.view.explain.refs import REFS

pytestmark = pytest.mark.conformance

REPO = Path(__file__).resolve().parents[2]
SITE = next((REPO / ".venv-vllm" / "lib").glob("python3*/site-packages"), None)
CITATION = re.compile(r"(vllm/[\w/]+\.py):(\d+)(?:-(\d+))?")
# Words of a citation that name code: snake_case, CamelCase, dotted names.
CODE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


def _source(rel: str) -> list[str]:
    assert SITE is not None and (SITE / "vllm").is_dir(), (
        "vLLM 0.31.0 is not installed: bash tests/conformance/setup_vllm.sh"
    )
    path = SITE / rel
    assert path.is_file(), f"{rel} is not in the installed vLLM"
    return path.read_text(encoding="utf-8").splitlines()


def _span(loc: str) -> tuple[str, int, int]:
    m = CITATION.fullmatch(loc)
    assert m, f"not a file:line citation: {loc!r}"
    start = int(m.group(2))
    return m.group(1), start, int(m.group(3) or start)


def _code_names(text: str) -> list[str]:
    names = []
    for word in CODE_NAME.findall(text):
        last = word.split(".")[-1]
        if "_" in last or "." in word or (last[:1].isupper() and any(c.islower() for c in last[1:])):
            names.append(last)
    return names


def test_the_installed_vllm_is_0_31_0():
    assert SITE is not None
    dist = next(SITE.glob("vllm-*.dist-info"), None)
    assert dist is not None and dist.name.startswith("vllm-0.31.0"), dist


@pytest.mark.parametrize("key", sorted(REFS))
def test_each_explainer_citation_points_at_the_code_it_names(key):
    ref = REFS[key]
    rel, start, end = _span(ref.loc)
    lines = _source(rel)
    assert 1 <= start <= end <= len(lines), f"{ref}: {rel} has {len(lines)} lines"
    names = _code_names(ref.func)
    assert names, f"{key}: the citation names no code ({ref.func!r})"
    cited = "\n".join(lines[start - 1 : end])
    assert any(n in cited for n in names), f"{ref}: none of {names} is in {rel}:{start}-{end}"


def _lesson_citations() -> list[tuple[str, str]]:
    out = []
    for path in sorted((REPO / "lessons").glob("*.*")):
        for m in CITATION.finditer(path.read_text(encoding="utf-8")):
            out.append((path.name, m.group(0)))
    return out


def test_lessons_cite_vllm():
    assert len(_lesson_citations()) > 20


@pytest.mark.parametrize(("lesson", "loc"), _lesson_citations())
def test_each_lesson_citation_is_a_real_range(lesson, loc):
    rel, start, end = _span(loc)
    lines = _source(rel)
    assert 1 <= start <= end <= len(lines), f"{lesson}: {loc} but {rel} has {len(lines)} lines"
