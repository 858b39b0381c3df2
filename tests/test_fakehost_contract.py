"""docs/fakehost-contract.md: every row of its tables names a function of the simulated host that exists and the
upstream source it follows, with the version read (a tag such as v1.2.3 or 580.126.09, or a 40-hex commit)."""
import importlib
import re
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
CONTRACT = TESTS.parent / "docs/fakehost-contract.md"
FAKEHOST = TESTS / "fakehost"
sys.path.insert(0, str(TESTS))

# a tag-like token (1.21.22, v0.36.0, 580.95.05, 2.6.1, v30) or a full commit id; a short commit id is no version
VERSION = re.compile(r"(?<![\w.])(?:v?\d+(?:\.\d+)+[\w.+~-]*|v\d+|[0-9a-f]{40})(?![\w])")
CELL = re.compile(r"(?<!\\)\|")


def sections(text: str) -> dict:
    """{heading: [(line number, [cells])]} of the table rows under each `## ` heading, header rows left out."""
    out, heading, header_seen = {}, None, False
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("## "):
            heading, header_seen = line[3:].strip(), False
            continue
        if heading is None or not line.startswith("|"):
            header_seen = header_seen and line.startswith("|")
            continue
        cells = [c.strip() for c in CELL.split(line.strip())[1:-1]]
        if all(re.fullmatch(r":?-{3,}:?", c) for c in cells):
            continue
        if not header_seen:  # the first row of a table names its columns
            header_seen = True
            continue
        out.setdefault(heading, []).append((n, cells))
    return out


def functions(cell: str) -> list:
    """(module, function) pairs a "simulated in" cell names: `module.function`, or `module.py` followed by
    `function`, `function`."""
    out, module = [], None
    for token in re.findall(r"`([^`]+)`", cell) or cell.replace(",", " ").split():
        token = token.strip().rstrip("()")
        if token.endswith(".py"):
            module = token[:-3].rsplit("/", 1)[-1]
        elif re.fullmatch(r"\w+(\.\w+)+", token):
            out.append(tuple(token.split(".", 1)))
        elif (FAKEHOST / token).is_file():
            out.append(("", token))
        elif module and re.fullmatch(r"[A-Za-z_]\w*", token):
            out.append((module, token))
    return out


def problems(cells: list) -> list:
    if len(cells) != 3:
        return [f"{len(cells)} columns, not 3 (behaviour | simulated in | upstream source)"]
    _, where, source = cells
    found = []
    named = functions(where)
    if not named:
        found.append(f"names no module.function: {where!r}")
    for module, name in named:
        if not module:
            continue  # a file of the simulated host (a shell library), checked to exist above
        try:
            obj = importlib.import_module(f"fakehost.{module}")
            for part in name.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as e:
            found.append(f"fakehost.{module}.{name} does not exist ({e.__class__.__name__})")
            continue
        if not callable(obj):
            found.append(f"fakehost.{module}.{name} is not a function")
    if not VERSION.search(source):
        found.append(f"source has no version (tag or 40-hex commit): {source!r}")
    return found


@pytest.mark.parametrize("cells, expected", [
    (["a", "`kernel.bind`", "torvalds/linux drivers/base/bus.c `driver_bind` @ " + "a" * 40], []),
    (["a", "`pve.py` `cmd_qm`, `qm_list_rows`", "qemu-server qm.pm @ 9.0.1"], []),
    (["a", "`kernel.no_such_thing`", "x @ 1.2.3"], ["fakehost.kernel.no_such_thing does not exist (AttributeError)"]),
    (["a", "`kernel.PCI`", "x @ 1.2.3"], ["fakehost.kernel.PCI is not a function"]),
    (["a", "`kernel.bind`", "x @ e6352be"], ["source has no version (tag or 40-hex commit): 'x @ e6352be'"]),
    (["a", "somewhere", "x @ v1.0"], ["names no module.function: 'somewhere'"]),
    (["a", "`kernel.bind`"], ["2 columns, not 3 (behaviour | simulated in | upstream source)"]),
])
def test_row_checks(cells, expected):
    assert problems(cells) == expected


def test_table_rows_and_columns_are_read():
    text = ("intro\n| not | a | section |\n## One\n\n| b | where | src |\n| --- | --- | --- |\n"
            "| x | `kernel.bind` | v1.2 |\n| y \\| z | `hub.cmd_hf` | v0.36.0 |\n\n## Two\ntext\n")
    assert sections(text) == {"One": [(7, ["x", "`kernel.bind`", "v1.2"]), (8, ["y \\| z", "`hub.cmd_hf`", "v0.36.0"])]}


SECTIONS = sections(CONTRACT.read_text())


def test_the_contract_has_tables():
    assert "Kernel binding, the installer and the container's tools" in SECTIONS


@pytest.mark.parametrize("heading", sorted(SECTIONS))
def test_every_row_names_a_function_and_a_versioned_source(heading):
    bad = [f"docs/fakehost-contract.md:{n}: {p}" for n, cells in SECTIONS[heading] for p in problems(cells)]
    assert not bad, f"{len(bad)} row problem(s) in section {heading!r}:\n" + "\n".join(bad)


@pytest.mark.parametrize("cells, expected", [
    (["a", "`system.ModprobeConf.showconfig`", "kmod tools/modprobe.c @ v30"], []),
    (["a", "`system.ModprobeConf.no_such`", "x @ v30"], ["fakehost.system.ModprobeConf.no_such does not exist "
                                                        "(AttributeError)"]),
    (["a", "`share/hook-functions`", "initramfs-tools @ debian/0.142"], []),
    (["a", "`share/no-such-file`", "x @ v30"], ["names no module.function: '`share/no-such-file`'"]),
])
def test_methods_and_files_of_the_simulated_host_are_names_too(cells, expected):
    assert problems(cells) == expected
