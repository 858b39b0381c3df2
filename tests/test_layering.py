"""The layers: `gpuhosts/` is pure (config, plans, engines, rendering) and never imports `components/`, which holds
only the Pulumi resources; every module of `gpuhosts/` imports what it needs at the top, and the import graph has
no cycle (a cycle is what function-local imports hide).

Within the project, each module sits in one layer of `LAYERS`, from where its code runs up to the program, and
imports only from its own layer or those below:

* hostside — scripts shipped verbatim to a host, a container or the training node (gpuhosts/hostside/): the
  standard library (and their host environment's one known package) only, no module of gpuhosts, not even another
  of their own layer;
* base — typed config, environment specs, rendering, units and facts, the compatibility data;
* engines — the engine drivers (gpuhosts/engines/);
* checks — the config checks that ask the drivers (compatibility rules, benchmarks, the whole stack);
* plans — the unit plans (gpuhosts/plans/);
* front — the offline plan, the CLI and its commands, the Pulumi provider;
* components — the Pulumi resources; program — `__main__.py`.

`gpuhosts_monitor/` stands apart: the node runs it without gpuhosts, so it imports nothing of the project and no
module of the project imports it. A module whose source a plan ships (`Path(module.__file__)`) is a hostside one.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PURE = sorted((ROOT / "gpuhosts").rglob("*.py"))
PROJECT_MODULES = sorted([*PURE, *(ROOT / "components").glob("*.py"), *(ROOT / "gpuhosts_monitor").glob("*.py"),
                          ROOT / "__main__.py"])

# Lowest first. A name ending in ".*" is a package with everything in it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("hostside", ("gpuhosts.hostside.*",)),
    ("base", ("gpuhosts", "gpuhosts.data_files", "gpuhosts.exit_codes", "gpuhosts.oplog", "gpuhosts.protocol", "gpuhosts.render", "gpuhosts.fields", "gpuhosts.ssh", "gpuhosts.paths",
              "gpuhosts.compat_data", "gpuhosts.dataset_size", "gpuhosts.config", "gpuhosts.services", "gpuhosts.training", "gpuhosts.units",
              "gpuhosts.facts", "gpuhosts.locks", "gpuhosts.envspec", "gpuhosts.resource_tree", "gpuhosts.metrics")),
    ("engines", ("gpuhosts.engines.*",)),
    ("checks", ("gpuhosts.compat", "gpuhosts.benchmarks", "gpuhosts.stacks", "gpuhosts.fleet", "gpuhosts.observability")),
    ("plans", ("gpuhosts.plans.*",)),
    ("front", ("gpuhosts.plan", "gpuhosts.cli", "gpuhosts.check", "gpuhosts.diff", "gpuhosts.lock_tool",
               "gpuhosts.bench", "gpuhosts.bench_cli", "gpuhosts.schema_doc", "gpuhosts.probe_batch", "gpuhosts.provider",
               "gpuhosts.upgrades")),
    ("components", ("components.*",)),
    ("program", ("__main__",)),
]
APART = "gpuhosts_monitor"
# What a host environment is known to have beside the standard library: an engine's environment has
# prometheus_client (both engines depend on it), speculators' has pyarrow.
HOSTSIDE_PACKAGES = {"prometheus_client", "pyarrow"}


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
    if path == ROOT / "__main__.py":
        return "__main__"
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


# --- the layers ----------------------------------------------------------------------------------------------

def layer_of(module: str) -> str | None:
    for name, members in LAYERS:
        for member in members:
            if module == member.removesuffix(".*") or (member.endswith(".*") and module.startswith(member[:-1])):
                return name
    return None


RANK = {name: rank for rank, (name, _members) in enumerate(LAYERS)}
ORDER = " < ".join(name for name, _members in LAYERS)


def project_imports(path: Path, source: str) -> list[tuple[str, int]]:
    """Every import of a project module in `source` (the text of `path`), also inside functions, as (module, line):
    `from a import b` counts as a.b where that is a module, else as a."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = _module(path).split(".")
                package = package[: len(package) - node.level + (path.name == "__init__.py")]
                base = ".".join(package + ([node.module] if node.module else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in KNOWN else base for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        for target in dict.fromkeys(targets):
            while target not in KNOWN and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in KNOWN or target.split(".")[0] in ("gpuhosts", "components", APART):
                found.append((target, node.lineno))
    return found


KNOWN = {_module(p) for p in PROJECT_MODULES}


@pytest.mark.parametrize("path", PROJECT_MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_sits_in_one_layer(path):
    module = _module(path)
    if module == APART or module.startswith(APART + "."):
        return
    assert layer_of(module) is not None, (
        f"{path.relative_to(ROOT)} ({module}) is in no layer: add it to LAYERS in tests/test_layering.py, in the "
        f"lowest layer whose modules it needs ({ORDER})")


def climbing(path: Path, source: str | None = None) -> list[str]:
    """The imports of `path` (or of `source` in its place) that break the layering, each in a sentence naming the
    module and the import."""
    module, name = _module(path), str(path.relative_to(ROOT))
    apart = module == APART or module.startswith(APART + ".")
    found = []
    for target, line in project_imports(path, path.read_text() if source is None else source):
        target_apart = target == APART or target.startswith(APART + ".")
        if target == module:
            continue
        if apart and not target_apart:
            found.append(f"{name} line {line}: imports {target}; {APART}/ runs on the node without the project and "
                         "imports none of it")
        elif target_apart and not apart:
            found.append(f"{name} line {line}: imports {target}; the project never imports {APART}/ (the node's "
                         "app); give the project its own copy of what it needs and a test that they agree")
        elif not apart and layer_of(module) == "hostside":
            found.append(f"{name} line {line}: imports {target}; a hostside module runs on its host as one file "
                         "and imports no module of gpuhosts, not even another hostside one")
        elif not apart and layer_of(target) is not None and layer_of(module) is not None \
                and RANK[layer_of(target)] > RANK[layer_of(module)]:
            found.append(f"{name} line {line}: {module} ({layer_of(module)}) imports {target} "
                         f"({layer_of(target)}), a layer above it; imports go down only: {ORDER}")
    return found


@pytest.mark.parametrize("path", PROJECT_MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_import_climbs_a_layer(path):
    offending = climbing(path)
    assert not offending, "\n".join(offending)


@pytest.mark.parametrize("path", sorted((ROOT / "gpuhosts" / "hostside").glob("*.py")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_hostside_modules_import_only_the_standard_library(path):
    outside = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
        outside += [f"line {node.lineno}: {n}" for n in names if n.split(".")[0] not in sys.stdlib_module_names
                    and n.split(".")[0] not in HOSTSIDE_PACKAGES]
    assert not outside, f"{path.relative_to(ROOT)} runs on its host, which has none of {outside}"


def shipped_modules(path: Path) -> list[tuple[str, int]]:
    """The modules whose own file `path` reads (`Path(m.__file__)`), to ship it."""
    tree = ast.parse(path.read_text())
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            bound.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
        elif isinstance(node, ast.Import):
            bound.update({a.asname or a.name.split(".")[0]: a.name if a.asname else a.name.split(".")[0]
                          for a in node.names})
    return [(bound.get(node.value.id, node.value.id), node.lineno) for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr == "__file__" and isinstance(node.value, ast.Name)]


@pytest.mark.parametrize("path", PURE, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_module_whose_source_is_shipped_is_a_hostside_one(path):
    wrong = [f"line {line}: {module}" for module, line in shipped_modules(path)
             if module in KNOWN and layer_of(module) != "hostside"]
    assert not wrong, (f"{path.relative_to(ROOT)} ships the source of {wrong}: a module that runs on a host "
                       "belongs in gpuhosts/hostside/")


def test_the_layer_check_names_a_climbing_import():
    found = climbing(ROOT / "gpuhosts" / "config.py", "import json\n\ndef f():\n    from gpuhosts.plans import python_env\n")
    assert found == ["gpuhosts/config.py line 4: gpuhosts.config (base) imports gpuhosts.plans.python_env (plans), a "
                     f"layer above it; imports go down only: {ORDER}"]
    assert climbing(ROOT / "gpuhosts" / "plans" / "python_env.py", "from gpuhosts.envspec import EnvSpec\n") == []


@pytest.mark.parametrize("name,source,why", [
    ("gpuhosts/training.py", "from gpuhosts_monitor.bind import is_loopback\n", "never imports gpuhosts_monitor"),
    ("gpuhosts/hostside/bench_probe.py", "import gpuhosts.hostside.gate_probe\n", "not even another hostside one"),
    ("gpuhosts/hostside/gate_probe.py", "from gpuhosts import protocol\n", "imports no module of gpuhosts"),
    ("gpuhosts_monitor/cli.py", "from gpuhosts.fields import is_loopback\n", "imports none of it"),
])
def test_the_layer_check_names_what_stands_apart(name, source, why):
    (found,) = climbing(ROOT / name, source)
    assert found.startswith(f"{name} line 1: imports ") and why in found, found


def test_the_shipped_source_scan_sees_a_module_read_as_a_file(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from pathlib import Path\nfrom gpuhosts.plans import python_env as env\n"
                      "text = Path(env.__file__).read_text()\n")
    assert shipped_modules(module) == [("gpuhosts.plans.python_env", 3)]
