"""Kernel behaviour over the simulated tree: PCI driver binding, modules, the NVIDIA driver's state.

Volatile kernel state (module load order and options, persistence mode, processes holding device nodes)
lives in ``run/fakehost/kernel.json``; ``run/`` is what a reboot drops and what digests leave out.
CLI: ``python3 -m fakehost.kernel sysfs-hook <path>`` (the scripts' GPUHOSTS_SYSFS_HOOK) and
``python3 -m fakehost.kernel hold|release <node> [--compute] [--command NAME]`` for tests.
"""
import hashlib
import json
import os
import re
import sys
from pathlib import Path

from .util import Fail, kernel_release, rel, root, run_main, settings, write

PCI = "sys/bus/pci"
NV = "0x10de"
# device id -> (marketing name, memory MiB, VBIOS)
GPU_MODELS = {"0x2204": ("NVIDIA GeForce RTX 3090", 24576, "94.02.42.00.a9"),
              "0x2230": ("NVIDIA RTX A6000", 49140, "94.02.5c.00.02")}
# module -> (modules it needs, PCI driver it registers)
MODULES = {"vfio": ((), None), "vfio_iommu_type1": (("vfio",), None),
           "vfio_pci": (("vfio", "vfio_iommu_type1"), "vfio-pci"),
           "nvidia": ((), "nvidia"), "nvidia_uvm": (("nvidia",), None),
           "nvidia_modeset": (("nvidia",), None), "nvidia_drm": (("nvidia_modeset",), None),
           "nouveau": ((), "nouveau"), "snd_hda_intel": ((), "snd_hda_intel")}
NV_KO = {"nvidia": "nvidia.ko", "nvidia_uvm": "nvidia-uvm.ko",
         "nvidia_modeset": "nvidia-modeset.ko", "nvidia_drm": "nvidia-drm.ko"}
DRIVER_FILES = ("bind", "unbind", "new_id", "remove_id")
# /proc/devices of kpro5 without NVIDIA; vfio's line follows the vfio module
BASE_CHAR = [(1, "mem"), (4, "/dev/vc/0"), (4, "tty"), (4, "ttyS"), (5, "/dev/tty"), (5, "/dev/console"),
             (5, "/dev/ptmx"), (5, "ttyprintk"), (7, "vcs"), (10, "misc"), (13, "input"), (21, "sg"), (29, "fb"),
             (89, "i2c"), (108, "ppp"), (128, "ptm"), (136, "pts"), (180, "usb"), (189, "usb_device"),
             (202, "cpu/msr"), (203, "cpu/cpuid"), (226, "drm"), (240, "ttyDBC"), (241, "aux"), (242, "cec"),
             (243, "lirc"), (244, "hidraw"), (245, "rtc"), (246, "dma_heap"), (247, "dimmctl"), (248, "ndctl"),
             (249, "nvme-generic"), (250, "nvme"), (251, "bsg"), (252, "watchdog"), (253, "ptp"), (254, "pps"),
             (508, "kfd")]
BASE_BLOCK = [(7, "loop"), (8, "sd"), (9, "md"), (65, "sd"), (128, "sd"), (230, "zvol"), (252, "device-mapper"),
              (253, "virtblk"), (254, "mdp"), (259, "blkext")]
NV_DATE = "Wed Oct 29 20:48:32 UTC 2025"


# ---- volatile state -------------------------------------------------------------------------------------

def kstate(r: Path) -> dict:
    p = r / "run/fakehost/kernel.json"
    if p.exists():
        return json.loads(p.read_text())
    mods = sorted(m.name for m in (r / "sys/module").iterdir()) if (r / "sys/module").is_dir() else []
    return {"modules": mods, "options": {}, "dynids": {}, "persistence": {}, "holders": [],
            "persistenced": None, "next_pid": 2100}


def save(r: Path, st: dict):
    write(r / "run/fakehost/kernel.json", json.dumps(st, indent=1, sort_keys=True) + "\n")


def new_pid(r: Path) -> int:
    st = kstate(r)
    st["next_pid"] += 17
    save(r, st)
    return st["next_pid"]


# ---- PCI devices ----------------------------------------------------------------------------------------

def dev_dir(r, addr) -> Path:
    return r / PCI / "devices" / addr


def pci_devices(r) -> list:
    return sorted(p.name for p in (r / PCI / "devices").iterdir())


def attr(r, addr, name) -> str:
    return (dev_dir(r, addr) / name).read_text().strip()


def driver_of(r, addr):
    link = dev_dir(r, addr) / "driver"
    return os.path.basename(os.readlink(link)) if link.is_symlink() else None


def override_of(r, addr) -> str:
    v = attr(r, addr, "driver_override")
    return "" if v == "(null)" else v


def is_nv_gpu(r, addr) -> bool:
    return attr(r, addr, "vendor") == NV and attr(r, addr, "class").startswith("0x03")


def is_audio(r, addr) -> bool:
    return attr(r, addr, "class").startswith("0x0403")


def pci_id(r, addr) -> str:
    return f"{attr(r, addr, 'vendor')[2:]}:{attr(r, addr, 'device')[2:]}"


def driver_loaded(r, drv) -> bool:
    return (r / PCI / "drivers" / drv).is_dir()


def loaded_drivers(r) -> list:
    """PCI drivers in registration (module load) order: the first that matches an unbound device gets it."""
    out = [MODULES[m][1] for m in kstate(r)["modules"] if m in MODULES and MODULES[m][1]]
    return [d for d in out if driver_loaded(r, d)]


def table_match(r, drv, addr) -> bool:
    st = kstate(r)
    if drv == "nvidia":
        return is_nv_gpu(r, addr)
    if drv == "nouveau":  # modeset=0 leaves the GPUs alone
        return is_nv_gpu(r, addr) and st["options"].get("nouveau", {}).get("modeset") != "0"
    if drv == "snd_hda_intel":
        return is_audio(r, addr)
    return pci_id(r, addr) in st["dynids"].get(drv, [])  # vfio-pci: ids= option and new_id only


def matches(r, drv, addr) -> bool:
    o = override_of(r, addr)
    return drv == o if o else table_match(r, drv, addr)


def nv_minor(r, addr):
    info = r / "proc/driver/nvidia/gpus" / addr / "information"
    if not info.exists():
        return None
    return int(re.search(r"Device Minor:\s*(\d+)", info.read_text()).group(1))


def nv_gpus(r) -> list:
    """(addr, minor) of the GPUs bound to nvidia, in PCI order (nvidia-smi's index order)."""
    return [(a, nv_minor(r, a)) for a in pci_devices(r) if driver_of(r, a) == "nvidia"]


def gpu_uuid(addr) -> str:
    h = hashlib.sha256(("kpro5-" + addr).encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def nv_module_version(r):
    p = r / "sys/module/nvidia/version"
    return p.read_text().strip() if p.exists() else None


def _bind_nvidia(r, addr):
    used = {m for _, m in nv_gpus(r)}
    pre = settings(r).get("nvidia_minors", {})
    minor = pre.get(addr)
    if minor is None or minor in used:
        minor = min(set(range(248)) - used - {v for k, v in pre.items() if k != addr} or set(range(248)) - used)
    name, _, vbios = GPU_MODELS.get(attr(r, addr, "device"), ("NVIDIA Graphics Device", 0, "00.00.00.00.00"))
    open_mod = "Open Kernel Module" in (r / "proc/driver/nvidia/version").read_text()
    fw = nv_module_version(r) if open_mod else "N/A"
    irq = 100 + int(addr.split(":")[1], 16) // 0x20
    write(r / "proc/driver/nvidia/gpus" / addr / "information",
          f"Model: \t\t {name}\nIRQ:   \t\t {irq}\nGPU UUID: \t {gpu_uuid(addr)}\nVideo BIOS: \t {vbios}\n"
          f"Bus Type: \t PCIe\nDMA Size: \t 47 bits\nDMA Mask: \t 0x7fffffffffff\nBus Location: \t {addr}\n"
          f"Device Minor: \t {minor}\nGPU Firmware: \t {fw}\nGPU Excluded:\t No\n")
    # No /dev/nvidia<minor>: the module registers char major 195 but makes no node, and the .run installs no udev
    # rule; nvidia-modprobe (nvtools.cmd_nvidia_modprobe) makes them (docs/fakehost-contract.md, "Device nodes").


def bind(r, addr, drv):
    """Writing ``addr`` to drivers/<drv>/bind."""
    if not dev_dir(r, addr).is_dir() or not driver_loaded(r, drv) or driver_of(r, addr) or not matches(r, drv, addr):
        raise Fail("write error: No such device")
    if drv == "nvidia":
        _bind_nvidia(r, addr)
    os.symlink(f"../../drivers/{drv}", dev_dir(r, addr) / "driver")


def holders_of(r, addr) -> list:
    """Why the GPU at ``addr`` cannot leave nvidia: persistence mode and processes holding /dev/nvidiaN."""
    st, minor = kstate(r), nv_minor(r, addr)
    why = []
    if st["persistence"].get(addr):
        why.append(f"persistence mode is on ({st['persistence'][addr]})")
    why += [f"pid {h['pid']} ({h['command']}) holds {h['node']}" for h in st["holders"]
            if h["node"] == f"/dev/nvidia{minor}"]
    return why


# What a running VM holds: the functions QEMU was started with, recorded by `qm start` beside its pid. A running
# VM's hostpciN changes wait as pending ones for its next start (qemu-server src/PVE/API2/Qemu.pm: hostpci is not
# hotpluggable), and QEMU keeps the vfio devices it opened until it exits.
VM_RUN = "run/qemu-server"


def running_vms_using(r, addr) -> list:
    run = r / VM_RUN
    held = {int(pid.stem): run / f"{pid.stem}.functions" for pid in run.glob("*.pid")} if run.is_dir() else {}
    return sorted(vmid for vmid, functions in held.items()
                  if functions.exists() and addr in json.loads(functions.read_text()))


def unbind(r, addr, drv=None):
    """Writing ``addr`` to drivers/<drv>/unbind (directly or through the device's driver link)."""
    cur = driver_of(r, addr)
    if cur is None or (drv and drv != cur):
        raise Fail("write error: No such device")
    # The real write blocks forever in these cases; a test must see a fast failure instead.
    if cur == "nvidia" and holders_of(r, addr):
        raise Fail(f"fakehost: unbinding {addr} from nvidia would hang: " + "; ".join(holders_of(r, addr)), 124)
    if cur == "vfio-pci" and running_vms_using(r, addr):
        raise Fail(f"fakehost: unbinding {addr} from vfio-pci would hang: used by running VM "
                   + ", ".join(map(str, running_vms_using(r, addr))), 124)
    if cur == "nvidia":
        minor = nv_minor(r, addr)
        (r / f"dev/nvidia{minor}").unlink(missing_ok=True)
        info = r / "proc/driver/nvidia/gpus" / addr
        for f in info.iterdir():
            f.unlink()
        info.rmdir()
        st = kstate(r)
        st["persistence"].pop(addr, None)
        save(r, st)
    (dev_dir(r, addr) / "driver").unlink()


def probe(r, addr) -> bool:
    """drivers_probe: an unbound device goes to the first loaded driver that matches it."""
    if driver_of(r, addr):
        return True
    for drv in loaded_drivers(r):
        if matches(r, drv, addr):
            bind(r, addr, drv)
            return True
    return False


def set_override(r, addr, value):
    write(dev_dir(r, addr) / "driver_override", (value.strip() or "(null)") + "\n")


def add_dynid(r, drv, ident):
    """new_id (and vfio-pci's ids= option): the driver now claims this id and takes unbound devices with it."""
    st = kstate(r)
    ids = st["dynids"].setdefault(drv, [])
    if ident not in ids:
        ids.append(ident)
    save(r, st)
    for a in pci_devices(r):
        if not driver_of(r, a) and pci_id(r, a) == ident and matches(r, drv, a):
            bind(r, a, drv)


# ---- modules --------------------------------------------------------------------------------------------

def norm(mod: str) -> str:
    return mod.replace("-", "_")


def is_loaded(r, mod) -> bool:
    return (r / "sys/module" / norm(mod)).is_dir()


def module_file(r, mod):
    """The installed .ko of an NVIDIA module for the running kernel, None when not installed."""
    base = r / "lib/modules" / kernel_release(r)
    for d in ("updates/dkms", "kernel/drivers/video"):
        if (base / d / NV_KO[mod]).exists():
            return base / d / NV_KO[mod]
    return None


def available(r, mod) -> bool:
    return mod in MODULES and (mod not in NV_KO or module_file(r, mod) is not None)


def write_proc_devices(r):
    s, mods = settings(r), kstate(r)["modules"]
    chars = list(BASE_CHAR)
    if "vfio" in mods:
        chars.append((511, "vfio"))
    if "nvidia" in mods:
        chars += [(195, "nvidia"), (195, "nvidiactl"), (s["caps_major"], "nvidia-caps")]
    if "nvidia_uvm" in mods:
        chars.append((s["uvm_major"], "nvidia-uvm"))
    chars.sort(key=lambda c: c[0])
    body = "".join(f"{m:3d} {n}\n" for m, n in chars)
    write(r / "proc/devices", "Character devices:\n" + body + "\nBlock devices:\n"
          + "".join(f"{m:3d} {n}\n" for m, n in BASE_BLOCK))


def insert_module(r, mod, options=None):
    """Loads one module (its dependencies must be loaded) and lets its driver probe unbound devices."""
    mod = norm(mod)
    if is_loaded(r, mod):
        return
    if not available(r, mod):
        raise Fail(f"modprobe: FATAL: Module {mod} not found in directory /lib/modules/{kernel_release(r)}")
    drv = MODULES[mod][1]
    if mod == "nvidia":
        # nvidia.ko fails to load when nouveau is there or when it finds no GPU it may drive
        if is_loaded(r, "nouveau") or not any(not driver_of(r, a) and matches(r, "nvidia", a) for a in pci_devices(r)):
            raise Fail("modprobe: ERROR: could not insert 'nvidia': No such device")
        ko = module_file(r, mod).read_text()
        ver = re.search(r"version=(\S+)", ko).group(1)
        if "type=open" in ko:
            line = f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {ver}  Release Build  (dvs-builder@U22)  {NV_DATE}"
        else:
            line = f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {ver}  {NV_DATE}"
        write(r / "proc/driver/nvidia/version", line + "\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14) \n")
        write(r / "sys/module/nvidia/version", ver + "\n")
    write(r / "sys/module" / mod / "initstate", "live\n")
    st = kstate(r)
    st["modules"].append(mod)
    st["options"][mod] = dict(options or {})
    save(r, st)
    if drv:
        for f in DRIVER_FILES:
            write(r / PCI / "drivers" / drv / f, "")
    write_proc_devices(r)
    if mod == "vfio_pci":
        for ident in filter(None, (options or {}).get("ids", "").split(",")):
            add_dynid(r, "vfio-pci", ident)
    if drv:
        for a in pci_devices(r):
            if not driver_of(r, a) and matches(r, drv, a):
                bind(r, a, drv)


def remove_module(r, mod):
    mod = norm(mod)
    if not is_loaded(r, mod):
        return
    st = kstate(r)
    users = [m for m in st["modules"] if mod in MODULES.get(m, ((), None))[0]]
    drv = MODULES.get(mod, ((), None))[1]
    bound = [a for a in pci_devices(r) if drv and driver_of(r, a) == drv]
    # an open node pins its module: nvidia by /dev/nvidia* (GPUs, nvidiactl), nvidia_uvm by /dev/nvidia-uvm*
    pins = {"nvidia": ("/dev/nvidia",), "nvidia_uvm": ("/dev/nvidia-uvm",)}.get(mod, ())
    held = [h for h in st["holders"] if h["node"].startswith(pins) and not (
        mod == "nvidia" and h["node"].startswith("/dev/nvidia-uvm"))] if pins else []
    busy = users or held or (mod == "nvidia" and (any(holders_of(r, a) for a in bound) or st["persistenced"]))
    if busy or (drv == "vfio-pci" and any(running_vms_using(r, a) for a in bound)):
        raise Fail(f"modprobe: FATAL: Module {mod} is in use.")
    for a in bound:
        unbind(r, a)
    if drv:
        d = r / PCI / "drivers" / drv
        for f in d.iterdir():
            f.unlink()
        d.rmdir()
    for f in sorted((r / "sys/module" / mod).rglob("*"), reverse=True):
        f.rmdir() if f.is_dir() else f.unlink()
    (r / "sys/module" / mod).rmdir()
    if mod == "nvidia":
        for p in ("proc/driver/nvidia/version", "dev/nvidiactl"):
            (r / p).unlink(missing_ok=True)
        for p in ("proc/driver/nvidia/gpus", "proc/driver/nvidia", "proc/driver"):
            if (r / p).is_dir() and not any((r / p).iterdir()):
                (r / p).rmdir()
    if mod == "nvidia_uvm":
        for p in ("dev/nvidia-uvm", "dev/nvidia-uvm-tools"):
            (r / p).unlink(missing_ok=True)
    st = kstate(r)
    st["modules"].remove(mod)
    st["options"].pop(mod, None)
    if drv:
        st["dynids"].pop(drv, None)
    save(r, st)
    write_proc_devices(r)


# ---- persistence and holders ----------------------------------------------------------------------------

def set_persistence(r, addr, mode):
    st = kstate(r)
    if mode:
        st["persistence"][addr] = mode
    else:
        st["persistence"].pop(addr, None)
    save(r, st)


def hold(r, node, command="python3", compute=False, pid=None, container=None) -> int:
    """Records a process holding device node ``node`` (``/dev/nvidia2``); returns its pid.
    A holder inside ``container`` goes away when that container stops."""
    pid = pid or new_pid(r)
    st = kstate(r)
    gpu = next((a for a, m in nv_gpus(r) if node == f"/dev/nvidia{m}"), None)
    st["holders"].append({"node": node, "pid": pid, "command": command, "compute": compute, "gpu": gpu,
                          "container": container})
    save(r, st)
    return pid


def release(r, node=None, pid=None):
    st = kstate(r)
    st["holders"] = [h for h in st["holders"] if not ((node is None or h["node"] == node)
                                                      and (pid is None or h["pid"] == pid))]
    save(r, st)


# ---- sysfs hook -----------------------------------------------------------------------------------------

def sysfs_write(r, path):
    """React to the value just written to ``$root<path>`` as the kernel would have."""
    f = rel(r, path)
    value = f.read_text().strip() if f.exists() else ""
    parts = path.strip("/").split("/")
    if parts[:3] != ["sys", "bus", "pci"]:
        raise Fail(f"fakehost: {path} is not a PCI sysfs control file")
    rest = parts[3:]
    if rest == ["drivers_probe"]:
        write(f, "")
        if not dev_dir(r, value).is_dir():
            raise Fail("write error: No such device")
        probe(r, value)
    elif len(rest) == 3 and rest[0] == "devices" and rest[2] == "driver_override":
        set_override(r, rest[1], value)
    elif len(rest) == 4 and rest[0] == "devices" and rest[2:] == ["driver", "unbind"]:
        write(f, "")
        unbind(r, value)
    elif len(rest) == 3 and rest[0] == "drivers" and rest[2] in DRIVER_FILES:
        write(f, "")
        drv, op = rest[1], rest[2]
        if op == "bind":
            bind(r, value, drv)
        elif op == "unbind":
            unbind(r, value, drv)
        elif op == "new_id":
            v, d = value.split()[:2]
            add_dynid(r, drv, f"{v.lower().removeprefix('0x')}:{d.lower().removeprefix('0x')}")
        else:
            # drivers/pci/pci-driver.c remove_id_store: an id the driver does not hold is -ENODEV
            st = kstate(r)
            v, d = value.split()[:2]
            ident = f"{v.lower().removeprefix('0x')}:{d.lower().removeprefix('0x')}"
            if ident not in st["dynids"].get(drv, []):
                raise Fail("write error: No such device")
            st["dynids"][drv].remove(ident)
            save(r, st)
    else:
        raise Fail(f"fakehost: no kernel behaviour for writes to {path}")


def main(argv):
    if len(argv) == 2 and argv[0] == "sysfs-hook":
        return sysfs_write(root(), argv[1])
    if len(argv) >= 2 and argv[0] in ("hold", "release"):
        opts = {"--command": "python3"}
        it = iter(argv[2:])
        for a in it:
            opts[a] = True if a == "--compute" else next(it)
        if argv[0] == "hold":
            print(hold(root(), argv[1], opts["--command"], bool(opts.get("--compute"))))
        else:
            release(root(), argv[1])
        return 0
    raise Fail("usage: python3 -m fakehost.kernel sysfs-hook <path> | hold|release <node> [--compute] [--command NAME]", 2)


if __name__ == "__main__":
    sys.exit(run_main(main))
