"""The host-fact parsers of the scripts (templates/common/lib.sh.j2), run by bash over real command output."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import FIXTURES
from gpuhosts.render import render

FACT_SETS = sorted(p for p in (FIXTURES / "facts").iterdir() if (p / "expected.json").exists())


@pytest.fixture(scope="module")
def lib(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("lib") / "lib.sh"
    path.write_text(render("common/lib.sh.j2", unit="facts"))
    return path


def call(lib: Path, tree: Path, *argv: str, stdin: str = "") -> str:
    result = subprocess.run(
        ["bash", "-c", 'source "$0"; "$@"', str(lib), *argv],
        input=stdin, capture_output=True, text=True, check=True,
        env={**os.environ, "GPUHOSTS_HOST_ROOT": str(tree)},
    )
    return result.stdout.strip()


def cases(key: str) -> list:
    return list(_cases(key))


def _cases(key: str):
    for fact_set in FACT_SETS:
        expected = json.loads((fact_set / "expected.json").read_text())[key]
        items = expected.items() if isinstance(expected, dict) else [(None, expected)]
        for arg, want in items:
            yield pytest.param(fact_set, arg, want, id=f"{fact_set.name}-{arg}")


@pytest.mark.parametrize("fact_set, _arg, want", cases("module_version"))
def test_module_version(lib, fact_set, _arg, want):
    assert call(lib, fact_set / "tree", "module_version") == want


@pytest.mark.parametrize("fact_set, _arg, want", cases("module_version"))
def test_module_version_from_proc_when_sysfs_lacks_it(lib, fact_set, _arg, want, tmp_path):
    subprocess.run(["cp", "-a", f"{fact_set}/tree/.", str(tmp_path)], check=True)
    subprocess.run(["rm", "-rf", str(tmp_path / "sys")], check=True)
    assert call(lib, tmp_path, "module_version") == want


@pytest.mark.parametrize("fact_set, name, want", cases("char_major"))
def test_char_major(lib, fact_set, name, want):
    assert call(lib, fact_set / "tree", "char_major", name) == want


@pytest.mark.parametrize("fact_set, address, want", cases("gpu_minor"))
def test_gpu_minor(lib, fact_set, address, want):
    assert call(lib, fact_set / "tree", "gpu_minor", address) == want


@pytest.mark.parametrize("fact_set, output, want", cases("smi_rows"))
def test_nvidia_smi_rows(lib, fact_set, output, want):
    rows = call(lib, fact_set / "tree", "smi_rows", stdin=(fact_set / output).read_text())
    assert rows.splitlines() == want


def test_no_module_loaded_reads_as_empty(lib, tmp_path):
    assert call(lib, tmp_path, "module_version") == ""
    assert call(lib, tmp_path, "userspace_version") == ""


@pytest.mark.parametrize("given, want", [
    ("00000000:41:00.0", "0000:41:00.0"),
    ("00000000:0A:00.0", "0000:0a:00.0"),
    ("41:00.0", "0000:41:00.0"),
    ("0000:41:00", "0000:41:00"),
    ("41:00", "0000:41:00"),
    ("0000:41:00.1", "0000:41:00.1"),
])
def test_normal_address(lib, tmp_path, given, want):
    assert call(lib, tmp_path, "normal_address", given) == want


def test_nvidia_smi_accepts_the_sysfs_address_form():
    """The scripts pass sysfs's 4-digit-domain address to `nvidia-smi -i`; the real tool takes it."""
    text = (FACT_SETS[0] / "nvidia-smi" / "i-address-forms.txt").read_text()
    assert "## -i 0000:00:06.0\nEnabled\nrc=0" in text
    assert "## -i 0000:99:00.0\nNo devices were found\nrc=6" in text
