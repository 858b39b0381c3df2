"""The layers: `gpuhosts/` is pure (config, plans, engines, rendering) and never imports `components/`, which holds
only the Pulumi resources; every module of `gpuhosts/` imports what it needs at the top, and the import graph has
no cycle (a cycle is what function-local imports hide)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PURE = sorted((ROOT / "gpuhosts").rglob("*.py"))


def _imports(path: Path) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, node.lineno))
        elif isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
    return found


@pytest.mark.parametrize("path", PURE, ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_modules_never_import_components(path):
    offending = [f"line {line}: {module}" for module, line in _imports(path)
                 if module == "components" or module.startswith("components.")]
    assert not offending, f"{path.relative_to(ROOT)} imports components/: {offending}"


def test_the_scan_sees_an_import_of_components(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from components.host_units import materialize\n")
    assert ("components.host_units", 2) in _imports(module)


def test_components_hold_only_pulumi_resources():
    for path in sorted((ROOT / "components").glob("*.py")):
        if path.name == "__init__.py":
            continue
        assert "import pulumi" in path.read_text(), f"{path.name} has no Pulumi resource: it belongs in gpuhosts/plans/"


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> tuple[dict[str, set[str]], list[str]]:
    modules = {_module(p): p for p in PURE}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    local = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        top = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            for target in targets:
                if target in modules and target != name:
                    graph[name].add(target)
                    if id(node) not in top:
                        local.append(f"{name} → {target} (line {node.lineno})")
    return graph, local


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        stack.pop()
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_no_module_of_gpuhosts_imports_another_inside_a_function():
    assert _graph()[1] == []


def test_the_import_graph_of_gpuhosts_has_no_cycle():
    assert _cycle(_graph()[0]) is None


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
