"""The rendered scripts, executed against a simulated kpro5 (tests/fakehost): converge, idempotence, teardown, refusals.

The start state is the seed's: all four GPUs on vfio-pci through a hand-made `options vfio-pci ids=…`, no NVIDIA
driver, CT 129 running without GPUs, VM 101 running with the first RTX 3090.
"""

from __future__ import annotations

import subprocess

import pytest

from conftest import KPRO5_SECRETS, kpro5_values
from fakehost import host_env, kernel
from fakehost.installer import make_fake_run
from fakehost.tree import seed_kpro5
from gpuhosts.plans.proxmox_host import plan_host
from gpuhosts.protocol import parse_result
from gpuhosts.provider import OBSERVATION
from gpuhosts.stacks import validate_stack
from simhost import A6000, RTX3090_FUNCTIONS, VERSION, Host, older_driver, refused


def test_up_from_the_seed_reaches_the_kpro5_state(host):
    outputs = host.up()
    for function in RTX3090_FUNCTIONS:
        assert host.driver(function) == "vfio-pci", function
    for address in A6000:
        assert host.driver(address) == "nvidia", address
    assert host.text("/sys/module/nvidia/version").strip() == VERSION

    minors = {a: host.minor(a) for a in A6000}
    assert sorted(host.container_devices()) == sorted(
        [f"/dev/nvidia{m}" for m in minors.values()] + ["/dev/nvidiactl", "/dev/nvidia-uvm"])
    assert (host.tree / "var/lib/lxc/129/rootfs/usr/lib/x86_64-linux-gnu" / f"libnvidia-ml.so.{VERSION}").exists()
    smi = host.smi_in_container()
    assert smi.returncode == 0, smi.stderr
    assert sorted(smi.stdout.split()) == sorted(["00000000:41:00.0,", "00000000:61:00.0,", VERSION, VERSION])

    assert "iommu=pt" in host.text("/etc/kernel/cmdline")
    assert host.text("/etc/modprobe.d/vfio.conf").startswith("# gpuhosts: vfio-pci binds by PCI address now")
    assert "blacklist nouveau" in host.text("/etc/modprobe.d/gpuhosts-nouveau.conf")
    assert all(parse_result(out).changed for out in outputs.values()), outputs
    assert parse_result(outputs["vfio-binding"]).reboot_required and "reboot required" in outputs["vfio-binding"]
    # Both rebuild the initramfs; nothing a container unit does waits for a reboot.
    assert [k for k, out in outputs.items() if parse_result(out).reboot_required] == ["vfio-binding", "nvidia-driver"]


def test_second_up_changes_nothing(converged):
    before = converged.digest()
    outputs = converged.up()
    assert not any(parse_result(out).changed for out in outputs.values()), outputs
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
    assert not any(parse_result(out).changed for out in outputs.values()), outputs
    assert converged.digest() == start


DEVICES_RECORD = "var/lib/gpuhosts/lxc-129-devices.state"


@pytest.mark.parametrize("record", ["cut to one line", "missing", "naming the user's own entry"])
def test_devices_teardown_reads_the_container_as_it_is_whatever_the_record_says(converged, record):
    """Teardown removes every devN that names a node gpuhosts gives CT 129 (the declared GPUs' /dev/nvidia<minor>,
    /dev/nvidiactl, /dev/nvidia-uvm), found in the container's config: a record cut short or lost leaves none behind,
    and no line of it makes another entry go."""
    (converged.tree / "dev/dri").mkdir()
    (converged.tree / "dev/dri/renderD128").write_text("c 226:128\n")
    result = converged.run("pct set 129 --dev5 /dev/dri/renderD128,gid=104")
    assert result.returncode == 0, result.stderr
    ours = sorted([f"/dev/nvidia{converged.minor(a)}" for a in A6000]
                  + ["/dev/nvidiactl", "/dev/nvidia-uvm"])
    assert sorted(converged.container_devices()) == sorted(ours + ["/dev/dri/renderD128"])
    state = converged.tree / DEVICES_RECORD
    lines = state.read_text().splitlines()
    assert len(lines) == 4, lines
    if record == "cut to one line":
        state.write_text(lines[0] + "\n")
    elif record == "missing":
        state.unlink()
    else:
        state.write_text("\n".join(lines[:1] + ["dev5 /dev/dri/renderD128", "dev9 /dev/sda"]) + "\n")

    output = converged.apply(converged.unit("ct129-gpu-devices"), "teardown")
    assert parse_result(output).changed
    assert converged.container_devices() == ["/dev/dri/renderD128"], converged.text("/etc/pve/lxc/129.conf")
    assert "dev5: /dev/dri/renderD128,gid=104" in converged.text("/etc/pve/lxc/129.conf").splitlines()
    assert sorted(line.split(" (")[1].split(")")[0] for line in output.splitlines() if "removed dev" in line) == ours
    assert not state.exists()
    assert not parse_result(converged.apply(converged.unit("ct129-gpu-devices"), "teardown")).changed


def test_refuses_to_take_a_gpu_from_a_running_vm(tmp_path):
    tree = seed_kpro5(tmp_path / "kpro5", vms=((101, "win-3090", "0000:01:00", True), (103, "a6000-vm", "0000:41:00", True)))
    run_file = tmp_path / f"NVIDIA-Linux-x86_64-{VERSION}.run"
    host = Host(tree, run_file, make_fake_run(run_file, VERSION))
    refused(host, host.unit("vfio-binding"), "VM 103 is running with 0000:41:00 passed through")


def moved_to_vfio(host: Host) -> dict:
    values = host.values()
    values["gpus"][3] = {"address": "0000:61:00.0", "model": "RTX A6000", "use": "vfio"}
    return values


def test_refuses_to_unbind_a_gpu_a_process_holds(converged):
    host = converged
    minor = host.minor("0000:61:00.0")
    kernel.hold(host.tree, f"/dev/nvidia{minor}", command="python3", compute=True, container=129)
    refused(host, host.unit("vfio-binding", moved_to_vfio(host)), "holds /dev/nvidia")


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
    unit = host.unit("vfio-binding", moved_to_vfio(host))
    before = host.digest()
    env = host_env(host.tree)
    env["PATH"] = f"{sticky}:{env['PATH']}"
    result = subprocess.run(["bash", "-c", unit.ensure], capture_output=True, text=True, env=env)
    assert result.returncode != 0, result.stdout
    assert 'persistence mode holds GPU 0000:61:00.0 and stays on: run "nvidia-smi -i 0000:61:00.0 -pm 0"' in result.stderr
    assert host.digest() == before


def test_persistence_that_can_be_released_is_released_and_the_gpu_moves(converged):
    host = converged
    kernel.set_persistence(host.tree, "0000:61:00.0", "Enabled")
    values = moved_to_vfio(host)
    for unit in host.units(values):
        host.apply(unit)
    assert host.driver("0000:61:00.0") == "vfio-pci" and host.driver("0000:61:00.1") == "vfio-pci"
    assert host.driver("0000:41:00.0") == "nvidia"
    assert "/dev/nvidia-uvm" in host.container_devices()
    assert len([d for d in host.container_devices() if d[len("/dev/nvidia"):].isdigit()]) == 1
    for unit in host.units(values):
        assert host.probe(unit) == unit.desired, unit.key


def test_a_new_driver_version_upgrades_host_and_container_together(host):
    host.up(older_driver(host))
    assert host.text("/sys/module/nvidia/version").strip() == "570.148.08"
    host.up()
    assert host.text("/sys/module/nvidia/version").strip() == VERSION
    smi = host.smi_in_container()
    assert smi.returncode == 0 and smi.stdout.count(VERSION) == 2, smi.stdout + smi.stderr
    for key in ("nvidia-driver", "ct129-nvidia-userspace"):
        assert host.probe(host.unit(key)) == host.unit(key).desired, key


def test_driver_upgrade_refused_while_a_gpu_is_in_use(host):
    host.up(older_driver(host))
    minor = host.minor("0000:41:00.0")
    kernel.hold(host.tree, f"/dev/nvidia{minor}", command="sglang", compute=True, container=129)
    refused(host, host.unit("nvidia-driver"), "is loaded and in use")


def test_container_user_space_refused_when_the_host_module_differs(host):
    host.up(older_driver(host))
    refused(host, host.unit("ct129-nvidia-userspace"), "Driver/library version mismatch")


def test_container_devices_refused_without_nvidia_uvm(host):
    units = {u.key: u for u in host.units()}
    for key in ("vfio-binding", "nvidia-driver"):
        host.apply(units[key])
    refused(host, units["ct129-gpu-devices"], "/dev/nvidia-uvm is missing")


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
    vfio = host.unit("vfio-binding", values)
    assert host.probe(vfio) == vfio.desired and vfio.desired["kernel argument intel_iommu=on"] == "present"
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
    for unit in converged.units():
        assert converged.probe(unit) == unit.desired, unit.key
    outputs = converged.up()
    assert not any(parse_result(out).changed for out in outputs.values()), outputs


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
    refused(host, host.unit("vfio-binding"), "VM 104 is running with 0000:61:00 passed through")


@pytest.mark.parametrize("owed, running, says", [
    ("ct-129-start", False, "started container 129 again (a restart of it was cut off)"),
    ("ct-129-restart", True, "restarted container 129 so it sees its GPU devices"),
])
def test_a_container_restart_cut_off_is_finished_by_the_next_run(converged, owed, running, says):
    """A connection lost between `pct set devN` and the restart, or inside `pct reboot` between stop and start."""
    devices = converged.unit("ct129-gpu-devices")
    if not running:
        assert converged.run("pct stop 129").returncode == 0
    (converged.tree / f"var/lib/gpuhosts/{owed}.owed").touch()
    output = converged.apply(devices)
    assert says in output and parse_result(output).changed
    assert converged.run("pct status 129").stdout.strip() == "status: running"
    assert not list((converged.tree / "var/lib/gpuhosts").glob("*.owed"))
    assert not parse_result(converged.apply(devices)).changed
    assert converged.probe(devices) == devices.desired


def host_unit_keys() -> list[str]:
    values = kpro5_values()
    values.pop("services")
    values.pop("benchmarks", None)  # a benchmark compares services: none without them
    return [unit.key for unit in plan_host(validate_stack(values, KPRO5_SECRETS))]


@pytest.mark.parametrize("key", host_unit_keys())
def test_after_up_the_probe_reports_the_desired_facts_and_changes_nothing(converged, key):
    unit = converged.unit(key)
    assert unit.desired, f"{key} declares no fact"
    assert converged.probe(unit) == unit.desired


@pytest.mark.parametrize("key", host_unit_keys())
def test_on_the_seed_the_probe_reports_drift_in_the_same_facts(host, key):
    unit = host.unit(key)
    observed = host.probe(unit)
    assert set(observed) == set(unit.desired)
    assert observed != unit.desired, f"{key} reads as in sync on the seed"


# Drift made by hand on a converged host: the one fact it touches, what the probe then reads, and whether the
# unit's ensure repairs it (a stopped container is refused: starting one is the operator's decision).
DRIFT = [
    ("nvidia-driver", "rm $r/etc/modprobe.d/gpuhosts-nouveau.conf",
     "file /etc/modprobe.d/gpuhosts-nouveau.conf", "missing", True),
    ("nvidia-driver", "systemctl stop gpuhosts-nvidia-persistenced.service",
     "systemd gpuhosts-nvidia-persistenced.service", "enabled inactive", True),
    ("vfio-binding", "sed -i 's/ iommu=pt//' $r/etc/kernel/cmdline", "kernel argument iommu=pt", "absent", True),
    ("vfio-binding", "rm $r/etc/modules-load.d/gpuhosts-vfio.conf", "file /etc/modules-load.d/gpuhosts-vfio.conf",
     "missing", True),
    ("nvidia-uvm-at-boot", "rm $r/dev/nvidia-uvm-tools", "node /dev/nvidia-uvm-tools", "missing", True),
    ("ct129-gpu-devices", r"sed -i '/^dev[0-9]*: \/dev\/nvidiactl/d' $r/etc/pve/lxc/129.conf",
     "device /dev/nvidiactl", "absent", True),
    ("ct129-nvidia-userspace", "pct stop 129", "user space in ct129", "container 129 stopped", False),
]

# Facts a drift changes beside the one it touches: a stopped nvidia-persistenced leaves persistence mode off on the
# GPUs it held (the daemon keeps it on only while it runs: nvidia-persistenced's README, "Persistence Mode").
ALSO_DRIFTED = {
    "systemctl stop gpuhosts-nvidia-persistenced.service":
        {"persistence mode 0000:41:00.0": "Disabled", "persistence mode 0000:61:00.0": "Disabled"},
}


@pytest.mark.parametrize("key, drift, fact, observed, repaired", DRIFT,
                         ids=[f"{key}: {fact}" for key, _, fact, _, _ in DRIFT])
def test_the_probe_names_hand_made_drift_and_ensure_repairs_it(converged, key, drift, fact, observed, repaired):
    unit = converged.unit(key)
    made = converged.run(f"set -e\nr=$GPUHOSTS_HOST_ROOT\n{drift}")
    assert made.returncode == 0, made.stderr
    facts = converged.probe(unit)
    assert {name: value for name, value in facts.items() if unit.desired.get(name) != value} == {
        fact: observed, **ALSO_DRIFTED.get(drift, {})}
    if repaired:
        assert parse_result(converged.apply(unit)).changed
        assert converged.probe(unit) == unit.desired


def test_the_devices_probe_reports_what_the_driver_chose_as_observations(converged):
    """Minors and dynamic majors are the host driver's choice: reported for the record, never desired."""
    unit = converged.unit("ct129-gpu-devices")
    reported = converged.probe_output(unit)
    observed = {k[len(OBSERVATION):]: v for k, v in reported.items() if k.startswith(OBSERVATION)}
    majors = dict(line.split()[::-1] for line in converged.text("/proc/devices").splitlines()
                  if len(line.split()) == 2 and line.split()[0].isdigit())
    assert observed == {**{f"minor of {a}": converged.minor(a) for a in A6000},
                        "major of nvidia-uvm": majors["nvidia-uvm"], "major of nvidia-caps": majors["nvidia-caps"]}
    # Everything else the probe reports is a declared fact.
    assert {k for k in reported if not k.startswith(OBSERVATION)} == set(unit.desired)


def test_the_profiling_node_is_given_only_when_asked_and_taken_back_after(converged):
    """/dev/nvidia-uvm-tools lets a container's processes trace the GPU's memory traffic (CUDA profilers use it):
    passed only with profilingDevice, and an entry of gpuhosts' own goes once the stack no longer asks for it."""
    values = converged.values()
    values["containers"][0]["profilingDevice"] = True
    devices = converged.unit("ct129-gpu-devices", values)
    converged.apply(devices)
    assert "/dev/nvidia-uvm-tools" in converged.container_devices()
    assert converged.probe(devices) == devices.desired
    without = converged.unit("ct129-gpu-devices")
    assert converged.probe(without)["device /dev/nvidia-uvm-tools"] == "passed"
    output = converged.apply(without)
    assert "removed" in output and "/dev/nvidia-uvm-tools" in output, output
    converged.run("pct reboot 129")
    assert "/dev/nvidia-uvm-tools" not in converged.container_devices()
    assert converged.probe(without) == without.desired


def test_a_profiling_node_passed_by_hand_is_named_not_taken(converged):
    result = converged.run("pct set 129 --dev7 /dev/nvidia-uvm-tools")
    assert result.returncode == 0, result.stderr
    devices = converged.unit("ct129-gpu-devices")
    assert converged.probe(devices)["device /dev/nvidia-uvm-tools"] == "passed"
    refused(converged, devices, "has /dev/nvidia-uvm-tools as dev7, which gpuhosts did not give")
    assert "/dev/nvidia-uvm-tools" in converged.container_devices()


def test_a_privileged_container_gets_gpus_only_where_the_stack_says_so(converged):
    """CT 129 is privileged in the seed (unprivileged: 0): its root is the host's root. Before, nothing said so."""
    values = converged.values()
    values["containers"][0].pop("privileged")
    devices = converged.unit("ct129-gpu-devices", values)
    assert converged.probe(devices)["privileged"] == "yes"
    refused(converged, devices, "container 129 is privileged (unprivileged: 0)")
    declared = converged.unit("ct129-gpu-devices")
    assert converged.probe(declared)["privileged"] == "yes, declared"
