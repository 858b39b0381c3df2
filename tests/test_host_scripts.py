"""The rendered scripts, executed against a simulated kpro5 (tests/fakehost): converge, idempotence, teardown, refusals.

The start state is the seed's: all four GPUs on vfio-pci through a hand-made `options vfio-pci ids=…`, no NVIDIA
driver, CT 129 running without GPUs, VM 101 running with the first RTX 3090.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from components.proxmox_host import plan_host
from conftest import KPRO5_SECRETS, kpro5_values
from fakehost import host_env
from fakehost import kernel
from fakehost.installer import make_fake_run
from fakehost.tree import seed_kpro5
from fakehost.view import HostView
from gpuhosts.config import validate_stack
from gpuhosts.render import Step

VERSION = "580.126.09"
A6000 = ("0000:41:00.0", "0000:61:00.0")
RTX3090_FUNCTIONS = ("0000:01:00.0", "0000:01:00.1", "0000:21:00.0", "0000:21:00.1")


@dataclass
class Host(HostView):
    tree: Path
    run_file: Path
    sha256: str

    def values(self) -> dict:
        values = kpro5_values()
        values["nvidia"].update(url=f"file://{self.run_file}", sha256=self.sha256)
        # The host's own units; the services of its container are exercised in test_service_scripts.py.
        values.pop("services")
        return values

    def steps(self, values: dict | None = None) -> list[Step]:
        return plan_host(validate_stack(values or self.values(), KPRO5_SECRETS)).steps

    def run(self, script: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=host_env(self.tree),
                              timeout=120)

    def apply(self, step: Step, operation: str = "create") -> str:
        result = self.run(getattr(step, operation))
        assert result.returncode == 0, f"{step.name} {operation} failed:\n{result.stdout}\n{result.stderr}"
        return result.stdout

    def up(self, values: dict | None = None) -> dict[str, str]:
        return {step.name: self.apply(step) for step in self.steps(values)}

    def destroy(self, values: dict | None = None) -> dict[str, str]:
        return {step.name: self.apply(step, "delete") for step in reversed(self.steps(values))}

    def smi_in_container(self, vmid: int = 129) -> subprocess.CompletedProcess:
        return subprocess.run(["pct", "exec", str(vmid), "--", "nvidia-smi", "--query-gpu=pci.bus_id,driver_version",
                               "--format=csv,noheader"], capture_output=True, text=True, env=host_env(self.tree))


@pytest.fixture
def host(tmp_path) -> Host:
    tree = seed_kpro5(tmp_path / "kpro5")
    run_file = tmp_path / f"NVIDIA-Linux-x86_64-{VERSION}.run"
    sha256 = make_fake_run(run_file, VERSION)
    return Host(tree, run_file, sha256)


@pytest.fixture(scope="module")
def converged_template(tmp_path_factory) -> tuple[Host, str, str]:
    """One converge from the seed, shared by the tests that start where it ends: (host, start digest, after up)."""
    root = tmp_path_factory.mktemp("converged")
    tree = seed_kpro5(root / "kpro5")
    run_file = root / f"NVIDIA-Linux-x86_64-{VERSION}.run"
    host = Host(tree, run_file, make_fake_run(run_file, VERSION))
    start = host.digest()
    host.up()
    return host, start, host.digest()


@pytest.fixture
def converged(converged_template, tmp_path) -> Host:
    """A private copy of the converged kpro5, so each test may change it."""
    template, _start, _after = converged_template
    shutil.copytree(template.tree, tmp_path / "kpro5", symlinks=True)
    return Host(tmp_path / "kpro5", template.run_file, template.sha256)


def test_up_from_the_seed_reaches_the_kpro5_state(host):
    outputs = host.up()
    for function in RTX3090_FUNCTIONS:
        assert host.driver(function) == "vfio-pci", function
    for address in A6000:
        assert host.driver(address) == "nvidia", address
    assert host.text("/sys/module/nvidia/version").strip() == VERSION

    minors = {a: host.minor(a) for a in A6000}
    assert sorted(host.container_devices()) == sorted(
        [f"/dev/nvidia{m}" for m in minors.values()] + ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"])
    assert (host.tree / "var/lib/lxc/129/rootfs/usr/lib/x86_64-linux-gnu" / f"libnvidia-ml.so.{VERSION}").exists()
    smi = host.smi_in_container()
    assert smi.returncode == 0, smi.stderr
    assert sorted(smi.stdout.split()) == sorted(["00000000:41:00.0,", "00000000:61:00.0,", VERSION, VERSION])

    assert "iommu=pt" in host.text("/etc/kernel/cmdline")
    assert host.text("/etc/modprobe.d/vfio.conf").startswith("# gpuhosts: vfio-pci binds by PCI address now")
    assert "blacklist nouveau" in host.text("/etc/modprobe.d/gpuhosts-nouveau.conf")
    assert all(out.rstrip().endswith("done: changed") for out in outputs.values()), outputs
    assert "reboot required" in outputs["kpro5-vfio-binding"]


def test_second_up_changes_nothing(converged):
    before = converged.digest()
    outputs = converged.up()
    assert all(out.rstrip().endswith("done: no change") for out in outputs.values()), outputs
    assert converged.digest() == before


def test_the_copied_host_is_the_converged_one(converged_template, converged):
    _template, start, after = converged_template
    assert converged.digest() == after != start


def test_destroy_restores_the_start_keeps_the_container_disk_and_is_harmless_twice(converged_template, converged):
    _template, start, _after = converged_template
    model = converged.tree / "var/lib/lxc/129/rootfs/srv/models/Qwen3.6-27B/config.json"
    model.parent.mkdir(parents=True, exist_ok=True)
    model.write_text('{"num_hidden_layers": 64}\n')
    converged.destroy()
    assert model.read_text() == '{"num_hidden_layers": 64}\n'
    model.unlink()
    model.parent.rmdir()
    assert converged.digest() == start
    for function in RTX3090_FUNCTIONS + A6000:
        assert converged.driver(function) == "vfio-pci", function

    outputs = converged.destroy()
    assert all(out.rstrip().endswith("done: no change") for out in outputs.values()), outputs
    assert converged.digest() == start


def refused(host: Host, step: Step, words: str, operation: str = "create") -> None:
    before = host.digest()
    result = host.run(getattr(step, operation))
    assert result.returncode != 0, f"{step.name} should refuse:\n{result.stdout}"
    assert "refused:" in result.stderr and words in result.stderr, result.stderr
    assert host.digest() == before, f"{step.name} changed the host while refusing"


def step_named(steps: list[Step], suffix: str) -> Step:
    return next(s for s in steps if s.name.endswith(suffix))


def test_refuses_to_take_a_gpu_from_a_running_vm(tmp_path):
    tree = seed_kpro5(tmp_path / "kpro5", vms=((101, "win-3090", "0000:01:00", True), (103, "a6000-vm", "0000:41:00", True)))
    run_file = tmp_path / f"NVIDIA-Linux-x86_64-{VERSION}.run"
    host = Host(tree, run_file, make_fake_run(run_file, VERSION))
    refused(host, step_named(host.steps(), "vfio-binding"), "VM 103 is running with 0000:41:00 passed through")


def moved_to_vfio(host: Host) -> dict:
    values = host.values()
    values["gpus"][3] = {"address": "0000:61:00.0", "model": "RTX A6000", "use": "vfio"}
    return values


def test_refuses_to_unbind_a_gpu_a_process_holds(converged):
    host = converged
    minor = host.minor("0000:61:00.0")
    kernel.hold(host.tree, f"/dev/nvidia{minor}", command="python3", compute=True, container=129)
    refused(host, step_named(host.steps(moved_to_vfio(host)), "vfio-binding"), "holds /dev/nvidia")


def test_refuses_to_unbind_a_gpu_persistence_mode_keeps(converged, tmp_path):
    host = converged
    kernel.set_persistence(host.tree, "0000:61:00.0", "Enabled")
    # A daemon that turns persistence straight back on: `nvidia-smi -pm 0` does not stick.
    sticky = tmp_path / "sticky-bin"
    sticky.mkdir()
    real = subprocess.run(["bash", "-c", "command -v nvidia-smi"], capture_output=True, text=True,
                          env=host_env(host.tree)).stdout.strip()
    (sticky / "nvidia-smi").write_text(f'#!/bin/bash\nfor a in "$@"; do [ "$a" = -pm ] && exit 0; done\nexec {real} "$@"\n')
    (sticky / "nvidia-smi").chmod(0o755)
    step = step_named(host.steps(moved_to_vfio(host)), "vfio-binding")
    before = host.digest()
    env = host_env(host.tree)
    env["PATH"] = f"{sticky}:{env['PATH']}"
    result = subprocess.run(["bash", "-c", step.create], capture_output=True, text=True, env=env)
    assert result.returncode != 0, result.stdout
    assert 'persistence mode holds GPU 0000:61:00.0 and stays on: run "nvidia-smi -i 0000:61:00.0 -pm 0"' in result.stderr
    assert host.digest() == before


def test_persistence_that_can_be_released_is_released_and_the_gpu_moves(converged):
    host = converged
    kernel.set_persistence(host.tree, "0000:61:00.0", "Enabled")
    values = moved_to_vfio(host)
    for step in host.steps(values):
        host.apply(step)
    assert host.driver("0000:61:00.0") == "vfio-pci" and host.driver("0000:61:00.1") == "vfio-pci"
    assert host.driver("0000:41:00.0") == "nvidia"
    assert "/dev/nvidia-uvm" in host.container_devices()
    assert len([d for d in host.container_devices() if d[len("/dev/nvidia"):].isdigit()]) == 1


def older_driver(host: Host, version: str = "570.148.08") -> dict:
    values = host.values()
    run_file = host.run_file.with_name(f"NVIDIA-Linux-x86_64-{version}.run")
    values["nvidia"].update(version=version, url=f"file://{run_file}", sha256=make_fake_run(run_file, version))
    return values


def test_a_new_driver_version_upgrades_host_and_container_together(host):
    host.up(older_driver(host))
    assert host.text("/sys/module/nvidia/version").strip() == "570.148.08"
    host.up()
    assert host.text("/sys/module/nvidia/version").strip() == VERSION
    smi = host.smi_in_container()
    assert smi.returncode == 0 and smi.stdout.count(VERSION) == 2, smi.stdout + smi.stderr


def test_driver_upgrade_refused_while_a_gpu_is_in_use(host):
    host.up(older_driver(host))
    minor = host.minor("0000:41:00.0")
    kernel.hold(host.tree, f"/dev/nvidia{minor}", command="sglang", compute=True, container=129)
    refused(host, step_named(host.steps(), "nvidia-driver"), "is loaded and in use")


def test_container_user_space_refused_when_the_host_module_differs(host):
    host.up(older_driver(host))
    refused(host, step_named(host.steps(), "ct129-nvidia-userspace"), "Driver/library version mismatch")


def test_container_devices_refused_without_nvidia_uvm(host):
    steps = host.steps()
    for step in steps[:2]:
        host.apply(step)
    refused(host, step_named(steps, "ct129-gpu-devices"), "/dev/nvidia-uvm is missing")


def test_grub_host_gets_the_kernel_arguments_and_gets_them_back(tmp_path):
    tree = seed_kpro5(tmp_path / "kpro5", bootloader="grub")
    run_file = tmp_path / f"NVIDIA-Linux-x86_64-{VERSION}.run"
    host = Host(tree, run_file, make_fake_run(run_file, VERSION))
    values = host.values()
    values["host"].update(bootloader="grub", kernelArgs=["iommu=pt", "intel_iommu=on"])
    start = host.digest()
    host.up(values)
    assert 'GRUB_CMDLINE_LINUX_DEFAULT="quiet iommu=pt intel_iommu=on"' in host.text("/etc/default/grub")
    assert "iommu=pt intel_iommu=on" in host.text("/boot/grub/grub.cfg")
    host.destroy(values)
    assert host.digest() == start


def test_the_kpro5_state_survives_a_reboot(converged):
    """The boot-time half: modprobe.d hook and softdeps, modules-load.d, the uvm unit, onboot guests."""
    boot = subprocess.run(["reboot"], capture_output=True, text=True, env=host_env(converged.tree))
    assert boot.returncode == 0, boot.stderr
    for function in RTX3090_FUNCTIONS:
        assert converged.driver(function) == "vfio-pci", function
    for address in A6000:
        assert converged.driver(address) == "nvidia", address
    assert (converged.tree / "dev/nvidia-uvm").exists()
    assert not (converged.tree / "run/gpuhosts/reboot-required").exists()
    smi = converged.smi_in_container()
    assert smi.returncode == 0 and smi.stdout.count(VERSION) == 2, smi.stdout + smi.stderr
    outputs = converged.up()
    assert all(out.rstrip().endswith("done: no change") for out in outputs.values()), outputs


def test_refuses_to_take_a_gpu_from_a_running_vm_through_a_resource_mapping(tmp_path):
    tree = seed_kpro5(tmp_path / "kpro5", vms=((101, "win-3090", "0000:01:00", True),
                                               (104, "mapped-a6000", "0000:21:00.0", True)))
    conf = tree / "etc/pve/qemu-server/104.conf"
    conf.write_text(conf.read_text().replace("hostpci0: 0000:21:00.0", "hostpci0: mapping=a6000-pool"))
    hostname = subprocess.run(["hostname"], capture_output=True, text=True, env=host_env(tree)).stdout.strip()
    mapping = tree / "etc/pve/mapping/pci.cfg"
    mapping.parent.mkdir(parents=True, exist_ok=True)
    mapping.write_text("a6000-pool\n"
                       "\tmap id=10de:2230,iommu-group=40,node=another-node,path=0000:81:00\n"
                       f"\tmap id=10de:2230,iommu-group=41,node={hostname},path=0000:61:00\n")
    run_file = tmp_path / f"NVIDIA-Linux-x86_64-{VERSION}.run"
    host = Host(tree, run_file, make_fake_run(run_file, VERSION))
    refused(host, step_named(host.steps(), "vfio-binding"), "VM 104 is running with 0000:61:00 passed through")


@pytest.mark.parametrize("owed, running, says", [
    ("ct-129-start", False, "started container 129 again (a restart of it was cut off)"),
    ("ct-129-restart", True, "restarted container 129 so it sees its GPU devices"),
])
def test_a_container_restart_cut_off_is_finished_by_the_next_run(converged, owed, running, says):
    """A connection lost between `pct set devN` and the restart, or inside `pct reboot` between stop and start."""
    devices = next(s for s in converged.steps() if s.name == "kpro5-ct129-gpu-devices")
    if not running:
        assert converged.run("pct stop 129").returncode == 0
    (converged.tree / f"var/lib/gpuhosts/{owed}.owed").touch()
    output = converged.apply(devices)
    assert says in output and "done: changed" in output
    assert converged.run("pct status 129").stdout.strip() == "status: running"
    assert not list((converged.tree / "var/lib/gpuhosts").glob("*.owed"))
    assert "done: no change" in converged.apply(devices)
