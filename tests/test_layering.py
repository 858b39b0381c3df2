"""The layers: `gpuhosts/` is pure (config, plans, engines, rendering) and never imports `components/`, which holds
only the Pulumi resources; a plan module imports what it needs at the top, so the import graph has no cycle."""

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
