"""Every file and command the kpro5 and trainer stacks install, against reviewed golden copies (tests/golden/STACK).

After an intended change: `make golden`, then review the diff of tests/golden like any other code.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from conftest import PROJECT
from gpuhosts.plan import write_plan

GOLDEN_ROOT = Path(__file__).resolve().parent / "golden"
GOLDEN = GOLDEN_ROOT / "kpro5"
STACKS = {"kpro5": "kpro5", "trainer": "trainer"}  # stack: host folder


def render_stack(tmp_path_factory, stack: str) -> Path:
    out = tmp_path_factory.mktemp("plan") / stack
    write_plan(PROJECT, stack, PROJECT / "stacks" / f"Pulumi.{stack}.yaml", out)
    return out / "hosts" / STACKS[stack]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    return render_stack(tmp_path_factory, "kpro5")


@pytest.fixture(scope="module", params=sorted(STACKS))
def each_stack(request, tmp_path_factory) -> tuple[Path, Path]:
    return render_stack(tmp_path_factory, request.param), GOLDEN_ROOT / request.param


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_golden_files(each_stack):
    rendered, golden = each_stack
    if os.environ.get("GPUHOSTS_UPDATE_GOLDEN"):
        shutil.rmtree(golden, ignore_errors=True)
        shutil.copytree(rendered, golden)
    assert files_under(rendered) == files_under(golden), "files added or removed: run `make golden` and review"
    for name in files_under(golden):
        assert (rendered / name).read_text() == (golden / name).read_text(), f"{name} differs: `make golden`, review"


def test_installed_files_carry_the_managed_header(each_stack):
    rendered, golden = each_stack
    installed = [n for n in files_under(rendered) if not n.startswith("commands/")]
    if golden.name == "kpro5":
        assert len(installed) == 10  # 6 on the host, 4 in container 129
    for name in installed:
        assert "managed by gpuhosts" in "".join((rendered / name).read_text().splitlines(True)[:2]), name


def test_vfio_files_bind_exactly_the_two_3090_slots(rendered):
    override = (rendered / "usr/local/lib/gpuhosts/vfio-override.sh").read_text()
    assert '"$root"/sys/bus/pci/devices/0000:01:00.* "$root"/sys/bus/pci/devices/0000:21:00.*' in override
    assert "0000:41" not in override and "0000:61" not in override
    modprobe = (rendered / "etc/modprobe.d/gpuhosts-vfio.conf").read_text()
    assert "ids=" not in modprobe.replace("by device id", ""), "binding must be by address, never by device id"
    assert "softdep nvidia pre: vfio-pci" in modprobe
