"""The vfio-binding unit against a simulated host that prints what qemu-server, proxmox-boot-tool, update-grub,
nvidia-smi and fuser print (tests/fixtures/pve, tests/fixtures/facts/h200-tool-failures): unnamed and paused-free
VMs, hostpci property strings in any key order, pending config, failing safety tools, GRUB lines with comments and
other quoting, and /etc/kernel/cmdline beyond its first line."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import KPRO5_SECRETS, kpro5_values
from fakehost import host_env
from fakehost.installer import make_fake_run
from fakehost.tree import VMS, profile_seed, tree_digest
from fakehost.tree import seed_kpro5 as seed_any
from fakehost.util import configure
from gpuhosts.plans.nvidia_driver import plan_nvidia_driver
from gpuhosts.plans.vfio_binding import plan_vfio_binding
from gpuhosts.protocol import parse_facts, parse_result
from gpuhosts.stacks import validate_stack

FIXTURES = Path(__file__).parent / "fixtures" / "pve"
VERSION = "580.126.09"
A6000 = "0000:41:00"


def seed_kpro5(tree, **settings):
    """kpro5 on Proxmox VE 8.3 (kernel 6.8.12-4-pve, pve-container 5.2.2): what this module's expectations and the
    fixtures under tests/fixtures/pve were written for; Proxmox VE 9.1 runs in tests/test_host_profiles.py."""
    return seed_any(tree, **{**profile_seed("pve8.3-bookworm"), **settings})


def values(bootloader: str = "systemd-boot") -> dict:
    v = kpro5_values()
    v.pop("services")
    v.pop("benchmarks", None)  # a benchmark compares services: none without them
    v["host"].update(bootloader=bootloader, kernelArgs=["iommu=pt"], proxmoxRelease="8.3")
    return v


def vfio(v: dict | None = None):
    return plan_vfio_binding(validate_stack(v or values(), KPRO5_SECRETS))


def run(tree: Path, script: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=host_env(tree), timeout=120)


def refused(tree: Path, script: str, words: str) -> str:
    before = tree_digest(tree)
    result = run(tree, script)
    assert result.returncode != 0, result.stdout
    assert "refused:" in result.stderr and words in result.stderr, result.stderr
    assert tree_digest(tree) == before, "changed the host while refusing"
    return result.stderr


def applied(tree: Path, script: str) -> str:
    result = run(tree, script)
    assert result.returncode == 0, result.stdout + result.stderr
    parse_result(result.stdout)
    return result.stdout


def probe(tree: Path, unit) -> dict:
    result = run(tree, unit.probe)
    assert result.returncode == 0, result.stderr
    return parse_facts(result.stdout)


# ---- the simulated qm prints what qemu-server prints ------------------------------------------------------

UNNAMED = VMS + ((105, "", f"{A6000}", True),)


def test_qm_list_prints_an_unnamed_vm_as_qemu_server_does(tmp_path):
    t = seed_kpro5(tmp_path / "kpro5", vms=UNNAMED)
    out = run(t, "qm list").stdout
    assert out == (FIXTURES / "qm-list-unnamed.txt").read_text()
    # the NAME column holds a blank, so the third column is not the status
    assert out.splitlines()[3].split()[2] == "105"


@pytest.mark.parametrize("command, fixture", [("qm config 106", "qm-config-106.txt"),
                                              ("qm config 106 --current", "qm-config-106-current.txt")])
def test_qm_config_shows_pending_values_unless_current(tmp_path, command, fixture):
    t = seed_kpro5(tmp_path / "kpro5")
    (t / "etc/pve/qemu-server/106.conf").write_text((FIXTURES / "qm-config-106.conf").read_text())
    assert run(t, command).stdout == (FIXTURES / fixture).read_text()


@pytest.mark.parametrize("bootloader, rc, stdout, stderr", [
    ("systemd-boot", 0, "proxmox-boot-tool-status-uefi.txt", None),
    ("grub", 2, None, "proxmox-boot-tool-status-grub.stderr.txt")])
def test_proxmox_boot_tool_status_prints_as_upstream(tmp_path, bootloader, rc, stdout, stderr):
    t = seed_kpro5(tmp_path / "kpro5", bootloader=bootloader)
    result = run(t, "proxmox-boot-tool status")
    assert result.returncode == rc
    assert result.stdout == ((FIXTURES / stdout).read_text() if stdout else "")
    assert result.stderr == ((FIXTURES / stderr).read_text() if stderr else "")


# ---- D2, D6: which VMs use a GPU --------------------------------------------------------------------------

def mapping(t: Path, vmid: int, fqdn: str) -> None:
    """VM vmid takes an A6000 through a resource mapping; the host's name is an FQDN, the mapping's node the short
    name."""
    conf = t / f"etc/pve/qemu-server/{vmid}.conf"
    conf.write_text(conf.read_text().replace(f"hostpci0: {A6000},pcie=1", "hostpci0: x-vga=1,mapping=a6000-pool"))
    (t / "etc/hostname").write_text(fqdn + "\n")
    cfg = t / "etc/pve/mapping/pci.cfg"
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text("a6000-pool\n\tmap id=10de:2230,iommu-group=40,node=other,path=0000:81:00\n"
                   f"\tmap id=10de:2230,iommu-group=41,node={fqdn.split('.')[0]},path={A6000}\n")


def pending_delete(t: Path, vmid: int) -> None:
    """The running VM's current config has the GPU; a pending change (applied at its next start) drops it."""
    conf = t / f"etc/pve/qemu-server/{vmid}.conf"
    conf.write_text(conf.read_text() + "\n[PENDING]\ndelete: hostpci0\n")


HOSTPCI = [  # (VM name, hostpci0 as written, a change after the start)
    ("", f"{A6000},pcie=1", None),  # unnamed: `qm list` says "VM 103"
    ("a6000-vm", f"pcie=1,host={A6000}", None),
    ("a6000-vm", f"x-vga=1,pcie=1,{A6000}", None),  # the default key need not come first
    ("a6000-vm", "host=41:00.0;41:00.1,pcie=1", None),
    ("a6000-vm", f"{A6000},pcie=1", lambda t: mapping(t, 103, "kpro5.example.lan")),
    ("a6000-vm", f"{A6000},pcie=1", lambda t: pending_delete(t, 103)),
]


@pytest.mark.parametrize("name, hostpci, change", HOSTPCI,
                         ids=["unnamed", "pcie-first", "default-key-last", "functions", "mapping-fqdn",
                              "pending-delete"])
def test_a_running_vm_keeps_its_gpu_however_its_config_spells_it(tmp_path, name, hostpci, change):
    t = seed_kpro5(tmp_path / "kpro5", vms=((101, "win-3090", "0000:01:00", True), (103, name, hostpci, True)))
    if change:
        change(t)
    unit = vfio()
    refused(t, unit.ensure, f"VM 103 is running with {A6000} passed through")
    assert probe(t, unit)[f"running VM with {A6000}"] == "VM 103"


# ---- D7: a safety check whose tool fails refuses with the tool's error -----------------------------------

# Each API path the VM table reads, failing as Proxmox fails (pmxcfs down, a config that does not parse, a lock).
API_FAILURES = [{"/nodes/kpro5/qemu": "ipcc_send_rec[1] failed: Connection refused"},
                {"/nodes/kpro5/qemu/101/config": "unable to parse value of 'hostpci0' - format error"},
                {"/cluster/mapping/pci": "cfs-lock 'file-mapping_pci' error: got lock request timeout"}]


@pytest.mark.parametrize("failing", API_FAILURES, ids=["list", "config", "mapping"])
def test_a_failing_api_read_refuses_with_its_error_and_the_probe_says_so(tmp_path, failing):
    t = seed_kpro5(tmp_path / "kpro5")
    configure(t, pvesh_fail=failing)
    unit = vfio()
    (message,) = failing.values()
    refused(t, unit.ensure, message)
    assert message in probe(t, unit)[f"running VM with {A6000}"]


@pytest.fixture(scope="module")
def with_driver(tmp_path_factory) -> Path:
    """The seed after vfio-binding and the driver: the A6000s on nvidia."""
    root = tmp_path_factory.mktemp("driver")
    t = seed_kpro5(root / "kpro5")
    run_file = root / f"NVIDIA-Linux-x86_64-{VERSION}.run"
    v = values()
    v["nvidia"].update(url=f"file://{run_file}", sha256=make_fake_run(run_file, VERSION))
    config = validate_stack(v, KPRO5_SECRETS)
    applied(t, plan_vfio_binding(config).ensure)
    applied(t, plan_nvidia_driver(config, ()).ensure)
    return t


@pytest.fixture
def driver_host(with_driver, tmp_path) -> Path:
    subprocess.run(["cp", "-a", str(with_driver), str(tmp_path / "kpro5")], check=True)
    return tmp_path / "kpro5"


def a6000_to_vfio() -> dict:
    v = values()
    v["gpus"][3] = {"address": "0000:61:00.0", "model": "RTX A6000", "use": "vfio"}
    return v


TOOL_FAILURES = [  # (setting, value, what the refusal must carry)
    ("nvidia_smi_fail", "smi-i-missing", "No devices were found"),
    ("nvidia_smi_fail", "smi-bad-field", 'is not a valid field to query'),
    ("fuser_fail", "Cannot stat file /proc/2117/fd/4: Permission denied", "Cannot stat file /proc/2117/fd/4"),
]


@pytest.mark.parametrize("knob, value, words", TOOL_FAILURES, ids=["smi-no-device", "smi-bad-field", "fuser"])
def test_a_failing_gpu_check_refuses_with_the_tools_error(driver_host, knob, value, words):
    configure(driver_host, **{knob: value})
    refused(driver_host, vfio(a6000_to_vfio()).ensure, words)


def test_the_driver_upgrade_refuses_when_fuser_fails(driver_host, tmp_path):
    newer = "580.159.04"
    v = values()
    run_file = tmp_path / f"NVIDIA-Linux-x86_64-{newer}.run"
    v["nvidia"].update(version=newer, url=f"file://{run_file}", sha256=make_fake_run(run_file, newer))
    configure(driver_host, fuser_fail="Cannot stat file /proc/2117/fd/4: Permission denied")
    refused(driver_host, plan_nvidia_driver(validate_stack(v, KPRO5_SECRETS), ()).ensure,
            "fuser -s failed (status 1): Cannot stat file /proc/2117/fd/4")


# ---- D8: /etc/kernel/cmdline is its first line ------------------------------------------------------------

def test_only_the_first_line_of_the_kernel_cmdline_is_read_and_rewritten(tmp_path):
    t = seed_kpro5(tmp_path / "kpro5")
    (t / "etc/kernel/cmdline").write_text("root=ZFS=rpool/ROOT/pve-1 boot=zfs\n# kept: notes of the admin\n")
    applied(t, vfio().ensure)
    assert (t / "etc/kernel/cmdline").read_text() == \
        "root=ZFS=rpool/ROOT/pve-1 boot=zfs iommu=pt\n# kept: notes of the admin\n"
    entry = (t / "boot/loader/entries/proxmox-6.8.12-4-pve.conf").read_text()
    assert "options  root=ZFS=rpool/ROOT/pve-1 boot=zfs iommu=pt\n" in entry
    assert probe(t, vfio())["kernel argument iommu=pt"] == "present"


def test_a_kernel_cmdline_without_root_refuses_before_any_change(tmp_path):
    t = seed_kpro5(tmp_path / "kpro5")
    (t / "etc/kernel/cmdline").write_text("quiet\nroot=ZFS=rpool/ROOT/pve-1 boot=zfs\n")
    refused(t, vfio().ensure, "the first line of /etc/kernel/cmdline has no root=")


# ---- D3: GRUB_CMDLINE_LINUX_DEFAULT as update-grub reads it -----------------------------------------------

GRUB = [  # (fixture for /etc/default/grub, a grub.d file, the line after ensure, or the refusal)
    ("trailing-comment.grub", None, 'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash iommu=pt"  # set by hand, keep splash'),
    ("trailing-blank.grub", None, 'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash iommu=pt" '),
    ("single-quotes.grub", None, "GRUB_CMDLINE_LINUX_DEFAULT='quiet splash iommu=pt'"),
    ("unquoted.grub", None, 'GRUB_CMDLINE_LINUX_DEFAULT="quiet iommu=pt"'),
    ("exported.grub", None, 'export GRUB_CMDLINE_LINUX_DEFAULT="quiet splash iommu=pt"'),
    ("trailing-comment.grub", "override.cfg", 'GRUB_CMDLINE_LINUX_DEFAULT="console=ttyS0,115200 quiet iommu=pt"'),
    ("command-substitution.grub", None, "refused: /etc/default/grub line 9"),
    ("continued.grub", None, "refused: /etc/default/grub line 9"),
    ("unquoted.grub", "appending.cfg", "refused: /etc/default/grub.d/appending.cfg line 1"),
]


@pytest.mark.parametrize("grub, dropin, expected", GRUB, ids=[f"{g}+{d}" if d else g for g, d, _ in GRUB])
def test_grub_arguments_are_read_and_rewritten_where_update_grub_takes_them(tmp_path, grub, dropin, expected):
    t = seed_kpro5(tmp_path / "kpro5", bootloader="grub")
    (t / "etc/default/grub").write_text((FIXTURES / "grub" / grub).read_text())
    edited = "etc/default/grub"
    if dropin:
        edited = f"etc/default/grub.d/{dropin}"
        (t / edited).write_text((FIXTURES / "grub" / dropin).read_text())
    subprocess.run(["update-grub"], env=host_env(t), check=True, capture_output=True)
    start = tree_digest(t)
    unit = vfio(values("grub"))
    if expected.startswith("refused: "):
        refused(t, unit.ensure, expected.removeprefix("refused: "))
        assert probe(t, unit)["kernel argument iommu=pt"].startswith("unreadable: ")
        return
    before = {p: (t / p).read_text() for p in ("etc/default/grub", edited)}
    applied(t, unit.ensure)
    after = (t / edited).read_text().splitlines()
    assert expected in after
    # everything else of the file as it was
    assert [line for line in after if line != expected] == \
        [line for line in before[edited].splitlines() if "GRUB_CMDLINE_LINUX_DEFAULT" not in line or line.lstrip().startswith("#")]
    if dropin:
        assert (t / "etc/default/grub").read_text() == before["etc/default/grub"]
    assert "iommu=pt" in (t / "boot/grub/grub.cfg").read_text()
    assert probe(t, unit)["kernel argument iommu=pt"] == "present"
    applied(t, unit.teardown)
    if grub == "unquoted.grub":
        # a bare word that had to take quotes keeps them: the same value for the shell, not the same bytes
        assert 'GRUB_CMDLINE_LINUX_DEFAULT="quiet"' in (t / edited).read_text().splitlines()
    else:
        assert tree_digest(t) == start
