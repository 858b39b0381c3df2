"""The simulated host's own behaviour: each stand-in acts as the real host does (docs/fakehost-contract.md)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fakehost import host_env, kernel  # noqa: E402
from fakehost.installer import make_fake_run  # noqa: E402
from fakehost.pytools import packages as installed_packages  # noqa: E402
from fakehost.tree import profile_seed, tree_digest, tree_listing  # noqa: E402
from fakehost.tree import seed_kpro5 as seed_any  # noqa: E402
from conftest import FIXTURES  # noqa: E402

VER, VER2 = "580.95.05", "580.95.07"
A6000 = ("0000:41:00.0", "0000:41:00.1", "0000:61:00.0", "0000:61:00.1")


def seed_kpro5(tree, **settings):
    """kpro5 on Proxmox VE 8.3 (kernel 6.8.12-4-pve, pve-container 5.2.2): what this module's expectations and the
    fixtures under tests/fixtures/pve were written for; Proxmox VE 9.1 runs in tests/test_host_profiles.py."""
    return seed_any(tree, **{**profile_seed("pve8.3-bookworm"), **settings})


def sh(tree, script, check=True, **env):
    p = subprocess.run(["bash", "-c", "set -u\nr=$GPUHOSTS_HOST_ROOT\n" + script], env=host_env(tree, **env),
                       capture_output=True, text=True, timeout=60)
    if check and p.returncode:
        raise AssertionError(f"rc={p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


# shell helpers the scripts' way: write under $root, then tell the kernel through the hook
SYSFS = """
w() { printf '%s\\n' "$2" > "$r$1" && "$GPUHOSTS_SYSFS_HOOK" "$1"; }
free_a6000() { for a in 0000:41:00.0 0000:41:00.1 0000:61:00.0 0000:61:00.1; do
  w /sys/bus/pci/devices/$a/driver_override ""; w /sys/bus/pci/devices/$a/driver/unbind $a; done; }
"""


@pytest.fixture
def host(tmp_path):
    return seed_kpro5(tmp_path / "kpro5")


@pytest.fixture
def run(tmp_path):
    return Path(tmp_path / f"NVIDIA-Linux-x86_64-{VER}.run"), make_fake_run(tmp_path / f"NVIDIA-Linux-x86_64-{VER}.run", VER)


def drv(tree, addr):
    return kernel.driver_of(tree, addr)


def with_driver(tree, run_file, *flags):
    """Host with dkms + headers, the A6000s freed from vfio-pci and the driver installed."""
    sh(tree, SYSFS + f"apt-get install -y dkms proxmox-headers-$(uname -r) >/dev/null\nfree_a6000\n"
                     f"sh {run_file} --silent --dkms {' '.join(flags)}")


# ---- start state ----------------------------------------------------------------------------------------

def test_seed_state(host):
    assert all(drv(host, a) == "vfio-pci" for a in kernel.pci_devices(host))
    assert len(kernel.pci_devices(host)) == 8
    assert sorted(p.name for p in (host / "sys/module").iterdir()) == ["vfio", "vfio_iommu_type1", "vfio_pci"]
    assert "nvidia" not in (host / "proc/devices").read_text()
    assert (host / "sys/bus/pci/devices/0000:41:00.0/driver_override").read_text() == "(null)\n"
    assert (host / "etc/modprobe.d/vfio.conf").read_text() == "options vfio-pci ids=10de:2204,10de:1aef,10de:2230\n"
    assert sh(host, "qm list").stdout.splitlines()[1].split()[:3] == ["101", "win-3090", "running"]
    assert sh(host, "pct status 129").stdout == "status: running\n"
    grub = seed_kpro5(host.parent / "grub", bootloader="grub")
    assert (grub / "proc/cmdline").read_text() == "BOOT_IMAGE=/boot/vmlinuz-6.8.12-4-pve root=/dev/mapper/pve-root ro quiet\n"


@pytest.mark.parametrize("bootloader, rc, says", [("systemd-boot", 0, "is configured with: uefi"),
                                                  ("grub", 2, "proxmox-boot-uuids does not exist")])
def test_proxmox_boot_tool_status(tmp_path, bootloader, rc, says):
    t = seed_kpro5(tmp_path / "h", bootloader=bootloader)
    p = sh(t, "proxmox-boot-tool status", check=False)
    assert p.returncode == rc and says in p.stdout + p.stderr


def test_reboot_of_unchanged_seed_keeps_digest(host):
    before = tree_digest(host)
    sh(host, "reboot")
    assert tree_digest(host) == before


# ---- sysfs semantics ------------------------------------------------------------------------------------

@pytest.mark.parametrize("steps, expect_rc, expect_driver", [
    # ids= still claims the A6000: drivers_probe gives it back to vfio-pci
    ("w /sys/bus/pci/devices/$a/driver/unbind $a; w /sys/bus/pci/drivers_probe $a", 0, "vfio-pci"),
    # override names a driver that is not loaded: stays unbound
    ("w /sys/bus/pci/devices/$a/driver_override nvidia; w /sys/bus/pci/devices/$a/driver/unbind $a;"
     " w /sys/bus/pci/drivers_probe $a", 0, None),
    # bind refuses a driver other than the override
    ("w /sys/bus/pci/devices/$a/driver_override nouveau; w /sys/bus/pci/devices/$a/driver/unbind $a;"
     " w /sys/bus/pci/drivers/vfio-pci/bind $a", 1, None),
    # unbinding through the driver's own unbind file
    ("w /sys/bus/pci/drivers/vfio-pci/unbind $a", 0, None),
    # bind to a driver that is not there: the file does not exist
    ("w /sys/bus/pci/devices/$a/driver/unbind $a; w /sys/bus/pci/drivers/nvidia/bind $a", 1, None),
])
def test_sysfs_writes(host, steps, expect_rc, expect_driver):
    p = sh(host, SYSFS + "a=0000:41:00.0\n" + steps, check=False)
    assert p.returncode == expect_rc, p.stderr
    assert drv(host, "0000:41:00.0") == expect_driver


def test_override_cleared_reads_null(host):
    sh(host, SYSFS + "w /sys/bus/pci/devices/0000:41:00.0/driver_override vfio-pci\n"
                     "w /sys/bus/pci/devices/0000:41:00.0/driver_override ''")
    assert (host / "sys/bus/pci/devices/0000:41:00.0/driver_override").read_text() == "(null)\n"


def test_drivers_probe_prefers_override_and_loaded_nvidia(host, run):
    with_driver(host, run[0])
    assert [drv(host, a) for a in A6000] == ["nvidia", None, "nvidia", None]
    sh(host, SYSFS + "a=0000:21:00.0\nw /sys/bus/pci/devices/$a/driver_override nvidia\n"
                     "w /sys/bus/pci/devices/$a/driver/unbind $a\nw /sys/bus/pci/drivers_probe $a")
    assert drv(host, "0000:21:00.0") == "nvidia"
    assert sh(host, "nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader").stdout.splitlines() == [
        "0, 00000000:21:00.0", "1, 00000000:41:00.0", "2, 00000000:61:00.0"]


def test_unbinding_a_held_gpu_fails_fast(host, run):
    with_driver(host, run[0])
    sh(host, "nvidia-smi -i 0000:41:00.0 -pm 1")
    # Failing rather than hanging is the "would hang" answer; sh's subprocess timeout only reports a real hang.
    p = sh(host, SYSFS + "w /sys/bus/pci/devices/0000:41:00.0/driver/unbind 0000:41:00.0", check=False)
    assert p.returncode != 0 and "would hang" in p.stderr
    assert drv(host, "0000:41:00.0") == "nvidia"
    minor = kernel.nv_minor(host, "0000:61:00.0")
    kernel.hold(host, f"/dev/nvidia{minor}", "python3", compute=True)
    assert sh(host, f'fuser -s "$r/dev/nvidia{minor}"', check=False).returncode == 0
    assert sh(host, "nvidia-smi --query-compute-apps=pid,gpu_bus_id --format=csv,noheader").stdout.endswith(
        ", 00000000:61:00.0\n")
    p = sh(host, SYSFS + "w /sys/bus/pci/devices/0000:61:00.0/driver/unbind 0000:61:00.0", check=False)
    assert p.returncode != 0 and "would hang" in p.stderr
    sh(host, "nvidia-smi -i 0000:41:00.0 -pm 0")
    sh(host, SYSFS + "w /sys/bus/pci/devices/0000:41:00.0/driver/unbind 0000:41:00.0")
    assert not (host / "proc/driver/nvidia/gpus/0000:41:00.0").exists()


def test_running_vm_gpu_cannot_leave_vfio(host):
    p = sh(host, SYSFS + "w /sys/bus/pci/devices/0000:01:00.1/driver/unbind 0000:01:00.1", check=False)
    assert p.returncode != 0 and "VM 101" in p.stderr


@pytest.mark.parametrize("persistence, rc, after", [("0", 0, "vfio-pci"), ("1", 124, "nvidia")])  # 124: would hang
def test_vm_start_takes_its_gpu_to_vfio(tmp_path, run, persistence, rc, after):
    t = seed_kpro5(tmp_path / "h", vms=((101, "win-3090", "0000:01:00", True), (103, "ml-a6000", "0000:41:00", False)))
    with_driver(t, run[0])
    sh(t, f"nvidia-smi -i 0000:41:00.0 -pm {persistence} >/dev/null")
    p = sh(t, "qm start 103", check=False)
    assert p.returncode == rc and drv(t, "0000:41:00.0") == after, p.stderr
    if rc == 0:
        assert drv(t, "0000:41:00.1") == "vfio-pci" and "103 ml-a6000             running" in sh(t, "qm list").stdout


def test_variant_with_running_a6000_vm(tmp_path):
    t = seed_kpro5(tmp_path / "h", vms=((103, "ml-a6000", "0000:41:00", True),), bootloader="grub")
    assert sh(t, "qm list").stdout.splitlines()[1].split()[:3] == ["103", "ml-a6000", "running"]
    p = sh(t, SYSFS + "w /sys/bus/pci/devices/0000:41:00.0/driver/unbind 0000:41:00.0", check=False)
    assert p.returncode != 0 and "VM 103" in p.stderr


def test_minors_follow_the_driver_not_pci_order(tmp_path, run):
    t = seed_kpro5(tmp_path / "h", nvidia_minors={"0000:61:00.0": 0, "0000:41:00.0": 1})
    with_driver(t, run[0])
    info = (t / "proc/driver/nvidia/gpus/0000:41:00.0/information").read_text()
    assert "Device Minor: \t 1\n" in info and "Bus Location: \t 0000:41:00.0\n" in info
    assert not (t / "dev/nvidia0").exists()  # the module makes no node: nvidia-modprobe does
    sh(t, "nvidia-modprobe -c=0")
    assert (t / "dev/nvidia0").read_text() == "c 195:0\n"
    assert sh(t, "nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader").stdout.startswith("0, 00000000:41")


# ---- modules and the driver -----------------------------------------------------------------------------

def test_nvidia_load_and_uvm_major(host, run):
    assert sh(host, "nvidia-smi", check=False).returncode == 127  # not installed yet
    with_driver(host, run[0])
    devices = (host / "proc/devices").read_text()
    assert "195 nvidia\n" in devices and "507 nvidia-caps\n" in devices and "nvidia-uvm" not in devices
    assert (host / "proc/driver/nvidia/version").read_text().startswith(
        f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {VER}  Release Build")
    assert (host / "sys/module/nvidia/version").read_text() == VER + "\n"
    assert (host / "lib/modules/6.8.12-4-pve/updates/dkms/nvidia.ko").exists()
    sh(host, "nvidia-modprobe -u -c=0")
    assert "509 nvidia-uvm\n" in (host / "proc/devices").read_text()
    assert (host / "dev/nvidia-uvm").read_text() == "c 509:0\n"
    assert (host / "dev/nvidia-uvm-tools").read_text() == "c 509:1\n"
    assert sh(host, "nvidia-smi --query-gpu=driver_version --format=csv,noheader").stdout == f"{VER}\n{VER}\n"


@pytest.mark.parametrize("prep, flags, rc, says", [
    ("", "--dkms", 1, "kernel source tree"),                                  # no headers
    ("apt-get install -y proxmox-headers-$(uname -r)", "--dkms", 1, "Unable to load the kernel module"),  # all on vfio
    ("apt-get install -y proxmox-headers-$(uname -r); free_a6000", "--dkms", 0, "DKMS package is not installed"),
    ("apt-get install -y proxmox-headers-$(uname -r); free_a6000; modprobe nouveau", "", 1, "Nouveau"),
    ("free_a6000", "--bogus", 1, "Unrecognized option"),
])
def test_installer_refusals(host, run, prep, flags, rc, says):
    p = sh(host, SYSFS + f"{prep} >/dev/null\nsh {run[0]} --silent {flags}", check=False)
    assert p.returncode == rc and says in p.stderr, p.stderr


def test_proprietary_module_and_uninstall(host, run):
    before = tree_digest(host, exclude=("run", "proc", "sys", "dev", "proc/sys/kernel/random/boot_id"))
    with_driver(host, run[0], "--kernel-module-type=proprietary")
    assert (host / "proc/driver/nvidia/version").read_text().startswith(
        f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {VER}  ")
    assert (host / f"var/lib/dkms/nvidia/{VER}").is_dir()
    sh(host, "nvidia-uninstall --silent && apt-get remove -y dkms proxmox-headers-$(uname -r)")
    assert tree_digest(host, exclude=("run", "proc", "sys", "dev", "proc/sys/kernel/random/boot_id")) == before
    assert kernel.is_loaded(host, "nvidia")  # uninstall unloads nothing


def test_upgrade_needs_idle_gpus(host, tmp_path, run):
    with_driver(host, run[0])
    new = tmp_path / f"NVIDIA-Linux-x86_64-{VER2}.run"
    make_fake_run(new, VER2)
    sh(host, "nvidia-persistenced --persistence-mode")
    p = sh(host, f"sh {new} --silent --dkms", check=False)
    assert p.returncode == 1 and "already be loaded" in p.stderr
    sh(host, f"fuser -k \"$r/dev/nvidiactl\" >/dev/null 2>&1; sh {new} --silent --dkms")
    assert (host / "sys/module/nvidia/version").read_text() == VER2 + "\n"
    assert not (host / f"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{VER}").exists()


# ---- containers -----------------------------------------------------------------------------------------

def test_pct_set_refuses_missing_node_and_delete_restores(host):
    conf = (host / "etc/pve/lxc/129.conf").read_bytes()
    p = sh(host, "pct set 129 --dev0 /dev/nvidia0", check=False)
    assert p.returncode == 255 and "Device /dev/nvidia0 does not exist" in p.stderr
    (host / "dev/nvidia0").write_text("c 195:0\n")
    sh(host, "pct set 129 --dev0 /dev/nvidia0,gid=44,mode=0666 --dev1 /dev/nvidia0")
    assert "dev0: /dev/nvidia0,gid=44,mode=0666\n" in sh(host, "pct config 129").stdout
    # On the running container both wait in [pve:pending]; --revert drops them (--delete would leave them pending).
    sh(host, "pct set 129 --revert dev0,dev1")
    assert (host / "etc/pve/lxc/129.conf").read_bytes() == conf


@pytest.mark.parametrize("ct_version, restart, rc, out", [
    (VER, True, 0, "0, 00000000:41:00.0\n"),
    # nvidia-smi reports NVML's errors on stdout (tests/fixtures/facts/h200-tool-failures).
    (VER, False, 9, "NVIDIA-SMI has failed"),  # devices added after the last start are not there yet
    (VER2, True, 18, "Failed to initialize NVML: Driver/library version mismatch"),  # user space differs: NVML refuses
    (None, True, 127, ""),
])
def test_nvidia_smi_in_container(host, run, tmp_path, ct_version, restart, rc, out):
    with_driver(host, run[0])
    m = kernel.nv_minor(host, "0000:41:00.0")
    sh(host, f"nvidia-modprobe -c={m} -c=255 && pct set 129 --dev0 /dev/nvidia{m} --dev1 /dev/nvidiactl"
       + ("; pct reboot 129" if restart else ""))
    if ct_version:
        f = tmp_path / f"ct-{ct_version}.run"
        make_fake_run(f, ct_version)
        sh(host, f"pct push 129 {f} /root/driver.run && pct exec 129 -- sh /root/driver.run --silent --no-kernel-modules")
    p = sh(host, "pct exec 129 -- nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader", check=False)
    assert p.returncode == rc and (p.stdout == out if rc in (0, 127) else p.stdout.startswith(out)), p.stderr


def test_container_start_needs_the_nodes(host):
    (host / "dev/nvidia-uvm").write_text("c 509:0\n")
    sh(host, "pct set 129 --dev0 /dev/nvidia-uvm && pct stop 129")
    (host / "dev/nvidia-uvm").unlink()
    p = sh(host, "pct start 129", check=False)
    assert p.returncode == 255 and "does not exist" in p.stderr
    p = sh(host, "pct exec 129 -- true", check=False)
    assert p.returncode == 255 and "not running" in p.stderr


# ---- boot configuration ---------------------------------------------------------------------------------

def test_initrd_is_a_function_of_its_config(host):
    img = host / "boot/initrd.img-6.8.12-4-pve"
    seed = img.read_bytes()
    sh(host, "update-initramfs -u -k all >/dev/null")
    assert img.read_bytes() == seed
    sh(host, "echo 'blacklist nouveau' > $r/etc/modprobe.d/nouveau.conf && update-initramfs -u >/dev/null")
    assert img.read_bytes() != seed
    sh(host, "rm $r/etc/modprobe.d/nouveau.conf && update-initramfs -u >/dev/null")
    assert img.read_bytes() == seed


def test_boot_loader_files(tmp_path):
    t = seed_kpro5(tmp_path / "sd")
    sh(t, "echo 'root=ZFS=rpool/ROOT/pve-1 boot=zfs iommu=pt' > $r/etc/kernel/cmdline; proxmox-boot-tool refresh")
    assert "options  root=ZFS=rpool/ROOT/pve-1 boot=zfs iommu=pt\n" in (
        t / "boot/loader/entries/proxmox-6.8.12-4-pve.conf").read_text()
    sh(t, "reboot")
    assert (t / "proc/cmdline").read_text().endswith("boot=zfs iommu=pt\n")
    g = seed_kpro5(tmp_path / "grub", bootloader="grub")
    sh(g, "sed -i 's/^GRUB_CMDLINE_LINUX=\"\"/GRUB_CMDLINE_LINUX=\"iommu=pt\"/' $r/etc/default/grub; update-grub 2>/dev/null;"
          " proxmox-boot-tool refresh >/dev/null; reboot")
    assert (g / "proc/cmdline").read_text() == \
        "BOOT_IMAGE=/boot/vmlinuz-6.8.12-4-pve root=/dev/mapper/pve-root ro iommu=pt quiet\n"


UNIT = """[Unit]
Description=Create NVIDIA device nodes
Before=pve-guests.service
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/bin/nvidia-modprobe -c=255 -c=0 -c=1
ExecStart=/usr/bin/nvidia-modprobe -u -c=0
[Install]
WantedBy=multi-user.target
"""
OVERRIDE_UNIT = """[Unit]
DefaultDependencies=no
Before=sysinit.target systemd-modules-load.service
[Service]
Type=oneshot
ExecStart=/bin/sh -c 'for a in 0000:01:00.0 0000:01:00.1 0000:21:00.0 0000:21:00.1; do echo vfio-pci > "$GPUHOSTS_HOST_ROOT/sys/bus/pci/devices/$a/driver_override"; "$GPUHOSTS_SYSFS_HOOK" /sys/bus/pci/devices/$a/driver_override; done'
[Install]
WantedBy=sysinit.target
"""


def test_systemctl_units(host, run):
    with_driver(host, run[0])
    (host / "etc/systemd/system/nvidia-nodes.service").write_text(UNIT)
    p = sh(host, "systemctl daemon-reload && systemctl enable --now nvidia-nodes")
    assert "Created symlink /etc/systemd/system/multi-user.target.wants/nvidia-nodes.service" in p.stderr
    assert (host / "dev/nvidia-uvm").exists()
    assert sh(host, "systemctl is-active nvidia-nodes; systemctl is-enabled nvidia-nodes").stdout == "active\nenabled\n"
    sh(host, "systemctl disable --now nvidia-nodes")
    assert sh(host, "systemctl is-enabled nvidia-nodes", check=False).returncode == 1


def test_reboot_applies_the_split_binding(host, run):
    """3090s stay on vfio-pci by address, A6000s get nvidia; nodes exist before the container starts."""
    with_driver(host, run[0])
    (host / "etc/systemd/system/gpu-override.service").write_text(OVERRIDE_UNIT)
    (host / "etc/systemd/system/nvidia-nodes.service").write_text(UNIT)
    sh(host, "systemctl enable gpu-override 2>/dev/null && systemctl enable --now nvidia-nodes 2>/dev/null\n"
             "printf 'softdep nvidia pre: vfio-pci\\n' > $r/etc/modprobe.d/vfio.conf\n"
             "printf 'blacklist nouveau\\noptions nouveau modeset=0\\n' > $r/etc/modprobe.d/blacklist-nouveau.conf\n"
             "pct set 129 --dev0 /dev/nvidia0 --dev1 /dev/nvidia1 --dev2 /dev/nvidiactl --dev3 /dev/nvidia-uvm || exit 1\n"
             "update-initramfs -u -k all >/dev/null\nreboot")
    assert [drv(host, a) for a in kernel.pci_devices(host)] == [
        "vfio-pci", "vfio-pci", "vfio-pci", "vfio-pci", "nvidia", "snd_hda_intel", "nvidia", "snd_hda_intel"]
    assert (host / "run/fakehost/boot.log").read_text() == ""
    assert sh(host, "pct status 129").stdout == "status: running\n"


def test_without_new_initrd_old_ids_still_win(host, run):
    """Config changed but initramfs not rebuilt: vfio-pci from the initramfs keeps the old ids."""
    (host / "etc/initramfs-tools/modules").write_text("vfio\nvfio_iommu_type1\nvfio_pci\n")
    sh(host, "update-initramfs -u >/dev/null")
    with_driver(host, run[0])
    sh(host, "rm $r/etc/modprobe.d/vfio.conf; reboot")
    assert drv(host, "0000:41:00.0") == "vfio-pci"
    sh(host, "update-initramfs -u >/dev/null; reboot")
    assert drv(host, "0000:41:00.0") == "nvidia"


def test_digest_equal_after_revert(host, run):
    """Everything a setup touches, undone, gives back the start state byte for byte."""
    before = tree_digest(host)
    with_driver(host, run[0])
    (host / "etc/systemd/system/nvidia-nodes.service").write_text(UNIT)
    sh(host, "systemctl enable --now nvidia-nodes 2>/dev/null; pct set 129 --dev0 /dev/nvidia0 --dev1 /dev/nvidiactl\n"
             "echo 'blacklist nouveau' > $r/etc/modprobe.d/blacklist-nouveau.conf; update-initramfs -u >/dev/null\n"
             "pct reboot 129")
    assert tree_digest(host) != before
    sh(host, "pct set 129 --delete dev0,dev1; systemctl disable --now nvidia-nodes 2>/dev/null\n"
             "rm $r/etc/systemd/system/nvidia-nodes.service $r/etc/modprobe.d/blacklist-nouveau.conf\n"
             "nvidia-uninstall --silent; apt-get remove -y dkms proxmox-headers-$(uname -r) >/dev/null\n"
             "update-initramfs -u >/dev/null; reboot")
    after = tree_listing(host)
    assert tree_digest(host) == before, sorted(set(after.items()) ^ set(tree_listing(seed_kpro5(host.parent / "s")).items()))


# ---- small tools ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("cmd, rc, out", [
    ("uname -r", 0, "6.8.12-4-pve\n"),
    ("dpkg-query -W -f='${Status}' proxmox-ve", 0, "install ok installed"),
    ("dpkg-query -W -f='${Status}' dkms", 1, ""),
    ("apt-get install -y dkms >/dev/null && dpkg-query -W -f='${Status}' dkms", 0, "install ok installed"),
    ("nvidia-smi", 127, ""),
    ("modprobe nvidia", 1, ""),
    ("fuser -s $r/dev/nvidiactl", 1, ""),
])
def test_small_tools(host, cmd, rc, out):
    p = sh(host, cmd, check=False)
    assert (p.returncode, p.stdout) == (rc, out), p.stderr


# ---- hf download into a local dir (huggingface_hub v0.36.0) ----------------------------------------------

QWEN = "Qwen/Qwen3.6-27B"


def hf(tree, *argv):
    return subprocess.run([sys.executable, "-m", "fakehost.cli", "hf", "download", *argv], env=host_env(tree),
                          capture_output=True, text=True, timeout=60)


def test_hf_leaves_a_lock_beside_each_metadata_file(host):
    ldir = host / "srv/models/q"
    for _ in range(2):  # the second run fetches nothing and still takes each file's lock
        p = hf(host, QWEN, "--local-dir", str(ldir), "--quiet")
        assert p.returncode == 0, p.stderr
        names = sorted(f.name for f in (ldir / ".cache/huggingface/download").iterdir())
        files = sorted(f.name for f in ldir.iterdir() if f.is_file())
        assert names == sorted([f + ".lock" for f in files] + [f + ".metadata" for f in files])
    assert sorted(f.name for f in (ldir / ".cache/huggingface").iterdir()) == [".gitignore", "download"]


@pytest.mark.parametrize("argv, printed, files", [
    (["config.json"], "q/config.json", ["config.json"]),
    (["config.json", "tokenizer.json", "--include", "*.safetensors"], "q", ["config.json", "tokenizer.json"]),
    (["--include", "*.json", "--exclude", "model.*"], "q", ["config.json", "tokenizer.json"]),
])
def test_hf_named_files_and_patterns(host, argv, printed, files):
    p = hf(host, QWEN, *argv, "--local-dir", str(host / "srv/models/q"), "--quiet")
    assert p.returncode == 0, p.stderr
    assert p.stdout == f"{host}/srv/models/{printed}\n"
    assert sorted(f.name for f in (host / "srv/models/q").iterdir() if f.is_file()) == files


def test_hf_metadata_etag_is_the_git_hash_or_the_lfs_sha256(host):
    import hashlib
    ldir = host / "srv/models/q"
    assert hf(host, QWEN, "--local-dir", str(ldir), "--quiet").returncode == 0
    for name, lfs in (("config.json", False), ("model-00001-of-00003.safetensors", True)):
        data = (ldir / name).read_bytes()
        want = hashlib.sha256(data).hexdigest() if lfs else hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        assert (ldir / ".cache/huggingface/download" / (name + ".metadata")).read_text().splitlines()[1] == want


def test_hf_fetches_a_file_changed_after_its_metadata_and_keeps_one_changed_in_place(host):
    import os
    ldir = host / "srv/models/q"
    assert hf(host, QWEN, "--local-dir", str(ldir), "--quiet").returncode == 0
    config, shard = ldir / "config.json", ldir / "model-00002-of-00003.safetensors"
    original, data = config.read_bytes(), bytearray(shard.read_bytes())
    # Edited: newer than its metadata, whose etag hf then no longer trusts; not an LFS file, so it is fetched.
    config.write_text(config.read_text().replace("64", "65", 1))
    # A byte changed in place with the mtime kept: the metadata still speaks for the file, which hf keeps.
    stat = shard.stat()
    data[len(data) // 3] ^= 1
    shard.write_bytes(bytes(data))
    os.utime(shard, (stat.st_atime, stat.st_mtime))
    assert hf(host, QWEN, "--local-dir", str(ldir), "--quiet").returncode == 0
    assert config.read_bytes() == original and shard.read_bytes() == bytes(data)
    # Its metadata gone, an LFS file is hashed against the etag: the changed shard is fetched again.
    (ldir / ".cache/huggingface/download/model-00002-of-00003.safetensors.metadata").unlink()
    assert hf(host, QWEN, "--local-dir", str(ldir), "--quiet").returncode == 0
    data[len(data) // 3] ^= 1
    assert shard.read_bytes() == bytes(data)
    log = (host / "var/log/fakehost/hf.log").read_text().splitlines()
    assert [line.split(" fetched=")[1].split(" token")[0] for line in log] == ["6 reused=0", "1 reused=5", "1 reused=5"]


def test_the_hubs_tree_lists_each_file_with_its_blob_id_and_an_lfs_files_sha256(host):
    import hashlib
    import urllib.request
    from fakehost.hub import HubApi
    api = HubApi(host)
    try:
        with urllib.request.urlopen(f"{api.endpoint}/api/models/{QWEN}/tree/main?recursive=true") as response:
            entries = {e["path"]: e for e in json.load(response)}
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"{api.endpoint}/api/models/nobody/nothing/tree/main")
    finally:
        api.close()
    assert missing.value.code == 404 and missing.value.headers["X-Error-Code"] == "RepoNotFound"
    assert hf(host, QWEN, "--local-dir", str(host / "srv/models/q"), "--quiet").returncode == 0
    config = (host / "srv/models/q/config.json").read_bytes()
    shard = (host / "srv/models/q/model-00002-of-00003.safetensors").read_bytes()
    assert entries["config.json"] == {"type": "file", "path": "config.json", "size": len(config),
                                      "oid": hashlib.sha1(b"blob %d\0" % len(config) + config).hexdigest()}
    lfs = entries["model-00002-of-00003.safetensors"]["lfs"]
    assert lfs["oid"] == hashlib.sha256(shard).hexdigest() and lfs["size"] == len(shard) > 3 * 1024 * 1024
    pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{lfs['oid']}\nsize {len(shard)}\n".encode()
    assert lfs["pointerSize"] == len(pointer)
    assert entries["model-00002-of-00003.safetensors"]["oid"] == hashlib.sha1(b"blob %d\0" % len(pointer) + pointer).hexdigest()


# ---- uv pip install --require-hashes (uv 0.12.5) ---------------------------------------------------------

H = " --hash=sha256:" + "ab" * 32


@pytest.mark.parametrize("lock, flags, rc, says", [
    ("vllm==0.11.0" + H, "", 2, "In `--require-hashes` mode, all requirements must be pinned upfront with `==`, "
                                "but found: `huggingface-hub`"),
    ("vllm==0.11.0" + H, "--no-deps", 0, ""),
    ("vllm==0.11.0" + H + "\nhuggingface-hub==0.36.0" + H + "\nprometheus-client==0.23.1" + H, "", 0, ""),
])
def test_uv_require_hashes_covers_dependencies(host, lock, flags, rc, says):
    (host / "lock.txt").write_text(lock + "\n")
    uv = f"{sys.executable} -m fakehost.cli uv"
    p = sh(host, f"{uv} venv -q $r/v && {uv} pip install -q --python $r/v/bin/python --require-hashes {flags} "
                 f"-r $r/lock.txt", check=False)
    assert (p.returncode, says in p.stderr) == (rc, True), p.stderr
    installed = set(installed_packages(host / "v"))
    assert ("vllm" in installed) == (rc == 0)


@pytest.mark.parametrize("written, held_after, fails", [
    ("10de 2204", False, False),
    ("0x10de 0x2204", False, False),   # the kernel parses the ids as hex, with or without 0x
    ("10de 9999", True, True),          # an id vfio-pci does not hold: "No such device", the others stay
])
def test_remove_id_drops_a_dynamic_id_or_fails_as_the_kernel_does(host, written, held_after, fails):
    from fakehost.util import Fail
    (host / "sys/bus/pci/drivers/vfio-pci/remove_id").write_text(written + "\n")
    if fails:
        with pytest.raises(Fail, match="No such device"):
            kernel.sysfs_write(host, "/sys/bus/pci/drivers/vfio-pci/remove_id")
    else:
        kernel.sysfs_write(host, "/sys/bus/pci/drivers/vfio-pci/remove_id")
    assert ("10de:2204" in kernel.kstate(host)["dynids"]["vfio-pci"]) == held_after


@pytest.mark.parametrize("flags, mode", [
    ("", "Enabled"),                       # the daemon's default (captured `nvidia-persistenced --help`, 580.159.04)
    ("--persistence-mode", "Enabled"),
    ("--no-persistence-mode", "Disabled"),
])
def test_the_persistence_daemon_turns_persistence_mode_on_unless_told_not_to(host, run, flags, mode):
    help_text = json.loads((FIXTURES / "facts/h200-tool-failures/commands.json").read_text())["persistenced-help"]
    assert "By default, nvidia-persistenced starts with persistence mode enabled for all devices" in help_text["stdout"]
    with_driver(host, run[0])
    sh(host, f"nvidia-persistenced {flags}")
    out = sh(host, "nvidia-smi -i 0000:41:00.0 --query-gpu=persistence_mode --format=csv,noheader").stdout
    assert out == mode + "\n"
