"""pct and qm over ``etc/pve/{lxc,qemu-server}/<vmid>.conf``; running state under ``run/``.

A container's disk is ``var/lib/lxc/<vmid>/rootfs``. ``pct start`` records the device nodes the
container got (``run/lxc/<vmid>.devices``): devN entries added later are seen only after a restart.
Bind mounts (``mpN: /host/path,mp=/ct/path``) are symlinks in the rootfs to the host path while the container
runs (also when set on a running one); a directory they cover is moved aside to ``<path>.fakehost-shadowed``
until the mount goes. ``run/lxc/<vmid>.mounts`` lists what is mounted. The container's own ``run/`` is its
tmpfs: stopping the container clears it, and starting it starts its enabled units.
"""
import json
import os
import re
import shutil
import subprocess

from . import host_env, kernel
from .util import Fail, root, write

CT, VM = "lxc", "qemu-server"


# ---- config files ---------------------------------------------------------------------------------------

def conf_path(r, kind, vmid):
    return r / "etc/pve" / kind / f"{vmid}.conf"


def vmids(r, kind) -> list:
    d = r / "etc/pve" / kind
    return sorted(int(p.stem) for p in d.glob("*.conf")) if d.is_dir() else []


def read_conf(r, kind, vmid):
    """(description comment lines, {key: value}, raw lxc.* lines, text of snapshot sections)."""
    p = conf_path(r, kind, vmid)
    if not p.exists():
        raise Fail(f"Configuration file 'nodes/kpro5/{kind}/{vmid}.conf' does not exist", 255)
    text = p.read_text()
    main, _, rest = text.partition("\n[")
    desc, keys, raw = [], {}, []
    for line in main.splitlines():
        if line.startswith("#"):
            desc.append(line)
        elif line.startswith("lxc."):
            raw.append(line)
        elif ":" in line:
            k, v = line.split(":", 1)
            keys[k.strip()] = v.strip()
    return desc, keys, raw, ("\n[" + rest) if rest else ""


def write_conf(r, kind, vmid, desc, keys, raw, rest=""):
    # Proxmox writes keys sorted, raw lxc.* keys after them
    body = "".join(l + "\n" for l in desc) + "".join(f"{k}: {keys[k]}\n" for k in sorted(keys))
    write(conf_path(r, kind, vmid), body + "".join(l + "\n" for l in raw) + rest)


def print_conf(r, kind, vmid):
    desc, keys, raw, _ = read_conf(r, kind, vmid)
    if desc:
        print("description: " + "%0A".join(l[1:] for l in desc))
    for k in sorted(keys):
        print(f"{k}: {keys[k]}")
    for l in raw:
        k, v = l.split(":", 1) if ":" in l else l.split("=", 1)
        print(f"{k.strip()}: {v.strip()}")


# ---- running state --------------------------------------------------------------------------------------

def ct_running(r, vmid) -> bool:
    return (r / f"run/lxc/{vmid}.running").exists()


def vm_running(r, vmid) -> bool:
    return (r / f"run/qemu-server/{vmid}.pid").exists()


def vm_functions(r, vmid) -> list:
    """PCI functions of a VM's hostpciN entries ('0000:01:00' is the whole slot)."""
    out = []
    for k, v in read_conf(r, VM, vmid)[1].items():
        if re.fullmatch(r"hostpci\d+", k):
            for host in v.split(",")[0].removeprefix("host=").split(";"):
                host = host if host.count(":") == 2 else "0000:" + host
                out += [a for a in kernel.pci_devices(r) if a == host or (a.startswith(host + ".") and "." not in host)]
    return out


def ct_root(r, vmid):
    return r / f"var/lib/lxc/{vmid}/rootfs"


def ct_devices(r, vmid) -> list:
    return [v.split(",")[0] for k, v in sorted(read_conf(r, CT, vmid)[1].items()) if re.fullmatch(r"dev\d+", k)]


def parse_mp(key, val):
    """(host path, container path) of a bind mount; None for a storage volume (not simulated)."""
    parts = val.split(",")
    opts = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
    source, target = parts[0].removeprefix("volume="), opts.get("mp")
    if not target:
        raise Fail(f"400 Parameter verification failed.\n{key}: invalid format - format error\n"
                   f"{key}.mp: property is missing and it is not optional", 255)
    if not target.startswith("/") or ".." in target.split("/"):
        raise Fail(f"400 Parameter verification failed.\n{key}: invalid format - invalid path: {target}", 255)
    return (source, target) if source.startswith("/") else None


def ct_binds(r, vmid) -> dict:
    return {k: m for k, v in read_conf(r, CT, vmid)[1].items()
            if re.fullmatch(r"mp\d+", k) and (m := parse_mp(k, v))}


def _mounts_file(r, vmid):
    return r / f"run/lxc/{vmid}.mounts"


def mount(r, vmid, key, source, target) -> dict:
    link = ct_root(r, vmid) / target.lstrip("/")
    shadow = link.with_name(link.name + ".fakehost-shadowed")
    shadowed = os.path.lexists(link)
    if shadowed:
        link.rename(shadow)
    link.parent.mkdir(parents=True, exist_ok=True)
    # relative, so that a copied tree mounts its own host path
    os.symlink(os.path.relpath(r.resolve() / source.lstrip("/"), link.parent.resolve()), link)
    return {"key": key, "source": source, "target": target, "shadowed": shadowed}


def unmount(r, vmid, m):
    link = ct_root(r, vmid) / m["target"].lstrip("/")
    if link.is_symlink():
        link.unlink()
    shadow = link.with_name(link.name + ".fakehost-shadowed")
    if m["shadowed"] and os.path.lexists(shadow):
        shadow.rename(link)


def sync_mounts(r, vmid, want: dict):
    """Mounts what ``want`` ({key: (source, target)}) has and the container lacks; unmounts the rest."""
    p = _mounts_file(r, vmid)
    have = json.loads(p.read_text()) if p.exists() else []
    keep = []
    for m in reversed(have):  # inner mounts first
        if want.get(m["key"]) == (m["source"], m["target"]):
            keep.insert(0, m)
        else:
            unmount(r, vmid, m)
    for key, (source, target) in sorted(want.items(), key=lambda kv: kv[1][1]):
        if key not in {m["key"] for m in keep}:
            keep.append(mount(r, vmid, key, source, target))
    if keep:
        write(p, json.dumps(keep) + "\n")
    else:
        p.unlink(missing_ok=True)


def ct_power_off(r, vmid):
    """What goes with the container's processes: its mounts and its tmpfs."""
    sync_mounts(r, vmid, {})
    shutil.rmtree(ct_root(r, vmid) / "run", ignore_errors=True)


def ct_start(r, vmid):
    if ct_running(r, vmid):
        raise Fail(f"CT {vmid} already running", 255)
    seen = []
    for path in ct_devices(r, vmid):
        node = r / path.lstrip("/")
        if not node.exists():
            raise Fail(f"Device {path} does not exist\nstartup for container '{vmid}' failed", 255)
        seen.append([path, node.read_text().strip()])
    binds = ct_binds(r, vmid)
    for source, target in binds.values():
        if not (r / source.lstrip("/")).exists():
            raise Fail(f"lxc-start: {vmid}: ../src/lxc/conf.c: mount_entry: 2453 No such file or directory - Failed to "
                       f"mount \"{source}\" on \"/usr/lib/x86_64-linux-gnu/lxc/rootfs{target}\"\n"
                       f"startup for container '{vmid}' failed", 255)
    write(r / f"run/lxc/{vmid}.devices", json.dumps(seen) + "\n")
    sync_mounts(r, vmid, binds)
    write(r / f"run/lxc/{vmid}.running", f"{kernel.new_pid(r)}\n")
    from . import systemd
    croot = ct_root(r, vmid)
    for u in systemd.enabled_units(croot):
        systemd.start(croot, u, {"FAKEHOST_TREE": str(r), "FAKEHOST_CONTAINER": str(vmid)})


def ct_stop(r, vmid):
    if not ct_running(r, vmid):
        raise Fail(f"CT {vmid} not running", 255)
    ct_power_off(r, vmid)
    for f in (f"run/lxc/{vmid}.running", f"run/lxc/{vmid}.devices"):
        (r / f).unlink(missing_ok=True)
    # processes of the container that held GPU nodes are gone
    st = kernel.kstate(r)
    st["holders"] = [h for h in st["holders"] if h.get("container") != vmid]
    kernel.save(r, st)


def ct_seen_devices(t, vmid) -> list:
    p = t / f"run/lxc/{vmid}.devices"
    return json.loads(p.read_text()) if p.exists() else []


def vm_start(r, vmid):
    """Proxmox binds the VM's functions to vfio-pci at start (and leaves them there afterwards)."""
    if vm_running(r, vmid):
        raise Fail(f"VM {vmid} already running", 255)
    from .system import modprobe
    modprobe(r, "vfio_pci")
    for a in vm_functions(r, vmid):
        if kernel.driver_of(r, a) not in (None, "vfio-pci"):
            kernel.unbind(r, a)
        if kernel.driver_of(r, a) is None:
            kernel.add_dynid(r, "vfio-pci", kernel.pci_id(r, a))
        if kernel.driver_of(r, a) != "vfio-pci":
            raise Fail(f"Cannot bind {a} to vfio\nstart failed: QEMU exited with code 1", 255)
    write(r / f"run/qemu-server/{vmid}.pid", f"{kernel.new_pid(r)}\n")


def vm_stop(r, vmid):
    (r / f"run/qemu-server/{vmid}.pid").unlink(missing_ok=True)


# ---- pct ------------------------------------------------------------------------------------------------

def _vmid(argv, i=1):
    if len(argv) <= i or not argv[i].isdigit():
        raise Fail("400 not enough arguments\npct <command> <vmid> [OPTIONS]", 255)
    return int(argv[i])


def cmd_pct(argv):
    r = root()
    sub = argv[0] if argv else ""
    if sub == "list":
        print("VMID       Status     Lock         Name                ")
        for v in vmids(r, CT):
            print(f"{v:<10} {'running' if ct_running(r, v) else 'stopped':<10} {'':<12} "
                  f"{read_conf(r, CT, v)[1].get('hostname', ''):<20}")
        return 0
    vmid = _vmid(argv)
    read_conf(r, CT, vmid)
    if sub in ("config", "pending"):
        print_conf(r, CT, vmid)
    elif sub == "status":
        print(f"status: {'running' if ct_running(r, vmid) else 'stopped'}")
    elif sub == "start":
        ct_start(r, vmid)
    elif sub in ("stop", "shutdown"):
        ct_stop(r, vmid)
    elif sub == "reboot":
        if ct_running(r, vmid):
            ct_stop(r, vmid)
            ct_start(r, vmid)
    elif sub == "set":
        pct_set(r, vmid, argv[2:])
    elif sub == "push":
        if not ct_running(r, vmid):
            raise Fail("can only push files to a running container", 255)
        src, dst = argv[2], argv[3]
        s = r / src.lstrip("/") if (r / src.lstrip("/")).exists() else src
        if not os.path.exists(s):
            raise Fail(f"can't open '{src}' - No such file or directory", 255)
        d = ct_root(r, vmid) / dst.lstrip("/")
        d.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(s, d)
        d.chmod(0o644)
        for opt, val in zip(argv[4::2], argv[5::2]):
            if opt in ("--perms", "-perms"):
                d.chmod(int(val, 8))
    elif sub == "exec":
        return pct_exec(r, vmid, argv[2:])
    else:
        raise Fail(f"unknown command 'pct {sub}'", 255)


def pct_set(r, vmid, opts):
    desc, keys, raw, rest = read_conf(r, CT, vmid)
    it = iter(opts)
    for o in it:
        key, val = o.lstrip("-"), next(it, None)
        if val is None:
            raise Fail(f"400 Parameter verification failed.\n{key}: missing value", 255)
        if key == "delete":
            for k in val.replace(";", ",").split(","):
                keys.pop(k.strip(), None)
            continue
        if re.fullmatch(r"dev\d+", key):
            path = val.split(",")[0].removeprefix("path=")
            if not path.startswith("/dev/"):
                raise Fail(f"400 Parameter verification failed.\n{key}: invalid format - path must start with /dev/", 255)
            if not (r / path.lstrip("/")).exists():
                raise Fail(f"Device {path} does not exist", 255)
        if re.fullmatch(r"mp\d+", key) and (bind := parse_mp(key, val)) and not (r / bind[0].lstrip("/")).exists():
            raise Fail(f"400 Parameter verification failed.\n{key}: mount point source '{bind[0]}' does not exist", 255)
        keys[key] = val
    write_conf(r, CT, vmid, desc, keys, raw, rest)
    if ct_running(r, vmid):  # bind mounts are hot-plugged
        sync_mounts(r, vmid, ct_binds(r, vmid))


def pct_exec(r, vmid, argv):
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        raise Fail("missing command", 255)
    if not ct_running(r, vmid):
        raise Fail(f"container '{vmid}' not running!", 255)
    croot = ct_root(r, vmid)
    from .system import map_program

    # container paths name files on the container's disk; programs the stand-ins provide stay stand-ins
    def inside(a):
        if a.startswith("/") and (croot / a.lstrip("/")).exists():
            return str(croot / a.lstrip("/"))
        return a
    prog = argv[0]
    if prog.startswith("/") and not (croot / prog.lstrip("/")).exists():
        prog = map_program(croot, prog)
    env = host_env(croot)
    env.pop("GPUHOSTS_SYSFS_HOOK", None)
    env.update(FAKEHOST_TREE=str(r), FAKEHOST_CONTAINER=str(vmid))
    try:
        return subprocess.run([inside(prog), *map(inside, argv[1:])], env=env, cwd=croot).returncode
    except OSError as e:
        raise Fail(f'lxc-attach: {vmid}: ../src/lxc/attach.c: lxc_attach_run_command: 1841 {e.strerror} - '
                   f'Failed to exec "{argv[0]}"', 255)


# ---- qm -------------------------------------------------------------------------------------------------

def cmd_qm(argv):
    r = root()
    sub = argv[0] if argv else ""
    if sub == "list":
        print(f"{'VMID':>10} {'NAME':<20} {'STATUS':<10} {'MEM(MB)':<10} {'BOOTDISK(GB)':>12} {'PID':<10}")
        for v in vmids(r, VM):
            keys = read_conf(r, VM, v)[1]
            disk = re.search(r"size=(\d+)G", keys.get(keys.get("bootdisk", "scsi0"), "") or "")
            pid = (r / f"run/qemu-server/{v}.pid").read_text().strip() if vm_running(r, v) else "0"
            print(f"{v:>10} {keys.get('name', ''):<20} {'running' if vm_running(r, v) else 'stopped':<10} "
                  f"{keys.get('memory', '2048'):<10} {float(disk.group(1) if disk else 0):>12.2f} {pid:<10}")
        return 0
    vmid = _vmid(argv)
    read_conf(r, VM, vmid)
    if sub in ("config", "pending"):
        print_conf(r, VM, vmid)
    elif sub == "status":
        print(f"status: {'running' if vm_running(r, vmid) else 'stopped'}")
    elif sub == "start":
        vm_start(r, vmid)
    elif sub in ("stop", "shutdown"):
        vm_stop(r, vmid)
    else:
        raise Fail(f"unknown command 'qm {sub}'", 255)
