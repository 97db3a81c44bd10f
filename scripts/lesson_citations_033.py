"""Annotate each lesson citation of vLLM 0.31.0 with the same code's lines in 0.33.0.

A lesson cites ``vllm/<path>.py:A-B`` of 0.31.0. This finds the same code in 0.33.0: the
innermost definition around the range (``ast``), the definition of the same qualified name in
0.33.0's file, and the lines matched by content (``difflib``) inside them; a range that is a
whole definition maps to the whole definition. The citation is then written as
``vllm/<path>.py:A-B`` (0.33.0: C-D), ``(0.33.0: same lines)``, ``(0.33.0: vllm/<other>.py:C-D)``
when the file moved, or ``(0.33.0: removed)``.

    python scripts/lesson_citations_033.py           # print the mapping, flag unsure ones
    python scripts/lesson_citations_033.py --write   # annotate the lessons not annotated yet
"""

from __future__ import annotations

import ast
import difflib
import re
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LESSONS = REPO / "lessons"
SITES = {
    r: next((REPO / v / "lib").glob("python3*/site-packages"))
    for r, v in {"0.31.0": ".venv-vllm", "0.33.0": ".venv-vllm-033"}.items()
}
# A citation, its closing backtick if any, and an annotation already there.
# A citation marked ``in 0.31.0`` is left as it is: its lesson gives 0.33.0's lines in words.
CITATION = re.compile(
    r"(?<!0\.33\.0: )(vllm/[\w/]+\.py):(\d+)(?:-(\d+))?(?![\d-])(?!`? in 0\.31\.0)(?!`? \(0\.33\.0: )`?"
)
# Below this share of the range's lines found again, the mapping is printed as unsure.
SURE = 0.8
# Checked by reading both releases, where the matching finds too little of the range.
BY_HAND = {
    # init_none_hash and the block hasher, which takes the lookahead too in 0.33.0
    ("vllm/v1/engine/core.py", 225, 234): "(0.33.0: 219-230)",
    # the cap, applied when no cap is passed in 0.33.0
    ("vllm/v1/core/kv_cache_manager.py", 295, 295): "(0.33.0: 301-302)",
    # no waiting request admitted in a step that preempted
    ("vllm/v1/core/sched/scheduler.py", 873, 873): "(0.33.0: 1050)",
    # the local hit stored on the request, after 0.33.0's lookahead rehash and cap
    ("vllm/v1/core/sched/scheduler.py", 930, 937): "(0.33.0: 1110-1127)",
    # use_eagle .. use_eagle_block_drop, with needs_eagle_block_drop between them in 0.33.0
    ("vllm/config/speculative.py", 1938, 1946): "(0.33.0: 2116-2149)",
    # the spec-decode settings .. KVCacheManager(use_eagle=...), longer in 0.33.0
    ("vllm/v1/core/sched/scheduler.py", 274, 318): "(0.33.0: 294-356)",
    # num_lookahead_tokens
    ("vllm/config/vllm.py", 630, 654): "(0.33.0: 626-652)",
    # caching at token arrival moved from AsyncScheduler to Scheduler.update_from_output
    ("vllm/v1/core/sched/async_scheduler.py", 59, 78): "(0.33.0: vllm/v1/core/sched/scheduler.py:2403-2415)",
}


@dataclass(frozen=True)
class Mapped:
    path: str  # 0.33.0's file; "" when removed
    first: int
    last: int
    share: float  # of the 0.31.0 range's non-blank lines found in 0.33.0's range

    def note(self, rel: str, first: int, last: int) -> str:
        if not self.path:
            return "(0.33.0: removed)"
        span = f"{self.first}-{self.last}" if self.first != self.last else f"{self.first}"
        if self.path != rel:
            return f"(0.33.0: {self.path}:{span})"
        if (self.first, self.last) == (first, last):
            return "(0.33.0: same lines)"
        return f"(0.33.0: {span})"


@cache
def _lines(release: str, rel: str) -> tuple[str, ...]:
    path = SITES[release] / rel
    return tuple(path.read_text(encoding="utf-8").splitlines()) if path.is_file() else ()


@cache
def _defs(release: str, rel: str) -> dict[str, tuple[int, int]]:
    """Qualified name -> (first line with decorators, last line) of every def/class."""
    out: dict[str, tuple[int, int]] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = prefix + child.name
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                out.setdefault(name, (first, child.end_lineno or child.lineno))
                walk(child, name + ".")
            else:
                walk(child, prefix)

    walk(ast.parse("\n".join(_lines(release, rel))), "")
    return out


def _innermost(rel: str, first: int, last: int) -> str | None:
    around = [(b - a, n) for n, (a, b) in _defs("0.31.0", rel).items() if a <= first and last <= b]
    return min(around)[1] if around else None


def _moved(rel: str) -> str:
    """0.33.0's file for a 0.31.0 file: the same path, else the one file of the same name."""
    if _lines("0.33.0", rel):
        return rel
    name = rel.rsplit("/", 1)[-1]
    hits = [p.relative_to(SITES["0.33.0"]).as_posix() for p in (SITES["0.33.0"] / "vllm").rglob(name)]
    return hits[0] if len(hits) == 1 else ""


def map_range(rel: str, first: int, last: int) -> Mapped:
    new = _moved(rel)
    if not new:
        return Mapped("", 0, 0, 0.0)
    old_lines, new_lines = _lines("0.31.0", rel), _lines("0.33.0", new)
    a0, a1, b0, b1 = 1, len(old_lines), 1, len(new_lines)
    name = _innermost(rel, first, last)
    if name and name in _defs("0.33.0", new):
        (a0, a1), (b0, b1) = _defs("0.31.0", rel)[name], _defs("0.33.0", new)[name]
        if (a0, a1) == (first, last):
            return Mapped(new, b0, b1, 1.0)
    matcher = difflib.SequenceMatcher(None, old_lines[a0 - 1 : a1], new_lines[b0 - 1 : b1], autojunk=False)
    to_new: dict[int, int] = {}
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            to_new[a0 + block.a + k] = b0 + block.b + k
    wanted = [n for n in range(first, last + 1) if old_lines[n - 1].strip()]
    found = [to_new[n] for n in wanted if n in to_new]
    if not found:
        return Mapped(new, 0, 0, 0.0)
    c, d = min(found), max(found)
    inside = sum(1 for n in range(c, d + 1) if new_lines[n - 1].strip())
    share = len(found) / max(len(wanted), inside)
    return Mapped(new, c, d, share)


def annotate(lesson: str, m: re.Match[str]) -> tuple[str, bool]:
    """The citation with its 0.33.0 note, and whether the mapping is sure."""
    rel, first = m.group(1), int(m.group(2))
    last = int(m.group(3) or first)
    mapped = map_range(rel, first, last)
    note = BY_HAND.get((rel, first, last)) or mapped.note(rel, first, last)
    sure = mapped.share >= SURE or (rel, first, last) in BY_HAND
    flag = "" if sure else "  UNSURE"
    print(f"{lesson}: {rel}:{first}-{last} -> {note} share {mapped.share:.2f}{flag}")
    return f"{m.group(0)} {note}", sure


def main(argv: list[str]) -> int:
    write = "--write" in argv
    unsure = 0
    for path in sorted(LESSONS.glob("*.md")):
        text = path.read_text(encoding="utf-8")
        parts, at = [], 0
        for m in CITATION.finditer(text):
            cited, sure = annotate(path.name, m)
            unsure += not sure
            parts += [text[at : m.start()], cited]
            at = m.end()
        new_text = "".join(parts) + text[at:]
        if write and new_text != text:
            path.write_text(new_text, encoding="utf-8")
    print(f"{unsure} unsure")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
