"""A reboot of the simulated host, in the order the configuration takes effect on a real one.

1. Power off: ``run/`` goes; no module is loaded, no device bound, every driver_override is empty;
   ``/dev/nvidia*`` nodes vanish; a new boot id.
2. ``/proc/cmdline`` from the boot loader in use (systemd-boot: its loader entry, written by
   ``proxmox-boot-tool refresh``; GRUB: ``boot/grub/grub.cfg``, written by ``update-grub``).
3. initramfs, from what ``boot/initrd.img-<kernel>`` holds (only ``update-initramfs`` changes it): its
   ``scripts/init-top/*`` run, then the modules of its ``conf/modules`` (from ``etc/initramfs-tools/modules``)
   load with its modprobe.d; an install command there runs only programs the image holds.
4. Root file system, with the live configuration: enabled units ordered before module loading
   (``DefaultDependencies=no`` + ``Before=sysinit.target`` / ``systemd-modules-load.service`` / udev) start;
   ``etc/modules`` and ``etc/modules-load.d/*.conf`` load (honouring ``options``, ``softdep … pre:``,
   ``install``); then udev coldplug loads a driver for each device still unbound: NVIDIA GPU -> ``nvidia`` if
   installed for the kernel and not blacklisted, else ``nouveau`` unless blacklisted; HDMI audio ->
   ``snd_hda_intel``. (A simplification: the real udev would also load modules for devices already claimed.)
5. The other enabled units start in an order systemd could choose (``systemd.boot_order``): those ordered
   before ``pve-guests.service`` first, then the guests with ``onboot: 1`` (VMs, then containers), then the rest.
   Guests that fail to start are listed in ``run/fakehost/boot.log``. No unit makes an NVIDIA device node unless
   it runs nvidia-modprobe (or a tool that calls it): the kernel makes none.
"""
import os
import shutil
import tempfile
import uuid
from pathlib import Path

from . import kernel, pve, systemd
from .system import ModprobeConf, boot_cmdline, modprobe, modules_list, parse_initrd, run_in_image, unpack_initrd
from .util import Fail, settings, write


def _log(r, msg):
    with open(r / "run/fakehost/boot.log", "a") as f:
        f.write(msg + "\n")


def _load(r, mod, conf, stage):
    try:
        modprobe(r, mod, conf)
    except Fail as e:
        _log(r, f"{stage}: {e.msg}")


def power_off(r):
    for vmid in pve.vmids(r, pve.CT):
        pve.ct_power_off(r, vmid)
    shutil.rmtree(r / "run", ignore_errors=True)
    (r / "run").mkdir()
    for a in kernel.pci_devices(r):
        (kernel.dev_dir(r, a) / "driver").unlink(missing_ok=True)
        kernel.set_override(r, a, "")
    for d in ("sys/module", "sys/bus/pci/drivers", "proc/driver"):
        shutil.rmtree(r / d, ignore_errors=True)
    (r / "sys/module").mkdir(parents=True)
    (r / "sys/bus/pci/drivers").mkdir(parents=True)
    for p in list((r / "dev").glob("nvidia*")):
        shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    kernel.save(r, {"modules": [], "options": {}, "dynids": {}, "persistence": {}, "holders": [],
                    "persistenced": None, "next_pid": 2100})


def boot(r):
    kv = settings(r)["kernel"]
    write(r / "proc/sys/kernel/random/boot_id", str(uuid.uuid4()) + "\n")
    write(r / "proc/cmdline", boot_cmdline(r) + "\n")
    kernel.write_proc_devices(r)
    write(r / "run/fakehost/boot.log", "")

    # initramfs stage: init mounts sysfs and proc, runs scripts/init-top, then load_modules runs
    # `/sbin/modprobe $m` for each line of conf/modules (initramfs-tools 0.142 init, scripts/functions
    # load_modules) — all inside the image: its modprobe.d, and only the programs it holds.
    image = parse_initrd((r / f"boot/initrd.img-{kv}").read_bytes())
    with tempfile.TemporaryDirectory() as tmp:
        unpacked = Path(tmp)
        unpack_initrd(image, unpacked)
        top = unpacked / "scripts/init-top"
        for script in sorted(top.iterdir()) if top.is_dir() else []:
            if script.is_file() and os.access(script, os.X_OK) and run_in_image(
                    r, unpacked, [f"/scripts/init-top/{script.name}"]):
                _log(r, f"initramfs: /scripts/init-top/{script.name} failed")
        loads = (unpacked / "conf/modules").read_text().splitlines() if (unpacked / "conf/modules").is_file() else []
        for line in loads:
            if line.strip() and not line.lstrip().startswith("#"):
                mod, *params = line.split()
                try:
                    modprobe(r, mod, extra=" ".join(params), image=unpacked)
                except Fail as e:
                    _log(r, f"initramfs: {e.msg}")

    # root file system
    conf = ModprobeConf.live(r)
    units = systemd.enabled_units(r)
    early = [u for u in units if systemd.is_early(systemd.unit(r, u))]
    for u in early:
        if systemd.start(r, u):
            _log(r, f"unit {u} failed")
    mods = modules_list((r / "etc/modules").read_text()) if (r / "etc/modules").exists() else []
    for p in sorted((r / "etc/modules-load.d").glob("*.conf")) if (r / "etc/modules-load.d").is_dir() else []:
        mods += modules_list(p.read_text())
    for mod in mods:
        _load(r, mod, conf, "modules-load")
    for a in kernel.pci_devices(r):  # udev coldplug
        if kernel.driver_of(r, a):
            continue
        if kernel.is_nv_gpu(r, a):
            cands = [m for m in ("nvidia", "nouveau") if m not in conf.blacklist and kernel.available(r, m)]
        elif kernel.is_audio(r, a):
            cands = [m for m in ("snd_hda_intel",) if m not in conf.blacklist]
        else:
            cands = []
        for m in cands[:1]:
            _load(r, m, conf, "udev")
        kernel.probe(r, a)
    # systemd starts the rest of the transaction in an order its Before=/After= allow; the guests start when
    # pve-guests.service's turn comes (startall: VMs, then containers).
    before, after = systemd.boot_order(r, [u for u in units if u not in early and u != systemd.PVE_GUESTS])
    for u in before:
        if systemd.start(r, u):
            _log(r, f"unit {u} failed")
    _start_guests(r)
    for u in after:
        if systemd.start(r, u):
            _log(r, f"unit {u} failed")


def _start_guests(r):
    for vmid in pve.vmids(r, pve.VM):
        if pve.read_conf(r, pve.VM, vmid)[1].get("onboot") == "1":
            try:
                pve.vm_start(r, vmid)
            except Fail as e:
                _log(r, f"VM {vmid}: {e.msg}")
    for vmid in pve.vmids(r, pve.CT):
        if pve.read_conf(r, pve.CT, vmid)[1].get("onboot") == "1":
            try:
                pve.ct_start(r, vmid)
            except Fail as e:
                _log(r, f"CT {vmid}: {e.msg}")
    write(r / systemd.ACTIVE / systemd.PVE_GUESTS, "")


def reboot(r):
    power_off(r)
    boot(r)


def cmd_reboot(argv):
    from .util import root
    reboot(root())
