"""systemd's own verifier on the boot units gpuhosts renders for the kpro5 host: `systemd-analyze verify --root`
over a unit directory that holds them, the stand-in pve-guests.service (tests/fixtures/systemd) and this machine's
own units (sysinit.target, systemd-modules-load.service, ...). The programs the units run come from the .run and
the base system: they are stubs in the root, so the verifier judges the units, not this machine.

Whether the node unit starts before the guests is what the verifier computes too: a witness unit ordered after
pve-guests.service and before the node unit, wanting both, makes an ordering cycle exactly when the node unit is
ordered before pve-guests.service (systemd.unit(5), "Before=, After="; the transaction builder reports
"Found ordering cycle")."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import FIXTURES, KPRO5_SECRETS, kpro5_values
from gpuhosts.plans.lxc_gpu_passthrough import UVM_UNIT
from gpuhosts.plans.proxmox_host import plan_host
from gpuhosts.stacks import validate_stack

ANALYZE = shutil.which("systemd-analyze")
SYSTEM_UNITS = Path("/usr/lib/systemd/system")
pytestmark = pytest.mark.skipif(ANALYZE is None or not SYSTEM_UNITS.is_dir(), reason="systemd-analyze is not here")

WITNESS = "gpuhosts-order-witness.service"
WITNESS_TEXT = f"""[Unit]
Wants=pve-guests.service {UVM_UNIT}
After=pve-guests.service
Before={UVM_UNIT}

[Service]
Type=oneshot
ExecStart=/bin/true
"""


def host_units(*kinds: str) -> dict[str, str]:
    """name -> text of every systemd unit file the kpro5 host itself (not a container) receives from units of
    `kinds`."""
    graph = plan_host(validate_stack(kpro5_values(), KPRO5_SECRETS))
    return {f.path.rsplit("/", 1)[1]: f.content for unit in graph.apply_order
            if unit.container is None and unit.kind in kinds
            for f in unit.files if f.path.startswith("/etc/systemd/system/") and f.path.endswith(".service")}


def host_boot_units() -> dict[str, str]:
    """The units that must be in place before the guests start: the driver's and the containers' device nodes."""
    return host_units("NvidiaDriver", "NvidiaDeviceNodes", "LxcGpuPassthrough")


def programs(text: str) -> set[str]:
    lines = re.findall(r"^Exec\w*=(.+)$", text.replace("\\\n", " "), re.M)
    return {shlex.split(line.lstrip("-@+!:"))[0] for line in lines}


def make_root(tmp_path: Path, units: dict[str, str]) -> Path:
    root = tmp_path / "root"
    shutil.copytree(SYSTEM_UNITS, root / "usr/lib/systemd/system", symlinks=True)
    units = {**units, "pve-guests.service": (FIXTURES / "systemd/pve-guests.service").read_text(),
             WITNESS: WITNESS_TEXT}
    for name, text in units.items():
        (root / "etc/systemd/system").mkdir(parents=True, exist_ok=True)
        (root / "etc/systemd/system" / name).write_text(text)
        for program in programs(text):
            stub = root / program.lstrip("/")
            stub.parent.mkdir(parents=True, exist_ok=True)
            stub.write_text("#!/bin/sh\n")
            stub.chmod(0o755)
    return root


def verify(root: Path, *names: str) -> subprocess.CompletedProcess:
    return subprocess.run([ANALYZE, "verify", "--man=no", f"--root={root}", *names], capture_output=True,
                          text=True, timeout=60)


def test_the_kpro5_host_renders_both_boot_units():
    assert set(host_boot_units()) == {UVM_UNIT, "gpuhosts-nvidia-persistenced.service"}


def test_the_verifier_finds_nothing_wrong_with_the_boot_units(tmp_path):
    units = host_boot_units()
    result = verify(make_root(tmp_path, units), *units)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_the_verifier_finds_nothing_wrong_with_the_exporters(tmp_path):
    units = host_units("NodeExporter", "DcgmExporter")
    assert set(units) == {"gpuhosts-node-exporter.service", "gpuhosts-dcgm-exporter.service"}
    result = verify(make_root(tmp_path, units), *units)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_the_verifier_orders_the_node_unit_before_the_guests(tmp_path):
    result = verify(make_root(tmp_path, host_boot_units()), WITNESS)
    assert "Found ordering cycle" in result.stderr, result.stderr


# A boot unit broken on purpose: what it changes in the rendered node unit, and what the check then sees.
BROKEN = [
    ("a misspelt key", ("ExecStart=/usr/bin/nvidia-modprobe -c=255", "ExecStrat=/usr/bin/nvidia-modprobe -c=255"),
     "Unknown key"),
    ("a wrong value", ("Type=oneshot", "Type=oneshott"), "Failed to parse service type"),
    ("a relative program", ("ExecStart=/usr/bin/nvidia-modprobe -u -c=0", "ExecStart=bin/nvidia-modprobe -u -c=0"),
     "bin/nvidia-modprobe"),
    ("not ordered before the guests", ("Before=pve-guests.service\n", ""), None),
]


@pytest.mark.parametrize("case, edit, complaint", BROKEN, ids=[b[0] for b in BROKEN])
def test_the_checks_fail_on_a_broken_node_unit(tmp_path, case, edit, complaint):
    units = host_boot_units()
    old, new = edit
    assert old in units[UVM_UNIT]
    units[UVM_UNIT] = units[UVM_UNIT].replace(old, new)
    root = make_root(tmp_path, units)
    if complaint is None:
        result = verify(root, WITNESS)
        assert "Found ordering cycle" not in result.stderr
    else:
        result = verify(root, *units)
        assert result.returncode != 0 or result.stdout + result.stderr != ""
        assert complaint in result.stdout + result.stderr
