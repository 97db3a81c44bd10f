"""The house rules of docs/architecture.md, checked on the source tree.

- the core imports nothing of the rest (no Streamlit, plotly, torch, no explorer module
  outside explorer/core);
- no module outside the core reads a private attribute that a core class defines;
- no import cycle between explorer's modules (function-level imports count);
- no module over 400 lines; every package says its purpose in one docstring line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "explorer"
MODULES = sorted(p for p in PKG.rglob("*.py"))


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every explorer module this file imports, at any level (a package's import of a name is
    resolved to the submodule when one exists)."""
    out: set[str] = set()
    known = {module_name(p) for p in MODULES}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("explorer"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("explorer"):
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.add(sub if sub in known else node.module)
    return {m for m in out if m in known}


def test_the_core_imports_only_the_core_and_the_standard_library():
    banned = ("streamlit", "plotly", "torch", "numpy", "zmq")
    for path in (PKG / "core").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert not name.startswith(banned), f"{path.name} imports {name}"
                if name.startswith("explorer"):
                    assert name.startswith("explorer.core"), f"{path.name} imports {name}"


def _core_private_attributes() -> set[str]:
    """Names like ``_cache`` that core classes assign on self or declare in a class body."""
    names: set[str] = set()
    for path in (PKG / "core").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                if node.attr.startswith("_") and not node.attr.startswith("__"):
                    names.add(node.attr)
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    target = item.target if isinstance(item, ast.AnnAssign) else None
                    if isinstance(target, ast.Name) and target.id.startswith("_") and not target.id.startswith("__"):
                        names.add(target.id)
    return names


def test_no_module_outside_the_core_reads_a_private_attribute_of_a_core_object():
    private = _core_private_attributes()
    assert {"_cache", "_block_hash"} <= private  # the check knows what to look for
    offences = []
    for path in MODULES:
        if (PKG / "core") in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in private:
                base = node.value
                if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                    continue  # the module's own private state
                offences.append(f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}")
    assert not offences, "private core state read outside the core: " + ", ".join(offences)


def test_no_import_cycle():
    graph = {module_name(p): imports_of(p) for p in MODULES}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if n == m:
                continue
            if state.get(n) == 1:
                cycle = stack[stack.index(n) :] + [n]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_over_400_lines(path):
    n = len(path.read_text().splitlines())
    assert n <= 400, f"{path.relative_to(ROOT)} has {n} lines"


@pytest.mark.parametrize(
    "pkg", sorted(p.parent for p in PKG.rglob("__init__.py")), ids=lambda p: str(p.relative_to(ROOT))
)
def test_every_package_states_its_purpose_in_one_line(pkg):
    doc = ast.get_docstring(ast.parse((pkg / "__init__.py").read_text()))
    assert doc, f"{pkg.relative_to(ROOT)}/__init__.py has no docstring"
    assert len(doc.strip().splitlines()) == 1, f"{pkg.relative_to(ROOT)}: the purpose is one line"


# Who may import whom (docs/architecture.md): a package imports only packages of a lower layer.
LAYERS = {
    "core": 0,
    "errors": 1,
    "model_file": 1,
    "tokenizer_cache": 1,
    "printable": 1,
    "numbers": 1,
    "toml_read": 2,
    "tokens": 2,
    "extra_keys": 2,
    "request_steps": 2,
    "miss": 2,
    "hashcalc": 3,
    "scenario": 3,
    "traffic": 3,
    "prefill": 3,
    "events": 4,
    "metrics": 4,
    "practice": 4,
    "bench": 4,
    "bench_sweep": 4,
    "router": 5,
    "viz": 6,
    "view": 7,
    "ui": 8,
    "cli": 8,
    "cli_args": 3,
    "__main__": 9,
}


def _package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "explorer"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_follow_the_layers(path):
    src = _package_of(module_name(path))
    if src == "explorer":
        return
    assert src in LAYERS, f"{src} has no layer in docs/architecture.md and this test"
    for target in imports_of(path):
        dst = _package_of(target)
        if dst in (src, "explorer"):
            continue
        assert LAYERS[dst] < LAYERS[src], f"{module_name(path)} ({src}) imports {target} ({dst}): against the layers"


VIEW_BANNED = ("streamlit",)


def test_the_view_package_imports_no_streamlit_at_any_depth():
    """explorer/view/ turns a trace into what is drawn with no Streamlit: neither it
    nor any explorer module it reaches imports one, so it is tested as plain functions."""
    by_name = {module_name(p): p for p in MODULES}
    seen: set[str] = set()
    todo = [module_name(p) for p in (PKG / "view").rglob("*.py")]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = by_name[name]
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for n in names:
                assert not n.startswith(VIEW_BANNED), f"{name} (reached from explorer.view) imports {n}"
        todo.extend(imports_of(path))
    assert "explorer.view.stage" in seen


def test_the_view_package_has_no_catch_all():
    """A bug in what is drawn shows as the page's error, not as a quietly missing part."""
    for path in (PKG / "view").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ExceptHandler):
                caught = ast.unparse(node.type) if node.type is not None else "everything"
                assert caught not in ("Exception", "BaseException", "everything"), f"{path.name} catches {caught}"


# Code that runs outside a page's script run, where no page guard can catch: a thread or a
# process that must close what it holds, or another session's queued start run in this thread.
UI_THREAD_GUARDS = {"live_view.py", "replay_worker.py", "heavy.py"}


def test_the_pages_have_one_guard_in_app_py_and_no_other_catch_all():
    """A bug on a page reaches app.py's one guard (one line for the viewer, the traceback in the
    log), not a handler that hides it where it happened."""
    for path in (PKG / "ui").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            reraises = isinstance(node, ast.ExceptHandler) and isinstance(node.body[-1], ast.Raise)
            if isinstance(node, ast.ExceptHandler) and path.name not in UI_THREAD_GUARDS and not reraises:
                caught = ast.unparse(node.type) if node.type is not None else "everything"
                assert caught not in ("Exception", "BaseException", "everything"), f"{path.name} catches {caught}"
    app = ast.parse((PKG.parent / "app.py").read_text())
    guards = [n for n in ast.walk(app) if isinstance(n, ast.ExceptHandler)]
    assert [ast.unparse(g.type) for g in guards if g.type is not None] == ["Exception"]
