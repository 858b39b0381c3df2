"""The tests' own import graph: a test module imports no other test module (what two suites share lives in a
harness module: tests/simhost.py, tests/sshhost, tests/realengine, tests/monitor_bed.py, …, and their fixtures are
registered in conftest.py), and the modules under tests/ import each other without a cycle, function-local imports
counted."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def modules(root: Path = TESTS) -> dict[str, Path]:
    found = {}
    for path in root.rglob("*.py"):
        if {"fixtures", "__pycache__", "golden"} & set(path.relative_to(root).parts):
            continue
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of `known` that `name` imports anywhere in it (the top, a function, a test)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".") if node.level and package else []
            if node.level > 1:
                base = base[:len(base) - node.level + 1]
            module = ".".join(base + ([node.module] if node.module else [])) if node.level else node.module
            found |= {m for m in [module, *(f"{module}.{a.name}" for a in node.names)] if m in known}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in known}
    return found - {name}


def graph(root: Path = TESTS) -> dict[str, set[str]]:
    known = modules(root)
    return {name: imports(name, path, known) for name, path in known.items()}


def is_test_module(name: str) -> bool:
    return name.rpartition(".")[2].startswith("test_")


def cycles(edges: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in edges.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = set()
            while True:
                other = stack.pop()
                component.add(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(component)

    for node in edges:
        if node not in index:
            visit(node)
    return found


def test_no_module_under_tests_imports_a_test_module():
    edges = graph()
    wrong = sorted(f"{a} imports {b}" for a, found in edges.items() for b in found if is_test_module(b))
    assert not wrong, f"move what they share into a harness module: {wrong}"


def test_the_modules_under_tests_import_each_other_without_a_cycle():
    assert cycles(graph()) == []


def test_the_checks_see_a_test_import_and_a_cycle(tmp_path):
    (tmp_path / "test_a.py").write_text("def test_x():\n    from test_b import helper\n")
    (tmp_path / "test_b.py").write_text("def helper():\n    pass\n")
    (tmp_path / "m1.py").write_text("import m2\n")
    (tmp_path / "m2.py").write_text("def f():\n    from m1 import g\n")
    edges = graph(tmp_path)
    assert edges["test_a"] == {"test_b"} and cycles(edges) == [{"m1", "m2"}]
