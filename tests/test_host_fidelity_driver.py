"""The driver unit's pre-flight and its reading of DKMS, on a simulated kpro5 whose Proxmox VE release, boot loader,
Secure Boot state and kernels vary (tests/fakehost: pveversion, dpkg-query, proxmox-boot-tool, efivarfs, dkms).

The pre-flight prints what the host runs and refuses, before any change, what the stack cannot do there. After a
kernel update whose DKMS build failed, the unit names the build log instead of promising the next boot every run.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fakehost import host_env, kernel
from fakehost.dkms import install_kernel
from fakehost.installer import make_fake_run
from fakehost.tree import profile_seed, seed_kpro5
from fakehost.util import configure
from gpuhosts.protocol import parse_result
from simhost import VERSION, Host, older_driver, refused

DRIVER = "nvidia-driver"
NEWER_KERNEL = "6.8.12-9-pve"


def make_host(tmp_path: Path, **seed) -> Host:
    """A Proxmox VE 8.3 host unless the case says otherwise (the lines below are that release's), its release not
    declared by the stack: the cases vary the host's release and read what the pre-flight prints of it."""
    tree = seed_kpro5(tmp_path / "kpro5", **{**profile_seed("pve8.3-bookworm"), **seed})
    run_file = tmp_path / f"NVIDIA-Linux-x86_64-{VERSION}.run"
    return Host(tree, run_file, make_fake_run(run_file, VERSION), None)


def no_container_gpus(values: dict) -> dict:
    for gpu in values["gpus"]:
        if gpu["use"] == "container":
            gpu.pop("container")
            gpu["use"] = "host"
    values["containers"] = []
    return values


def grub_stack(values: dict) -> dict:
    values["host"]["bootloader"] = "grub"
    return values


def up_to_driver(host: Host, values: dict | None = None) -> str:
    """The vfio binding (it frees the GPUs meant for nvidia), then the driver unit; the driver's output."""
    host.apply(host.unit("vfio-binding", values))
    return host.apply(host.unit(DRIVER, values))


# What the pre-flight prints on hosts that it lets through: seed settings, stack change, the lines expected.
PREFLIGHT = [
    ("seed", {}, None, [
        "nvidia-driver: pre-flight: Proxmox VE 8.3.0 (pveversion), pve-container 5.2.2, kernel 6.8.12-4-pve",
        "nvidia-driver: pre-flight: boot loader systemd-boot (proxmox-boot-tool status)",
        "nvidia-driver: pre-flight: Secure Boot disabled",
        "nvidia-driver: pre-flight: container devN entries: yes (pve-container >= 5.0.7); "
        "devN hotplug: no (pve-container >= 6.0.4)",
    ]),
    ("grub host, grub stack", {"bootloader": "grub"}, grub_stack, [
        "nvidia-driver: pre-flight: boot loader grub (proxmox-boot-tool status)",
    ]),
    ("VE 9.0 pve-container", {"pve_container_version": "6.0.4"}, None, [
        "nvidia-driver: pre-flight: container devN entries: yes (pve-container >= 5.0.7); "
        "devN hotplug: yes (pve-container >= 6.0.4)",
    ]),
    ("VE 8.0 without container GPUs", {"pve_version": "8.0.4", "pve_container_version": "5.0.4"}, no_container_gpus, [
        "nvidia-driver: pre-flight: Proxmox VE 8.0.4 (pveversion), pve-container 5.0.4, kernel 6.8.12-4-pve",
        "nvidia-driver: pre-flight: container devN entries: no (pve-container >= 5.0.7); "
        "devN hotplug: no (pve-container >= 6.0.4)",
    ]),
]


@pytest.mark.parametrize("seed, change, lines", [row[1:] for row in PREFLIGHT], ids=[row[0] for row in PREFLIGHT])
def test_the_preflight_prints_the_host_before_it_acts(tmp_path, seed, change, lines):
    host = make_host(tmp_path, **seed)
    values = host.values() if change is None else change(host.values())
    output = up_to_driver(host, values).splitlines()
    for line in lines:
        assert line in output, "\n".join(output)
    first_change = next(i for i, line in enumerate(output) if ": changed: " in line)
    assert all(output.index(line) < first_change for line in lines), "\n".join(output)
    # After the build: what DKMS 3.0.10 says about the module for the running kernel.
    assert f"nvidia-driver: DKMS: nvidia/{VERSION}, 6.8.12-4-pve, x86_64: installed" in output


# Stacks the host cannot carry: seed settings, stack change, what the refusal says.
REFUSALS = [
    ("pve-container before devN, GPUs for a container", {"pve_version": "8.0.4", "pve_container_version": "5.0.4"},
     None, "the stack gives GPUs to containers as devN entries, which need pve-container >= 5.0.7 (Proxmox VE 8.1); "
           "this host has 5.0.4"),
    ("systemd-boot stack on a GRUB host", {"bootloader": "grub"}, None,
     "the host boots with grub (proxmox-boot-tool status) but gpuhosts:host.bootloader is systemd-boot"),
    ("GRUB stack on a systemd-boot host", {}, grub_stack,
     "the host boots with systemd-boot (proxmox-boot-tool status) but gpuhosts:host.bootloader is grub"),
    ("Secure Boot on, unsigned module", {"secure_boot": True}, None,
     "Secure Boot is enabled, so the kernel loads only signed modules, and gpuhosts builds nvidia 580.126.09 unsigned"),
]


@pytest.mark.parametrize("seed, change, words", [row[1:] for row in REFUSALS], ids=[row[0] for row in REFUSALS])
def test_the_preflight_refuses_what_the_host_cannot_do_before_any_change(tmp_path, seed, change, words):
    host = make_host(tmp_path, **seed)
    values = host.values() if change is None else change(host.values())
    refused(host, host.unit(DRIVER, values), words)


def test_a_failed_dkms_build_for_the_running_kernel_is_named_on_every_run_not_promised_to_the_next_boot(tmp_path):
    host = make_host(tmp_path)
    host.up()
    configure(host.tree, dkms_build_fails=[NEWER_KERNEL])
    failures = install_kernel(host.tree, NEWER_KERNEL)
    assert failures and "Bad return status for module build on kernel: 6.8.12-9-pve (x86_64)" in failures[0]
    log = f"/var/lib/dkms/nvidia/{VERSION}/build/make.log"
    assert host.text(log).startswith(f"DKMS make.log for nvidia-{VERSION} for kernel {NEWER_KERNEL} (x86_64)")
    assert host.run("uname -r").stdout.strip() == NEWER_KERNEL and not (host.tree / "sys/module/nvidia").exists()

    unit = host.unit(DRIVER)
    for _ in range(2):
        result = host.run(unit.ensure)
        assert result.returncode != 0, result.stdout
        assert (f"refused: nvidia {VERSION} is not installed for the running kernel {NEWER_KERNEL}, so no reboot "
                f"would load it: its DKMS build failed (log: {log})") in result.stderr, result.stderr
        assert "takes over at the next boot" not in result.stdout
        assert not (host.tree / "run/gpuhosts/reboot-required").exists()


def test_a_module_built_for_the_running_kernel_and_not_yet_loaded_waits_for_the_reboot(tmp_path):
    """580 installed beside a 570 a container still uses (the installer's --allow-installation-with-running-driver):
    DKMS has 580 for the running kernel, so the reboot is real, and after it nothing is owed."""
    host = make_host(tmp_path)
    host.up(older_driver(host))
    kernel.hold(host.tree, f"/dev/nvidia{host.minor('0000:41:00.0')}", command="sglang", compute=True, container=129)
    by_hand = subprocess.run(["sh", str(host.run_file), "--silent", "--dkms", "--allow-installation-with-running-driver"],
                             capture_output=True, text=True, env=host_env(host.tree))
    assert by_hand.returncode == 0, by_hand.stderr
    assert host.text("/sys/module/nvidia/version").strip() == "570.148.08"

    output = host.apply(host.unit(DRIVER))
    assert f"nvidia-driver: DKMS: nvidia/{VERSION}, 6.8.12-4-pve, x86_64: installed" in output.splitlines()
    assert f"the loaded module is 570.148.08; {VERSION} takes over at the next boot" in output
    assert parse_result(output).reboot_required

    assert subprocess.run(["reboot"], env=host_env(host.tree)).returncode == 0
    assert host.text("/sys/module/nvidia/version").strip() == VERSION
    assert not parse_result(host.apply(host.unit(DRIVER))).reboot_required


@pytest.mark.parametrize("seed, change, words", [row[1:] for row in REFUSALS if "boots with" in row[3]],
                         ids=[row[0] for row in REFUSALS if "boots with" in row[3]])
def test_the_vfio_binding_which_writes_kernel_arguments_first_refuses_the_wrong_boot_loader_too(tmp_path, seed, change,
                                                                                               words):
    host = make_host(tmp_path, **seed)
    values = host.values() if change is None else change(host.values())
    refused(host, host.unit("vfio-binding", values), words)
