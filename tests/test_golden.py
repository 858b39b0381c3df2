"""Every file and command the kpro5 stack installs, against reviewed golden copies (tests/golden/kpro5).

After an intended change: `make golden`, then review the diff of tests/golden like any other code.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from conftest import PROJECT
from gpuhosts.plan import write_plan

GOLDEN = Path(__file__).resolve().parent / "golden" / "kpro5"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("plan") / "kpro5"
    write_plan(PROJECT, "kpro5", PROJECT / "stacks" / "Pulumi.kpro5.yaml", out)
    return out / "hosts" / "kpro5"


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_golden_files(rendered):
    if os.environ.get("GPUHOSTS_UPDATE_GOLDEN"):
        shutil.rmtree(GOLDEN, ignore_errors=True)
        shutil.copytree(rendered, GOLDEN)
    assert files_under(rendered) == files_under(GOLDEN), "files added or removed: run `make golden` and review"
    for name in files_under(GOLDEN):
        assert (rendered / name).read_text() == (GOLDEN / name).read_text(), f"{name} differs: `make golden`, review"


def test_installed_files_carry_the_managed_header(rendered):
    installed = [n for n in files_under(rendered) if not n.startswith("commands/")]
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
