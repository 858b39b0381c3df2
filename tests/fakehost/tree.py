"""The start state of host kpro5, and digests that prove a teardown restored it.

kpro5 as the original manual deployment left it: four GA102 GPUs (two RTX 3090, two RTX A6000) with their
HDMI audio functions, all on vfio-pci through ``options vfio-pci ids=…``; VMs using the 3090s; container 129
("llm") without GPU devices; no NVIDIA driver, no DKMS, no kernel headers.
The seed writes the configuration, builds initrd and boot-loader files with the same code the stand-ins use,
and then boots the tree, so that the running state is what that configuration gives.
"""
import hashlib
import json
import os
from pathlib import Path

from . import boot, kernel as k
from .hostinfo import efivars
from .system import initrd_bytes, refresh, update_grub
from .util import write

GPUS = (("0000:01:00", "0x2204"), ("0000:21:00", "0x2204"), ("0000:41:00", "0x2230"), ("0000:61:00", "0x2230"))
VMS = ((101, "win-3090", "0000:01:00", True), (102, "cad-3090", "0000:21:00.0", False))
HOST_PACKAGES = ("bash", "coreutils", "curl", "grub-common", "initramfs-tools", "kmod", "lxc-pve", "proxmox-ve",
                 "proxmox-default-kernel", "proxmox-kernel-helper", "pve-container", "pve-manager", "qemu-server",
                 "systemd", "wget", "zfsutils-linux")
FHS_DIRS = ("etc/default/grub.d", "etc/systemd/system", "lib/modprobe.d", "lib/systemd/system", "opt", "root", "tmp",
            "usr/bin", "usr/lib/x86_64-linux-gnu", "usr/lib/modprobe.d", "usr/local/bin", "usr/local/lib",
            "usr/local/sbin", "usr/sbin", "usr/src", "var/cache", "var/lib", "var/log", "var/tmp")
CT_PACKAGES = ("bash", "ca-certificates", "coreutils", "curl", "debian-archive-keyring", "python3", "systemd")
# Proxmox VE 8.3.0 as released: pve-manager 8.3.0 with pve-container 5.2.2 (tests/fixtures/pve/README.md).
PVE_VERSION, PVE_CONTAINER_VERSION = "8.3.0", "5.2.2"
# The host releases a kpro5 is simulated on, as gpuhosts/compat-rules.yaml `hosts` describes them: pve-manager,
# pve-container, the running kernel and the Debian release.
PROFILES = {
    "pve8.3-bookworm": {"pve_version": "8.3.0", "pve_container_version": "5.2.2", "kernel": "6.8.12-4-pve",
                        "release": "8.3", "debian": ("12", "bookworm")},
    "pve9.1-trixie": {"pve_version": "9.1.19", "pve_container_version": "6.1.10", "kernel": "6.17.13-2-pve",
                      "release": "9.1", "debian": ("13", "trixie")},
}


def profile_seed(name: str) -> dict:
    """seed_kpro5's keywords for a profile."""
    profile = PROFILES[name]
    return {"pve_version": profile["pve_version"], "pve_container_version": profile["pve_container_version"],
            "kernel": profile["kernel"], "debian": profile["debian"]}
GRUB_DEFAULT = """\
# If you change this file, run 'update-grub' afterwards to update
# /boot/grub/grub.cfg.
# For full documentation of the options in this file, see:
#   info -f grub -n 'Simple configuration'

GRUB_DEFAULT=0
GRUB_TIMEOUT=5
GRUB_DISTRIBUTOR="Proxmox VE"
GRUB_CMDLINE_LINUX_DEFAULT="quiet"
GRUB_CMDLINE_LINUX=""

# If your computer has multiple operating systems installed, then you
# probably want to run os-prober. However, if you're not, then you may
# want to set this to false.
#GRUB_DISABLE_OS_PROBER=false

# Uncomment to enable BadRAM filtering, modify to suit your needs
# This works with Linux (no patch required) and with any kernel that obtains
# the memory map information from GRUB (GNU Mach, kernel of FreeBSD ...)
#GRUB_BADRAM="0x01234567,0xfefefefe,0x89abcdef,0xefefefef"

# Uncomment to disable graphical terminal
#GRUB_TERMINAL=console

# Disable os-prober, it might add menu entries for each guest
GRUB_DISABLE_OS_PROBER=true
"""
INITRAMFS_CONF = """\
#
# initramfs.conf
# Configuration file for mkinitramfs(8). See initramfs.conf(5).
#

MODULES=most
BUSYBOX=auto
COMPRESS=zstd
DEVICE=
NFSROOT=auto
RUNSIZE=10%
FSTYPE=auto
"""
INITRAMFS_MODULES = """\
# List of modules that you want to include in your initramfs.
# They will be loaded at boot time in the order below.
#
# Syntax:  module_name [args ...]
#
# You must run update-initramfs(8) to effect this change.
#
"""


def seed_kpro5(tree: Path, *, uvm_major=509, caps_major=507, kernel="6.17.13-2-pve", vms=VMS,
               bootloader="systemd-boot", nvidia_minors=None, ct_vmid=129, ct_running=True,
               vfio_ids="10de:2204,10de:1aef,10de:2230", pve_version="9.1.19",
               pve_container_version="6.1.10", secure_boot=False, debian=("13", "trixie")) -> Path:
    """Builds kpro5's start state under ``tree`` and returns ``tree``.

    vms: (vmid, name, hostpci, running) — running VMs have ``onboot: 1`` and are started by the boot; an empty
    name leaves the VM unnamed; a hostpci holding ``=`` is the whole property string (``pcie=1,host=…``).
    nvidia_minors: {pci addr: minor} the nvidia driver gives those GPUs (default: lowest free minor).
    vfio_ids: the seed's ``options vfio-pci ids=`` ("" leaves every GPU free at boot).
    pve_version, pve_container_version: the pve-manager and pve-container releases installed (``pveversion``,
    ``dpkg-query``); the default is Proxmox VE 9.1 (pve-manager 9.1.19, pve-container 6.1.10, kernel 6.17.13-2-pve,
    Debian 13), the committed kpro5's release; PROFILES holds 8.3 too (tests/fixtures/pve/README.md).
    secure_boot: the firmware's Secure Boot state, written as the EFI variables efivarfs shows.
    debian: the Debian release under Proxmox VE, (version, codename), written to /etc/os-release.
    """
    t = Path(tree)
    kv = kernel
    assert bootloader in ("systemd-boot", "grub")
    write(t / "var/lib/fakehost/settings.json", json.dumps({
        "kernel": kv, "uvm_major": uvm_major, "caps_major": caps_major, "bootloader": bootloader,
        "esp_uuid": "2B8C-1A6F", "nvidia_minors": nvidia_minors or {},
        "pve_version": pve_version, "pve_container_version": pve_container_version, "secure_boot": secure_boot,
        "grub_root": "root=ZFS=rpool/ROOT/pve-1 boot=zfs" if bootloader == "systemd-boot"
        else "root=/dev/mapper/pve-root"}, indent=1, sort_keys=True) + "\n")
    for slot, dev in GPUS:
        for fn, (device, cls) in enumerate(((dev, "0x030000"), ("0x1aef", "0x040300"))):
            d = t / "sys/bus/pci/devices" / f"{slot}.{fn}"
            for name, val in (("vendor", k.NV), ("device", device), ("class", cls),
                              ("subsystem_vendor", k.NV), ("driver_override", "(null)")):
                write(d / name, val + "\n")
    write(t / "sys/bus/pci/drivers_probe", "")
    for name, data in efivars(secure_boot).items():
        write(t / name, data)
    (t / "sys/bus/pci/drivers").mkdir(parents=True, exist_ok=True)
    (t / "sys/module").mkdir(parents=True, exist_ok=True)
    (t / "dev").mkdir(exist_ok=True)
    for d in FHS_DIRS:  # a real host has these; scripts' mkdir -p must not look like a change
        (t / d).mkdir(parents=True, exist_ok=True)

    # configuration
    number, codename = debian
    write(t / "etc/os-release", f'PRETTY_NAME="Debian GNU/Linux {number} ({codename})"\nNAME="Debian GNU/Linux"\n'
          f'VERSION_ID="{number}"\nVERSION="{number} ({codename})"\nVERSION_CODENAME={codename}\nID=debian\n')
    if vfio_ids:
        write(t / "etc/modprobe.d/vfio.conf", f"options vfio-pci ids={vfio_ids}\n")
    write(t / "etc/modprobe.d/pve-blacklist.conf", "# This file contains a list of modules which are not supported"
          " by Proxmox VE\n\n# nvidiafb see bugreport https://bugzilla.proxmox.com/show_bug.cgi?id=701\n"
          "blacklist nvidiafb\n")
    write(t / "etc/modules", "vfio\nvfio_iommu_type1\nvfio_pci\n")
    write(t / "etc/initramfs-tools/initramfs.conf", INITRAMFS_CONF)
    write(t / "etc/initramfs-tools/modules", INITRAMFS_MODULES)
    (t / "etc/initramfs-tools/scripts/init-top").mkdir(parents=True, exist_ok=True)
    # initramfs-tools-core ships the hooks directory (debian/initramfs-tools-core.dirs, tag debian/0.142).
    (t / "etc/initramfs-tools/hooks").mkdir(parents=True, exist_ok=True)
    (t / "etc/modules-load.d").mkdir(parents=True, exist_ok=True)
    write(t / "etc/kernel/cmdline", "root=ZFS=rpool/ROOT/pve-1 boot=zfs\n")
    write(t / "etc/default/grub", GRUB_DEFAULT)
    if bootloader == "systemd-boot":
        write(t / "etc/kernel/proxmox-boot-uuids", "2B8C-1A6F\n")
    write(t / "etc/hostname", "kpro5\n")
    for target, units in (("multi-user.target", ("pve-cluster.service", "pvedaemon.service", "pveproxy.service",
                                                 "pve-guests.service", "ssh.service", "zfs.target")),
                          ("sysinit.target", ("systemd-pstore.service", "zfs-import.target"))):
        for u in units:
            link = t / f"etc/systemd/system/{target}.wants/{u}"
            link.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(f"/lib/systemd/system/{u}", link)
    write(t / "var/lib/fakehost/dpkg-installed",
          "".join(p + "\n" for p in sorted(HOST_PACKAGES + (f"proxmox-kernel-{kv}-signed",)
                                           + (("systemd-boot",) if bootloader == "systemd-boot" else ("grub-pc",)))))
    write(t / f"boot/vmlinuz-{kv}", f"simulated Linux {kv}\n")
    (t / f"lib/modules/{kv}/kernel/drivers").mkdir(parents=True, exist_ok=True)
    write(t / f"boot/initrd.img-{kv}", initrd_bytes(t, kv))
    update_grub(t, verbose=False)
    if bootloader == "systemd-boot":
        import contextlib, io
        # The seed is the state a host already has: what proxmox-boot-tool says while making it is no output of a
        # test (it prints its progress on stderr, system.py `refresh`).
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            refresh(t)

    # guests
    from .pve import CT, VM, write_conf
    for vmid, name, hostpci, running in vms:
        keys = {"agent": "1", "bios": "ovmf", "boot": "order=scsi0;net0", "cores": "8", "cpu": "host",
                "efidisk0": f"local-zfs:vm-{vmid}-disk-0,efitype=4m,pre-enrolled-keys=1,size=1M",
                "hostpci0": hostpci if "=" in hostpci else f"{hostpci},pcie=1", "machine": "q35", "memory": "32768",
                "net0": f"virtio=BC:24:11:3A:{vmid % 100:02X}:01,bridge=vmbr0,firewall=1", "numa": "0",
                "ostype": "l26", "scsi0": f"local-zfs:vm-{vmid}-disk-1,iothread=1,size=128G",
                "scsihw": "virtio-scsi-single", "sockets": "1"}
        if name:  # qemu-server writes no name key for an unnamed VM
            keys["name"] = name
        if running:
            keys["onboot"] = "1"
        write_conf(t, VM, vmid, [], keys, [])
    keys = {"arch": "amd64", "cores": "16", "features": "nesting=1", "hostname": "llm", "memory": "131072",
            "net0": "name=eth0,bridge=vmbr0,firewall=1,hwaddr=BC:24:11:5E:2A:19,ip=dhcp,type=veth",
            "ostype": "debian", "rootfs": f"local-zfs:subvol-{ct_vmid}-disk-0,size=200G", "swap": "512",
            "unprivileged": "0"}
    if ct_running:
        keys["onboot"] = "1"
    write_conf(t, CT, ct_vmid, [], keys, [])
    c = t / f"var/lib/lxc/{ct_vmid}/rootfs"
    write(c / "etc/hostname", "llm\n")
    write(c / "etc/os-release", 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\n'
          'VERSION_ID="12"\nVERSION="12 (bookworm)"\nVERSION_CODENAME=bookworm\nID=debian\n')
    write(c / "srv/models/README", "Model weights live here (kept across driver changes).\n")
    write(c / "var/lib/fakehost/dpkg-installed", "".join(p + "\n" for p in CT_PACKAGES))
    for d in FHS_DIRS:
        (c / d).mkdir(parents=True, exist_ok=True)
    from .pytools import stub
    write(c / "usr/bin/python3", stub("python3", "The container's python3"), 0o755)

    boot.power_off(t)
    boot.boot(t)
    return t


def volatile(t: Path) -> tuple:
    """What a digest leaves out by default: running state (the host's and each container's run/), the boot id
    and the stand-ins' own logs (var/log/fakehost), which record what tests ask of them, not host state."""
    lxc = t / "var/lib/lxc"
    cts = tuple(f"var/lib/lxc/{d.name}/rootfs/run" for d in sorted(lxc.iterdir())) if lxc.is_dir() else ()
    return ("run", "proc/sys/kernel/random/boot_id", "var/log/fakehost") + cts


def _walk(tree, exclude):
    """(relative name, path) of every entry of the tree in sorted order, leaving out ``exclude`` (default: volatile)."""
    t = Path(tree)
    exclude = volatile(t) if exclude is None else exclude
    for p in sorted(t.rglob("*")):
        name = p.relative_to(t).as_posix()
        if not any(name == e or name.startswith(e.rstrip("/") + "/") for e in exclude):
            yield name, p


# Ownership records hold the id of the Pulumi resource that owns a unit (gpuhosts/provider.py): ids are random,
# so two hosts converged by different resources differ there by design; their names still count.
OWNER_RECORDS = "var/lib/gpuhosts/owners/"


def tree_digest(tree, exclude=None) -> str:
    """sha256 over relative paths, modes, symlink targets and contents (``exclude``: volatile paths); ownership
    records count by name only."""
    h = hashlib.sha256()
    for name, p in _walk(tree, exclude):
        h.update(f"{name}\0{p.lstat().st_mode:o}\0".encode())
        if p.is_symlink():
            h.update(b"L" + os.readlink(p).encode())
        elif name.startswith(OWNER_RECORDS):
            h.update(b"O")
        elif p.is_file():
            h.update(b"F" + hashlib.sha256(p.read_bytes()).digest())
        h.update(b"\n")
    return h.hexdigest()


def tree_listing(tree, exclude=None) -> dict:
    """path -> content/target summary; diff two of them to see what a digest mismatch is about."""
    out = {}
    for name, p in _walk(tree, exclude):
        val = ("-> " + os.readlink(p)) if p.is_symlink() else (
            hashlib.sha256(p.read_bytes()).hexdigest()[:12] if p.is_file() else "dir")
        out[name] = f"{p.lstat().st_mode:o} {val}"
    return out
