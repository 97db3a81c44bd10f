"""The vLLM file:line citations written in explorer/core/, found and checked against vLLM.

What counts as a citation: in a comment or a string (docstrings included) of
``explorer/core/**/*.py``, a path ending in ``.py``, a colon and line numbers:
``block_pool.py:211``, ``scheduler.py:274-318``, ``vllm/v1/outputs.py:361-365``, or a list
``scheduler.py:1086-1108, 1317-1321``. A comment block (consecutive ``#`` lines) is read as one
text, so a citation may wrap across its lines.

Which release: ``in 0.33.0`` or ``, 0.33.0`` right after the citation (``lru.py:51-61,
108-152 in 0.33.0``), or ``0.33.0`` right before it (``(0.33.0, base.py:550-566)``), names the
release; every other citation is of 0.31.0, the reference. Each release is read from its own
virtualenv, and a release not installed fails.

Which file: the path as written is a suffix of exactly one file of that vLLM
(``config/scheduler.py``, ``kv_cache_utils.py``); a bare name that several folders hold
(``scheduler.py``: the scheduler's, the config's, several connectors') resolves through
`SHORT_NAMES`, the file the core means by it. Any other ambiguous or unknown path fails.

What is checked, for each range ``a-b`` of a citation:
1. it lies inside the file (``1 <= a <= b <= lines``), and neither starts nor ends on a blank
   line nor ends on the header (decorators, ``def`` line) of a definition it does not cover:
   the off-by-one a line inserted above leaves;
2. it is about what the citation sits in: one of *our names* is one of *their names*, where
   - our names are the innermost ``def``/``class`` around the citation in our file (a dunder
     method counts as its class), plus the code names (snake_case, CamelCase with two
     capitals, dotted names; file names excluded) written in the citation's sentence, and in
     the code the comment sits on: its own line for a trailing comment, the next line for a
     comment block (for a block just above a ``def``/``class``, that definition's name);
   - their names are the identifiers in the cited lines plus the name of the innermost
     ``def``/``class`` (found with ``ast``) around the range's first line.
A range moved off the code it cites fails 2. unless the new lines happen to mention one of the
names or lie in the same definition; the test module measures how often that happens.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CORE = REPO / "explorer" / "core"
RELEASES = {"0.31.0": ".venv-vllm", "0.33.0": ".venv-vllm-033"}
REFERENCE = "0.31.0"
_Def = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef

# Bare names that several vLLM folders hold, and the file the core means by each.
SHORT_NAMES = {
    "scheduler.py": "vllm/v1/core/sched/scheduler.py",
    "block_pool.py": "vllm/v1/core/block_pool.py",
    "coordinator.py": "vllm/v1/core/kv_cache_coordinator.py",  # the core's short name for it
    "base.py": "vllm/distributed/kv_transfer/kv_connector/v1/base.py",
    "stats.py": "vllm/v1/metrics/stats.py",
    "request.py": "vllm/v1/request.py",
    "output.py": "vllm/v1/core/sched/output.py",
}

_RANGE = r"\d+(?:-\d+)?(?![\d.])"
CITATION = re.compile(
    rf"(?<![\w/.])((?:\w+/)*\w+\.py):\s*({_RANGE}(?:,\s*{_RANGE})*)"
    r"(?:(?:\s+in\s+|,\s*)(0\.\d+\.\d+))?"
)
_RELEASE_BEFORE = re.compile(r"(0\.\d+\.\d+),?\s*$")
# Where a sentence ends: . ; ! ? before a space (not "e.g."/"i.e."), a blank line, a bullet.
_SENTENCE_END = re.compile(r"(?<!e\.g)(?<!i\.e)[.;!?](?=\s)|\n\s*\n|\n\s*(?=- )")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_IDENT = re.compile(r"[A-Za-z_]\w*")
# Anything a checker must see: ".py:" then a digit, maybe on the next comment line.
RAW_CITATION = re.compile(r"\.py:(?:\s|#)*\d")


@dataclass(frozen=True)
class Citation:
    ours: str  # our file, relative to the repository
    line: int  # our line where the citation starts
    text: str  # as written, release marker included
    path: str  # the vLLM path as written
    ranges: tuple[tuple[int, int], ...]
    release: str
    names: tuple[str, ...]  # our names (see the module docstring)

    @property
    def id(self) -> str:
        return f"{self.ours}:{self.line} {' '.join(self.text.split())}"


def _is_code_name(word: str) -> bool:
    """snake_case or CamelCase (two capitals at least: ``BlockPool``, not ``The``)."""
    return "_" in word or re.fullmatch(r"[A-Z]\w*[a-z0-9][A-Z]\w*", word) is not None


def _code_names(text: str) -> set[str]:
    names: set[str] = set()
    for word in _WORD.findall(text):
        if word.endswith(".py"):
            continue
        *outer, last = word.split(".")
        names.update(p for p in outer if _is_code_name(p))
        if outer or _is_code_name(last):
            names.add(last)
    return names - {"self", "cls"}


@dataclass(frozen=True)
class _Unit:
    """One comment block or string: its text and the source line of each text line."""

    text: str
    lines: tuple[int, ...]
    code: str  # for a trailing comment, the code before it on its line
    comment_block_end: int  # last line of a comment block; 0 for strings and trailing comments


def _units(source: str) -> list[_Unit]:
    src_lines = source.splitlines()
    units: list[_Unit] = []
    block: list[tuple[int, str]] = []

    def flush() -> None:
        if block:
            units.append(_Unit("\n".join(t for _, t in block), tuple(n for n, _ in block), "", block[-1][0]))
            block.clear()

    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            code = src_lines[row - 1][:col]
            text = tok.string.lstrip("#").strip()
            if code.strip():
                flush()
                units.append(_Unit(text, (row,), code, 0))
            else:
                if block and block[-1][0] != row - 1:
                    flush()
                block.append((row, text))
        elif tok.type in (tokenize.NL, tokenize.NEWLINE):
            continue
        else:
            flush()
            if tok.type == tokenize.STRING:
                first = tok.start[0]
                parts = tok.string.split("\n")
                units.append(_Unit(tok.string, tuple(range(first, first + len(parts))), "", 0))
    flush()
    return units


def _definitions(tree: ast.AST) -> list[_Def]:
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return [n for n in ast.walk(tree) if isinstance(n, kinds)]


def _enclosing(defs: list[_Def], line: int) -> list[_Def]:
    """The definitions around ``line`` (decorators included), outermost first."""
    around = [d for d in defs if _first_line(d) <= line <= (d.end_lineno or d.lineno)]
    return sorted(around, key=_first_line)


def _first_line(d: _Def) -> int:
    return min([d.lineno, *(deco.lineno for deco in d.decorator_list)])


def _our_definition_names(defs: list[_Def], line: int) -> set[str]:
    chain = _enclosing(defs, line)
    if not chain:
        return set()
    inner = chain[-1].name
    if inner.startswith("__") and inner.endswith("__"):
        return {chain[-2].name} if len(chain) > 1 else set()
    return {inner}


def _release_before(text: str, start: int) -> str | None:
    m = _RELEASE_BEFORE.search(text[max(0, start - 12) : start].rstrip("( "))
    return m.group(1) if m else None


def _ranges(spec: str) -> tuple[tuple[int, int], ...]:
    out = []
    for part in spec.split(","):
        a, _, b = part.strip().partition("-")
        out.append((int(a), int(b or a)))
    return tuple(out)


def citations_in(path: Path) -> list[Citation]:
    source = path.read_text(encoding="utf-8")
    src_lines = source.splitlines()
    defs = _definitions(ast.parse(source))
    def_lines = {d.lineno: d.name for d in defs}
    for d in defs:
        for deco in d.decorator_list:
            def_lines[deco.lineno] = d.name
    rel = path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else path.name
    found = []
    for unit in _units(source):
        matches = list(CITATION.finditer(unit.text))
        if not matches:
            continue
        ends = [0, *(m.end() for m in _SENTENCE_END.finditer(unit.text)), len(unit.text)]
        for m in matches:
            start = max(e for e in ends if e <= m.start())
            stop = min((e for e in ends if e > m.end()), default=len(unit.text))
            sentence = unit.text[start:stop]
            line = unit.lines[unit.text.count("\n", 0, m.start())]
            names = _code_names(CITATION.sub(" ", sentence)) | _code_names(unit.code)
            names |= _our_definition_names(defs, line)
            after = unit.comment_block_end + 1
            if unit.comment_block_end and after in def_lines:
                names.add(def_lines[after])
            elif unit.comment_block_end and after <= len(src_lines):
                names |= _code_names(src_lines[after - 1])
            names = {n for n in names if not (n.startswith("__") and n.endswith("__"))}
            release = m.group(3) or _release_before(unit.text, m.start()) or REFERENCE
            found.append(
                Citation(rel, line, m.group(0), m.group(1), _ranges(m.group(2)), release, tuple(sorted(names)))
            )
    return found


def core_files() -> list[Path]:
    return sorted(CORE.rglob("*.py"))


def all_citations() -> list[Citation]:
    return [c for path in core_files() for c in citations_in(path)]


def raw_citation_count() -> int:
    """``.py:<digit>`` spots in the core's text, for a check that the finder misses none."""
    return sum(len(RAW_CITATION.findall(p.read_text(encoding="utf-8"))) for p in core_files())


@cache
def site(release: str) -> Path | None:
    return next((REPO / RELEASES[release] / "lib").glob("python3*/site-packages"), None)


@cache
def vllm_files(release: str) -> tuple[str, ...]:
    root = site(release)
    assert root is not None and (root / "vllm").is_dir(), f"vLLM {release} is not installed"
    return tuple(sorted(p.relative_to(root).as_posix() for p in (root / "vllm").rglob("*.py")))


def resolve(path: str, release: str) -> str:
    """The one vLLM file a cited path names (see the module docstring)."""
    files = vllm_files(release)
    hits = [f for f in files if f == path or f.endswith("/" + path)]
    if len(hits) == 1:
        return hits[0]
    if path in SHORT_NAMES and SHORT_NAMES[path] in files:
        return SHORT_NAMES[path]
    raise AssertionError(f"{path} names {len(hits)} files of vLLM {release}: {hits[:6]}")


@dataclass(frozen=True)
class VllmSource:
    lines: tuple[str, ...]
    defs: tuple[_Def, ...]


@cache
def vllm_source(rel: str, release: str) -> VllmSource:
    root = site(release)
    assert root is not None
    text = (root / rel).read_text(encoding="utf-8")
    return VllmSource(tuple(text.splitlines()), tuple(_definitions(ast.parse(text))))


def their_names(src: VllmSource, first: int, last: int) -> set[str]:
    names = set(_IDENT.findall("\n".join(src.lines[first - 1 : last])))
    chain = _enclosing(list(src.defs), first)
    return (names | {chain[-1].name}) if chain else names


def problems(c: Citation) -> list[str]:
    """What is wrong with one citation; empty when it holds."""
    if c.release not in RELEASES:
        return [f"vLLM {c.release} is not one of the installed releases {sorted(RELEASES)}"]
    rel = resolve(c.path, c.release)
    src = vllm_source(rel, c.release)
    out = []
    for first, last in c.ranges:
        where = f"{rel}:{first}-{last} ({c.release})"
        if not 1 <= first <= last <= len(src.lines):
            out.append(f"{where}: outside the file's {len(src.lines)} lines")
            continue
        if not src.lines[first - 1].strip() or not src.lines[last - 1].strip():
            out.append(f"{where}: starts or ends on a blank line")
        starts = [d.name for d in src.defs if first < _first_line(d) <= last <= d.lineno]
        if starts:
            out.append(f"{where}: ends on the first line of {starts[0]}, which it does not cover")
        if not set(c.names) & their_names(src, first, last):
            chain = [d.name for d in _enclosing(list(src.defs), first)]
            out.append(f"{where} (in {'.'.join(chain) or 'the module'}) mentions none of {list(c.names)}")
    return out
