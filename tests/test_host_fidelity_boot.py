"""Device nodes at boot: the kernel makes no NVIDIA node, nvidia-modprobe makes exactly those it is asked for, the
boot starts what systemd orders before pve-guests.service ahead of the guests, and gpuhosts' boot unit gives an
onboot container every node it was given (docs/fakehost-contract.md, "Device nodes and the boot order")."""

from __future__ import annotations

import subprocess

import pytest

from fakehost import host_env, systemd
from simhost import A6000

NODE_UNIT = "gpuhosts-nvidia-uvm.service"
PERSISTENCED = "gpuhosts-nvidia-persistenced.service"
UVM_MAJOR = 509  # seed_kpro5's default


def nodes(host) -> dict[str, str]:
    return {p.name: p.read_text().strip() for p in sorted((host.tree / "dev").glob("nvidia*")) if p.is_file()}


def reboot(tree) -> None:
    result = subprocess.run(["reboot"], env=host_env(tree), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def boot_log(host) -> str:
    return host.text("/run/fakehost/boot.log")


def ct_running(host, vmid: int = 129) -> bool:
    return (host.tree / f"run/lxc/{vmid}.running").exists()


def test_after_a_reboot_the_onboot_container_starts_with_every_node_it_was_given(converged):
    reboot(converged.tree)
    assert boot_log(converged) == ""
    assert ct_running(converged)
    given = set(converged.container_devices())
    assert {f"/dev/nvidia{converged.minor(a)}" for a in A6000} | {"/dev/nvidiactl", "/dev/nvidia-uvm"} <= given
    # the profiling node only where a container asks for it (profilingDevice)
    assert "/dev/nvidia-uvm-tools" not in given
    assert {f"/dev/{name}" for name in nodes(converged)} >= given


# What a boot gives the container when a unit is missing or is what gpuhosts rendered before the node unit:
# (how the host differs from the converged one, whether CT 129 starts, what the boot log names).
OLD_NODE_UNIT = """[Unit]
After=systemd-modules-load.service
Before=pve-guests.service
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/bin/nvidia-modprobe -u -c=0
[Install]
WantedBy=multi-user.target
"""
OLD_PERSISTENCED = """[Unit]
After=systemd-modules-load.service
[Service]
Type=forking
ExecStart=/usr/bin/nvidia-persistenced --persistence-mode
[Install]
WantedBy=multi-user.target
"""
BOOTS = [
    ("as converged", {}, [], True, ""),
    ("node unit disabled", {}, [NODE_UNIT], False, "CT 129: Device /dev/nvidia-uvm does not exist"),
    ("the uvm-only unit and an unordered daemon", {NODE_UNIT: OLD_NODE_UNIT, PERSISTENCED: OLD_PERSISTENCED}, [],
     False, "CT 129: Device /dev/nvidia"),
    ("both gpuhosts units disabled", {}, [NODE_UNIT, PERSISTENCED], False, "CT 129: Device /dev/nvidia"),
]


@pytest.mark.parametrize("case, units, disabled, starts, logged", BOOTS, ids=[b[0] for b in BOOTS])
def test_an_onboot_container_starts_only_when_its_nodes_are_made_before_the_guests(converged, case, units, disabled,
                                                                                   starts, logged):
    for name, text in units.items():
        (converged.tree / "etc/systemd/system" / name).write_text(text)
    for name in disabled:
        systemd.disable(converged.tree, name, quiet=True)
    reboot(converged.tree)
    assert ct_running(converged) is starts
    assert logged in boot_log(converged)
    if not starts:
        assert "does not exist" in boot_log(converged)


def test_the_kernel_makes_no_node_only_nvidia_modprobe_does(converged):
    for name in (NODE_UNIT, PERSISTENCED):
        systemd.disable(converged.tree, name, quiet=True)
    reboot(converged.tree)
    assert converged.driver(A6000[0]) == "nvidia" and (converged.tree / "sys/module/nvidia").is_dir()
    assert nodes(converged) == {}


# nvidia-modprobe's argv -> (exit status, the nodes it leaves), on a host whose driver is loaded and which has no
# node yet (nvidia-modprobe.c main at 580.126.09).
MODPROBE = [
    ([], 0, {}),
    (["-c=0"], 0, {"nvidia0": "c 195:0"}),
    (["-c=255"], 0, {"nvidiactl": "c 195:255"}),
    (["-c", "1", "--create-nvidia-device-file=3"], 0, {"nvidia1": "c 195:1", "nvidia3": "c 195:3"}),
    (["-u", "-c=0"], 0, {"nvidia-uvm": f"c {UVM_MAJOR}:0", "nvidia-uvm-tools": f"c {UVM_MAJOR}:1"}),
    (["-u"], 0, {}),
    (["-c=256"], 1, {}),
]


@pytest.mark.parametrize("argv, rc, made", MODPROBE, ids=[" ".join(m[0]) or "no options" for m in MODPROBE])
def test_nvidia_modprobe_makes_exactly_the_nodes_it_is_asked_for(converged, argv, rc, made):
    for name in (NODE_UNIT, PERSISTENCED):
        systemd.disable(converged.tree, name, quiet=True)
    reboot(converged.tree)
    result = converged.run(" ".join(["nvidia-modprobe", *argv]))
    assert (result.returncode, nodes(converged)) == (rc, made)


def test_a_stale_node_is_made_again_with_the_drivers_number(converged):
    (converged.tree / "dev/nvidia-uvm").write_text("c 222:0\n")
    assert converged.run("nvidia-modprobe -u -c=0").returncode == 0
    assert nodes(converged)["nvidia-uvm"] == f"c {UVM_MAJOR}:0"


# Tools that ask nvidia-modprobe for nodes as root, on a host with no node yet, make the control and GPU nodes.
@pytest.mark.parametrize("command", ["nvidia-smi -L", "nvidia-persistenced"])
def test_nvml_clients_on_the_host_make_the_control_and_gpu_nodes(converged, command):
    for name in (NODE_UNIT, PERSISTENCED):
        systemd.disable(converged.tree, name, quiet=True)
    reboot(converged.tree)
    assert converged.run(command).returncode == 0
    minors = sorted({int(p.read_text().split("Device Minor:")[1].split()[0])
                     for p in (converged.tree / "proc/driver/nvidia/gpus").glob("*/information")})
    assert nodes(converged) == {f"nvidia{m}": f"c 195:{m}" for m in minors} | {"nvidiactl": "c 195:255"}


# The order of a boot: extra unit files enabled on the converged host -> which start before the guests.
ORDERS = [
    ("gpuhosts' units", {}, {NODE_UNIT, PERSISTENCED}),
    ("no ordering: after the guests", {"a-unordered.service": ""}, {NODE_UNIT, PERSISTENCED}),
    ("before, by way of another unit", {"z-first.service": f"Before={NODE_UNIT}"},
     {NODE_UNIT, PERSISTENCED, "z-first.service"}),
    ("after the guests by After=", {"a-late.service": "After=pve-guests.service"}, {NODE_UNIT, PERSISTENCED}),
]


@pytest.mark.parametrize("case, extra, first", ORDERS, ids=[o[0] for o in ORDERS])
def test_the_boot_starts_before_the_guests_only_what_is_ordered_before_them(converged, case, extra, first):
    for name, ordering in extra.items():
        (converged.tree / "etc/systemd/system" / name).write_text(
            f"[Unit]\n{ordering}\n[Service]\nType=oneshot\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n")
        systemd.enable(converged.tree, name, quiet=True)
    enabled = [u for u in systemd.enabled_units(converged.tree)
               if not systemd.is_early(systemd.unit(converged.tree, u))]
    before, after = systemd.boot_order(converged.tree, enabled)
    assert set(before) == first
    assert set(before) | set(after) == set(enabled)
    if "z-first.service" in first:
        assert before.index("z-first.service") < before.index(NODE_UNIT)


def test_an_ordering_cycle_is_refused(converged):
    for name, other in (("x.service", "y.service"), ("y.service", "x.service")):
        (converged.tree / "etc/systemd/system" / name).write_text(
            f"[Unit]\nBefore={other}\n[Service]\nType=oneshot\nExecStart=/bin/true\n")
    with pytest.raises(systemd.Fail, match="ordering cycle"):
        systemd.boot_order(converged.tree, ["x.service", "y.service"])


# Nodes gone on a converged host: what the boot unit's probe then reads, and its ensure makes them again.
def drifts(host):
    minor = host.minor(A6000[0])
    return [
        (f"rm $r/dev/nvidia{minor}", f"node of GPU {A6000[0]}", f"missing /dev/nvidia{minor}"),
        ("rm $r/dev/nvidiactl", "node /dev/nvidiactl", "missing"),
        ("rm $r/dev/nvidia-uvm", "node /dev/nvidia-uvm", "missing"),
    ]


@pytest.mark.parametrize("row", range(3), ids=["GPU node", "control node", "uvm node"])
def test_the_boot_units_probe_names_a_missing_node_and_ensure_makes_it_again(converged, row):
    drift, fact, observed = drifts(converged)[row]
    unit = converged.unit("nvidia-uvm-at-boot")
    assert converged.run(f"set -e\nr=$GPUHOSTS_HOST_ROOT\n{drift}").returncode == 0
    facts = converged.probe(unit)
    assert {k: v for k, v in facts.items() if unit.desired.get(k) != v} == {fact: observed}
    converged.apply(unit)
    assert converged.probe(unit) == unit.desired
