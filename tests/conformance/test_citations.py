"""Every vLLM file:line the explorer cites exists in the installed vLLM 0.31.0 and says what we
say it does.

The explainer's `REFS` are checked line by line: the cited range lies inside the file and
contains the code name the citation gives (a function, class or variable). Citations in the
lessons are checked for existing files and ranges inside them that neither start nor end on a
blank line, and each carries the same code's lines in 0.33.0 (`vllm/x.py:A-B` (0.33.0: C-D),
``same lines``, another file's ``vllm/y.py:C-D``, or ``removed``), checked against 0.33.0's own source: a real range that
neither starts nor ends on a blank line, whose lines or enclosing definition name what the
0.31.0 range is about. Only a citation marked ``in 0.31.0`` goes without, where its lesson gives
0.33.0's lines in its own words. A missing vLLM fails, as the whole conformance tier does.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from explorer.view.explain.refs import REFS
from tests.conformance import core_citations as cc

pytestmark = pytest.mark.conformance

REPO = Path(__file__).resolve().parents[2]
SITE = next((REPO / ".venv-vllm" / "lib").glob("python3*/site-packages"), None)
CITATION = re.compile(r"(?<!0\.33\.0: )(vllm/[\w/]+\.py):(\d+)(?:-(\d+))?(?![\d-])")
# What follows a lesson citation: its 0.33.0 lines, or the mark of a 0.31.0-only citation.
ANNOTATION = re.compile(r"`? \(0\.33\.0: (same lines|removed|(?:(vllm/[\w/]+\.py):)?(\d+)(?:-(\d+))?)\)")
ONLY_031 = re.compile(r"`? in 0\.31\.0")
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
    return [(lesson, m.group(0)) for lesson, m, _ in _lesson_matches()]


def _lesson_matches() -> list[tuple[str, re.Match[str], str]]:
    """Each lesson citation, with the text that follows it."""
    out = []
    for path in sorted((REPO / "lessons").glob("*.*")):
        text = path.read_text(encoding="utf-8")
        for m in CITATION.finditer(text):
            out.append((path.name, m, text[m.end() : m.end() + 120]))
    return out


def test_lessons_cite_vllm():
    assert len(_lesson_citations()) > 20


@pytest.mark.parametrize(("lesson", "loc"), _lesson_citations())
def test_each_lesson_citation_is_a_real_range(lesson, loc):
    rel, start, end = _span(loc)
    lines = _source(rel)
    assert 1 <= start <= end <= len(lines), f"{lesson}: {loc} but {rel} has {len(lines)} lines"
    assert lines[start - 1].strip() and lines[end - 1].strip(), f"{lesson}: {loc} starts or ends on a blank line"


def _around(src: cc.VllmSource, start: int, end: int) -> list[str]:
    """The innermost definition holding the whole range, as a list of at most one name."""
    chain = cc._enclosing(list(src.defs), start)
    return [d.name for d in chain if (d.end_lineno or d.lineno) >= end][-1:]


def _about(rel: str, start: int, end: int) -> set[str]:
    """What a 0.31.0 range is about: the innermost definition holding it, else the definitions
    it holds, else the code names in its lines."""
    src = cc.vllm_source(rel, "0.31.0")
    if inner := _around(src, start, end):
        return set(inner)
    held = {d.name for d in src.defs if start <= cc._first_line(d) <= end}
    return held or set(_code_names("\n".join(src.lines[start - 1 : end])))


def annotation_problems(loc: str, after: str) -> list[str]:
    """What is wrong with one lesson citation's 0.33.0 annotation; empty when it holds."""
    if ONLY_031.match(after):
        return []
    m = ANNOTATION.match(after)
    if not m:
        return [f"{loc} has no (0.33.0: ...) annotation"]
    if m.group(1) == "removed":
        return []
    rel, start, end = _span(loc)
    rel033 = m.group(2) or rel
    if m.group(1) == "same lines":
        first, last = start, end
    else:
        first = int(m.group(3))
        last = int(m.group(4) or first)
    assert cc.site("0.33.0") is not None, "vLLM 0.33.0 is not installed: bash tests/conformance/setup_vllm_033.sh"
    if not (cc.site("0.33.0") / rel033).is_file():
        return [f"{rel033} is not in vLLM 0.33.0"]
    src = cc.vllm_source(rel033, "0.33.0")
    where = f"{rel033}:{first}-{last} (0.33.0)"
    if not 1 <= first <= last <= len(src.lines):
        return [f"{where}: outside the file's {len(src.lines)} lines"]
    out = []
    if not src.lines[first - 1].strip() or not src.lines[last - 1].strip():
        out.append(f"{where}: starts or ends on a blank line")
    names = _about(rel, start, end)
    theirs = set(cc._IDENT.findall("\n".join(src.lines[first - 1 : last]))) | set(_around(src, first, last))
    if not names & theirs:
        out.append(f"{where} mentions none of {sorted(names)}, what {loc} is about")
    return out


@pytest.mark.parametrize(("lesson", "loc", "after"), [(les, m.group(0), a) for les, m, a in _lesson_matches()])
def test_each_lesson_citation_names_its_lines_in_0_33_0(lesson, loc, after):
    assert annotation_problems(loc, after) == [], lesson


def test_the_0_33_0_check_fails_a_shifted_or_missing_annotation():
    loc = "vllm/v1/core/kv_cache_utils.py:684-714"  # hash_block_tokens
    assert annotation_problems(loc, "` (0.33.0: 707-737)") == []
    assert annotation_problems(loc, "` (0.33.0: 747-777)") != []  # moved off the def
    assert annotation_problems(loc, "` (0.33.0: 99990-99991)") != []
    assert annotation_problems(loc, "` and more") != []
    assert annotation_problems(loc, "` in 0.31.0; 953-1037 in 0.33.0") == []
