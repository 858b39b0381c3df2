"""pct and qm over ``etc/pve/{lxc,qemu-server}/<vmid>.conf``; running state under ``run/``.

A container's disk is ``var/lib/lxc/<vmid>/rootfs``. ``pct start`` records the device nodes the
container got (``run/lxc/<vmid>.devices``): devN entries added later are seen only after a restart.
Bind mounts (``mpN: /host/path,mp=/ct/path``) are symlinks in the rootfs to the host path while the container
runs (also when set on a running one); a directory they cover is moved aside to ``<path>.fakehost-shadowed``
until the mount goes. ``run/lxc/<vmid>.mounts`` lists what is mounted. The container's own ``run/`` is its
tmpfs: stopping the container clears it, and starting it starts its enabled units.
"""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

from . import engines, host_env, kernel, systemd
from .programs import map_program
from .system import modprobe
from .util import Fail, ct_seen_devices, root, settings, write

CT, VM = "lxc", "qemu-server"


# ---- config files ---------------------------------------------------------------------------------------

def conf_path(r, kind, vmid):
    return r / "etc/pve" / kind / f"{vmid}.conf"


def vmids(r, kind) -> list:
    d = r / "etc/pve" / kind
    return sorted(int(p.stem) for p in d.glob("*.conf")) if d.is_dir() else []


def read_conf(r, kind, vmid):
    """(description comment lines, {key: value}, raw lxc.* lines, text of the sections after the main one)."""
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


# Pending changes: a `[pve:pending]` section after the main one and before the snapshots, holding the new values
# and `delete: key,key` (pve-container 5eb5574e src/PVE/LXC/Config.pm parse_pct_config / write_pct_config;
# pve-guest-common 73531017 src/PVE/AbstractConfig.pm parse_pending_delete / print_pending_delete, where a `!`
# prefix marks a forced deletion).
PENDING = "pve:pending"


def split_pending(rest: str, name: str = PENDING) -> tuple:
    """({key: value} of the pending section, the text of the other sections)."""
    pending, others = {}, ""
    for chunk in rest.split("\n[")[1:]:
        header, _, body = chunk.partition("\n")
        if header.strip().lower() == name.lower() + "]":
            for line in body.splitlines():
                if ":" in line:
                    k, v = line.split(":", 1)
                    pending[k.strip()] = v.strip()
        else:
            others += "\n[" + chunk
    return pending, others


def join_pending(pending: dict, others: str) -> str:
    section = ("\n[" + PENDING + "]\n" + "".join(f"{k}: {pending[k]}\n" for k in sorted(pending))) if pending else ""
    return section + others


def pending_deletes(pending: dict) -> list:
    return [k.lstrip("!") for k in re.split(r"[,;\s]+", pending.get("delete", "")) if k]


def _set_pending_deletes(pending: dict, names) -> None:
    names = sorted(set(names))
    if names:
        pending["delete"] = ",".join(names)
    else:
        pending.pop("delete", None)


def conf_view(keys: dict, pending: dict, current: bool) -> dict:
    """What `pct config` shows: the pending values taken in and pending deletions left out, unless --current
    (pve-guest-common 73531017 src/PVE/AbstractConfig.pm load_current_config)."""
    view = dict(keys)
    if not current:
        view.update({k: v for k, v in pending.items() if k != "delete"})
        for k in pending_deletes(pending):
            view.pop(k, None)
    return view


def vm_config(r, vmid, current=False) -> dict:
    """A VM's keys as `qm config` shows them: the `[PENDING]` section taken in unless ``current`` (qemu-server
    src/PVE/QemuServer.pm parse_vm_config; pve-guest-common 73531017 load_current_config); the description
    as one text."""
    desc, keys, _raw, rest = read_conf(r, VM, vmid)
    view = conf_view(keys, split_pending(rest, "PENDING")[0], current)
    if desc:
        view["description"] = "\n".join(l[1:] for l in desc)
    return view


def print_conf(r, kind, vmid, current=False):
    desc, keys, raw, rest = read_conf(r, kind, vmid)
    view = conf_view(keys, split_pending(rest)[0], current)
    if desc:
        view["description"] = "%0A".join(l[1:] for l in desc)
    if kind == CT:
        # pct config prints every key sorted, the description among them, lxc.* keys last
        # (pve-container 5eb5574e src/PVE/CLI/pct.pm, the `config` command's printer)
        lines = [f"{k}: {view[k]}" for k in sorted(view)]
    else:
        lines = ([f"description: {view.pop('description')}"] if "description" in view else []) + \
                [f"{k}: {view[k]}" for k in sorted(view)]
    for l in lines:
        print(l)
    for l in raw:
        k, v = l.split(":", 1) if ":" in l else l.split("=", 1)
        print(f"{k.strip()}: {v.strip()}")


def print_pending(r, kind, vmid):
    """`pct pending`: `cur`, `new` and `del` lines sorted by key (pve-guest-common 73531017
    src/PVE/GuestHelpers.pm config_with_pending_array / format_pending)."""
    desc, keys, _raw, rest = read_conf(r, kind, vmid)
    pending = split_pending(rest)[0]
    keys = dict(keys)
    if desc:
        keys["description"] = "%0A".join(l[1:] for l in desc)
    deletes = set(pending_deletes(pending))
    for k in sorted(set(keys) | set(pending) - {"delete"}):
        if k in keys:
            if k in deletes:
                print(f"del {k}: {keys[k]}")
            elif k in pending:
                print(f"cur {k}: {keys[k]}\nnew {k}: {pending[k]}")
            else:
                print(f"cur {k}: {keys[k]}")
        else:
            print(f"new {k}: {pending[k]}")


# ---- running state --------------------------------------------------------------------------------------

def ct_running(r, vmid) -> bool:
    return (r / f"run/lxc/{vmid}.running").exists()


def vm_running(r, vmid) -> bool:
    return (r / f"run/qemu-server/{vmid}.pid").exists()


def node_name(r) -> str:
    """The node name Proxmox files this host under: the kernel's nodename cut at the first dot
    (pve-common src/PVE/INotify.pm `nodename` @ f665029eac78022e81810ab2e44eace57ade13fb). The simulated kernel's
    nodename is the tree's /etc/hostname, which may hold an FQDN."""
    p = r / "etc/hostname"
    return (p.read_text().strip() if p.exists() else "kpro5").split(".", 1)[0]


def cmd_hostname(argv):
    """hostname(1): gethostname(); ``-s`` cuts it at the first dot."""
    r = root()
    full = (r / "etc/hostname").read_text().strip() if (r / "etc/hostname").exists() else "kpro5"
    print(full.split(".", 1)[0] if argv[:1] in (["-s"], ["--short"]) else full)


def hostpci_hosts(value: str) -> list:
    """The PCI ids a hostpciN property string names, and ``mapping=NAME`` for a resource mapping. Keys come in any
    order and ``host`` is the default key, so a part without ``=`` is the host (qemu-server
    src/PVE/QemuServer/PCI.pm ``$hostpci_fmt`` @ e6352be67f70042a7433a3a3c712b36d02f9f7cb; pve-common
    src/PVE/JSONSchema.pm ``parse_property_string`` @ f665029eac78022e81810ab2e44eace57ade13fb)."""
    out = []
    for part in value.split(","):
        part = part.strip()
        if part.startswith("host="):
            out += part[5:].split(";")
        elif part.startswith("mapping="):
            out.append(part)
        elif part and "=" not in part:
            out += part.split(";")
    return out


def mapped_paths(r, name) -> list:
    """The paths ``etc/pve/mapping/pci.cfg`` gives mapping ``name`` on this node (``node=`` is the short name)."""
    p = r / "etc/pve/mapping/pci.cfg"
    out, inside = [], False
    for line in p.read_text().splitlines() if p.exists() else []:
        if line[:1].strip():
            inside = line.split()[0] == name
        elif inside and line.split()[:1] == ["map"]:
            kv = dict(x.split("=", 1) for x in line.split(None, 1)[1].split(",") if "=" in x)
            if kv.get("node") == node_name(r):
                out += kv.get("path", "").split(";")
    return out


def vm_functions(r, vmid) -> list:
    """PCI functions of a VM's hostpciN entries ('0000:01:00' is the whole slot), from the current config: what
    the running QEMU was started with, pending changes left out."""
    out = []
    for k, v in vm_config(r, vmid, current=True).items():
        if re.fullmatch(r"hostpci\d+", k):
            for host in hostpci_hosts(v):
                if host.startswith("mapping="):
                    hosts = mapped_paths(r, host[8:])
                else:
                    hosts = [host]
                for h in hosts:
                    h = h.lower()
                    h = h if h.count(":") == 2 else "0000:" + h
                    out += [a for a in kernel.pci_devices(r) if a == h or (a.startswith(h + ".") and "." not in h)]
    return out


def ct_root(r, vmid):
    return r / f"var/lib/lxc/{vmid}/rootfs"


# The host's pve-container version (host setting `pve_container_version`). The seed's default, 5.2.2, is what a
# Proxmox VE 8.3 host with the seed's kernel 6.8.12-4-pve runs (pve-container a39c5b06, "bump version to 5.2.2",
# 2024-11-19).
PVE_CONTAINER_VERSION = "5.2.2"
# A new devN on a running container is plugged in at once from 6.0.4 on (pve-container 27a7f7dc debian/changelog
# "implement device hotplug"; src/PVE/LXC/Config.pm vmconfig_hotplug_pending); before, it waits for a restart.
DEV_HOTPLUG_SINCE = (6, 0, 4)


def pve_container_version(r) -> tuple:
    version = settings(r).get("pve_container_version", PVE_CONTAINER_VERSION)
    return tuple(int(n) for n in re.findall(r"\d+", version)[:3])


def parse_property_string(key, val, default_key, known) -> dict:
    """pve-common f665029e src/PVE/JSONSchema.pm parse_property_string: parts split at every ',' (no quoting), a
    part with '=' is key=value (the key up to the first '='), one without is the default key's value."""
    res = {}
    for part in val.split(","):
        if not part.strip():
            continue
        k, eq, v = part.partition("=")
        if not eq:
            k, v = default_key, part
        elif not v:
            k = None
        if k is None or k not in known:
            why = "missing key in" if k is None else "invalid key in"
            raise Fail(f"400 Parameter verification failed.\n{key}: {why} comma-separated list property"
                       + (f": {k}" if k else ""), 255)
        if k in res:
            raise Fail(f"400 Parameter verification failed.\n{key}: duplicate key in comma-separated list property: "
                       f"{k}", 255)
        res[k] = v
    return res


# pve-container 5eb5574e src/PVE/LXC/Config.pm $dev_desc: `path` is the default key.
DEV_KEYS = ("path", "mode", "uid", "gid", "deny-write")


def parse_device(key, val) -> dict:
    """pve-container 5eb5574e src/PVE/LXC/Config.pm parse_device and verify_lxc_dev_string."""
    dev = parse_property_string(key, val, "path", DEV_KEYS)
    if "path" not in dev:
        raise Fail(f"Path is not defined for passthrough device {key}", 255)
    if not dev["path"].startswith("/dev/") or re.search(r"/\.\.?(/|$)", dev["path"]):
        raise Fail(f"400 Parameter verification failed.\n{key}: invalid format - {dev['path']} is not a valid device "
                   "path", 255)
    return dev


def check_device_node(r, path):
    """pve-container 5eb5574e src/PVE/LXC/Tools.pm get_device_mode_and_rdev: the host node must exist."""
    if not (r / path.lstrip("/")).exists():
        raise Fail(f"Device {path} does not exist", 255)


def ct_devices(r, vmid, keys=None) -> list:
    """The host paths of the devN entries in effect (not the pending ones)."""
    keys = read_conf(r, CT, vmid)[1] if keys is None else keys
    return [parse_device(k, v)["path"] for k, v in sorted(keys.items()) if re.fullmatch(r"dev\d+", k)]


MP_KEYS = ("volume", "mp", "acl", "backup", "quota", "replicate", "ro", "shared", "size", "mountoptions")


def parse_mp(key, val):
    """(host path, container path) of a bind mount; None for a storage volume (not simulated)."""
    opts = parse_property_string(key, val, "volume", MP_KEYS)
    source, target = opts.get("volume", ""), opts.get("mp")
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
    # a second mount on the same path covers the first, as mounts stack in the kernel
    shadow, n = link.with_name(link.name + ".fakehost-shadowed"), 1
    while os.path.lexists(shadow):
        n += 1
        shadow = link.with_name(f"{link.name}.fakehost-shadowed-{n}")
    shadowed = os.path.lexists(link)
    if shadowed:
        link.rename(shadow)
    link.parent.mkdir(parents=True, exist_ok=True)
    # relative, so that a copied tree mounts its own host path
    os.symlink(os.path.relpath(r.resolve() / source.lstrip("/"), link.parent.resolve()), link)
    return {"key": key, "source": source, "target": target, "shadowed": shadowed, "shadow": shadow.name}


def unmount(r, vmid, m):
    link = ct_root(r, vmid) / m["target"].lstrip("/")
    if link.is_symlink():
        link.unlink()
    shadow = link.with_name(m.get("shadow", link.name + ".fakehost-shadowed"))
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
    """What goes with the container's processes: its engines, its mounts and its tmpfs."""
    engines.stop_container(ct_root(r, vmid))
    sync_mounts(r, vmid, {})
    shutil.rmtree(ct_root(r, vmid) / "run", ignore_errors=True)


def ct_start(r, vmid):
    if ct_running(r, vmid):
        raise Fail(f"CT {vmid} already running", 255)
    ct_prestart(r, vmid)
    seen = []
    for path in ct_devices(r, vmid):
        node = r / path.lstrip("/")
        # update_lxc_config stats each devN path (src/PVE/LXC/Tools.pm get_device_mode_and_rdev, pve-container
        # 94f558522ef61f9858c39c264d0ac4e697e49268): a missing node fails the start.
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


def vm_start(r, vmid):
    """Proxmox binds the VM's functions to vfio-pci at start (and leaves them there afterwards)."""
    if vm_running(r, vmid):
        raise Fail(f"VM {vmid} already running", 255)
    modprobe(r, "vfio_pci")
    for a in vm_functions(r, vmid):
        if kernel.driver_of(r, a) not in (None, "vfio-pci"):
            kernel.unbind(r, a)
        if kernel.driver_of(r, a) is None:
            kernel.add_dynid(r, "vfio-pci", kernel.pci_id(r, a))
        if kernel.driver_of(r, a) != "vfio-pci":
            raise Fail(f"Cannot bind {a} to vfio\nstart failed: QEMU exited with code 1", 255)
    write(r / kernel.VM_RUN / f"{vmid}.functions", json.dumps(vm_functions(r, vmid)))
    write(r / kernel.VM_RUN / f"{vmid}.pid", f"{kernel.new_pid(r)}\n")


def vm_stop(r, vmid):
    (r / kernel.VM_RUN / f"{vmid}.pid").unlink(missing_ok=True)
    (r / kernel.VM_RUN / f"{vmid}.functions").unlink(missing_ok=True)


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
    if sub == "config":
        print_conf(r, CT, vmid, current="--current" in argv[2:] or "-current" in argv[2:])
    elif sub == "pending":
        print_pending(r, CT, vmid)
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


# Options a running container takes at once; everything else waits in [pve:pending] for the next start unless
# vmconfig_hotplug_pending plugs it in (pve-container 5eb5574e src/PVE/LXC/Config.pm $LXC_FASTPLUG_OPTIONS,
# vmconfig_hotplug_pending).
FASTPLUG = {"description", "onboot", "startup", "protection", "hostname", "hookscript", "cores", "tags", "lock"}
HOT_DELETE = re.compile(r"unused\d+|swap|cpulimit|cpuunits|net\d+")
HOT_SET = re.compile(r"cpulimit|cpuunits|net\d+|memory|swap")


def passthrough_path(vmid, path):
    return f"/var/lib/lxc/{vmid}/passthrough{path}"


def check_passthrough(r, vmid, keys):
    """What a start checks of the devN entries: update_lxc_config stats every node, then the pre-start hook makes
    each one under /var/lib/lxc/<vmid>/passthrough with mknod, which fails for a path already made (pve-container
    5eb5574e src/PVE/LXC.pm update_lxc_config, create_passthrough_device_node; src/lxc-pve-prestart-hook)."""
    paths = ct_devices(r, vmid, keys)
    for path in paths:
        check_device_node(r, path)
    made = set()
    for path in paths:
        if path in made:
            raise Fail(f"failed to mknod {passthrough_path(vmid, path)}: File exists\n"
                       f"startup for container '{vmid}' failed", 255)
        made.add(path)


def apply_pending(keys, pending, selection=None):
    """pve-container 5eb5574e src/PVE/LXC/Config.pm vmconfig_apply_pending: deletions, then new values."""
    deletes = pending_deletes(pending)
    for k in deletes:
        if selection is None or k in selection:
            keys.pop(k, None)
    _set_pending_deletes(pending, [k for k in deletes if selection is not None and k not in selection])
    cleanup_pending(keys, pending)
    for k in [k for k in pending if k != "delete" and (selection is None or k in selection)]:
        keys[k] = pending.pop(k)


def cleanup_pending(keys, pending):
    """pve-guest-common 73531017 src/PVE/AbstractConfig.pm cleanup_pending: a pending value equal to the current
    one and the deletion of an unset key are dropped."""
    for k in [k for k in pending if k != "delete" and keys.get(k) == pending[k]]:
        del pending[k]
    _set_pending_deletes(pending, [k for k in pending_deletes(pending) if k in keys])


def ct_prestart(r, vmid):
    """The start's own part before lxc-start: pending changes applied and written (vm_start), then the devN checks."""
    desc, keys, raw, rest = read_conf(r, CT, vmid)
    pending, others = split_pending(rest)
    if pending:
        apply_pending(keys, pending)
        write_conf(r, CT, vmid, desc, keys, raw, join_pending(pending, others))
    check_passthrough(r, vmid, keys)


def hotplug_pending(r, vmid, keys, pending, selection):
    """pve-container 5eb5574e src/PVE/LXC/Config.pm vmconfig_hotplug_pending on a running container; returns the
    errors by key. mpN and devN deletions are not hot-unplugged: they stay pending until the next start."""
    errors = {}
    for k in [k for k in pending if k in FASTPLUG and k in selection]:
        keys[k] = pending.pop(k)
    deletes = pending_deletes(pending)
    done = [k for k in deletes if k in selection and (k in FASTPLUG or HOT_DELETE.fullmatch(k))]
    for k in done:
        keys.pop(k, None)
    _set_pending_deletes(pending, [k for k in deletes if k not in done])
    for k in sorted(k for k in pending if k != "delete" and k in selection):
        value = pending[k]
        if HOT_SET.fullmatch(k):
            pass
        elif re.fullmatch(r"mp\d+", k) and k not in keys:
            pass  # a new mount point is mounted at once (sync_mounts after the write)
        elif re.fullmatch(r"dev\d+", k) and k not in keys and pve_container_version(r) >= DEV_HOTPLUG_SINCE:
            path = parse_device(k, value)["path"]
            if path in ct_devices(r, vmid, keys):  # create_passthrough_device_node's mknod
                errors[k] = f"unable to hotplug {k}: failed to mknod {passthrough_path(vmid, path)}: File exists"
                continue
            seen = ct_seen_devices(r, vmid)
            write(r / f"run/lxc/{vmid}.devices",
                  json.dumps(seen + [[path, (r / path.lstrip("/")).read_text().strip()]]) + "\n")
        else:
            continue  # waits for the next start
        keys[k] = pending.pop(k)
    return errors


def pct_set(r, vmid, opts):
    """The API's update_vm with update_pct_config (pve-container 5eb5574e src/PVE/API2/LXC/Config.pm update_vm,
    src/PVE/LXC/Config.pm update_pct_config)."""
    desc, keys, raw, rest = read_conf(r, CT, vmid)
    pending, others = split_pending(rest)
    params, delete, revert = {}, [], []
    it = iter(opts)
    for o in it:
        key, val = o.lstrip("-"), next(it, None)
        if val is None:
            raise Fail(f"400 Parameter verification failed.\n{key}: missing value", 255)
        if key in ("delete", "revert"):
            (delete if key == "delete" else revert).extend(k for k in re.split(r"[,;\s]+", val) if k)
        else:
            params[key] = val
    for k in revert:
        pending.pop(k, None)
        _set_pending_deletes(pending, [d for d in pending_deletes(pending) if d != k])
    for k in delete:
        if k not in keys and k not in pending:
            print(f"cannot delete '{k}' - not set in current configuration!", file=sys.stderr)
            continue
        _set_pending_deletes(pending, pending_deletes(pending) + [k])
    for key in sorted(params):
        val = params[key]
        if re.fullmatch(r"dev\d+", key):
            check_device_node(r, parse_device(key, val)["path"])
        if re.fullmatch(r"mp\d+", key) and (bind := parse_mp(key, val)) and not (r / bind[0].lstrip("/")).exists():
            raise Fail(f"400 Parameter verification failed.\n{key}: mount point source '{bind[0]}' does not exist", 255)
        pending[key] = val
        _set_pending_deletes(pending, [d for d in pending_deletes(pending) if d != key])
    cleanup_pending(keys, pending)
    selection = set(params) | set(delete)
    if ct_running(r, vmid):
        errors = hotplug_pending(r, vmid, keys, pending, selection)
    else:
        errors, _ = {}, apply_pending(keys, pending, selection)
    if errors:  # nothing is written then
        raise Fail("400 Parameter verification failed.\n" + "".join(f"{k}: {v}\n" for k, v in sorted(errors.items())),
                   255)
    write_conf(r, CT, vmid, desc, keys, raw, join_pending(pending, others))
    if ct_running(r, vmid):
        sync_mounts(r, vmid, ct_binds(r, vmid))
    # After the write the API regenerates the container's lxc config, which stats the node of every devN in
    # effect: one missing node fails every `pct set`, whatever it changed (update_vm: write_config, then
    # update_lxc_config).
    for path in ct_devices(r, vmid, keys):
        check_device_node(r, path)


def pct_exec(r, vmid, argv):
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        raise Fail("missing command", 255)
    if not ct_running(r, vmid):
        raise Fail(f"container '{vmid}' not running!", 255)
    croot = ct_root(r, vmid)

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

def qm_list_rows(r) -> list:
    """(vmid, name, status, mem MB, boot disk GB, pid) as ``qm list`` gets them: an unnamed VM is "VM <vmid>"
    (qemu-server src/PVE/QemuServer.pm ``vmstatus`` @ e6352be67f70042a7433a3a3c712b36d02f9f7cb)."""
    rows = []
    for v in vmids(r, VM):
        keys = vm_config(r, v, current=True)
        disk = re.search(r"size=(\d+)G", keys.get(keys.get("bootdisk", "scsi0"), "") or "")
        pid = (r / f"run/qemu-server/{v}.pid").read_text().strip() if vm_running(r, v) else "0"
        rows.append((v, keys.get("name") or f"VM {v}", "running" if vm_running(r, v) else "stopped",
                     int(keys.get("memory", "2048")), float(disk.group(1) if disk else 0), pid))
    return rows


def cmd_qm(argv):
    r = root()
    sub = argv[0] if argv else ""
    # A failing qm (pmxcfs down, a lock, a broken config): the message on stderr and Perl's status for a die.
    failing = settings(r).get("qm_fail", {})
    if sub in failing or "*" in failing:
        raise Fail(failing.get(sub, failing.get("*")), 255)
    if sub == "list":
        rows = qm_list_rows(r)
        if not rows:  # qm.pm's list exits before the header when there is no VM
            return 0
        # the header and row formats of qm.pm's `list` (src/PVE/CLI/qm.pm @ e6352be67f70042a7433a3a3c712b36d02f9f7cb)
        print("%10s %-20s %-10s %-10s %12s %-10s" % ("VMID", "NAME", "STATUS", "MEM(MB)", "BOOTDISK(GB)", "PID"))
        for row in rows:
            print("%10s %-20s %-10s %-10s %12.2f %-10s" % row)
        return 0
    vmid = _vmid(argv)
    read_conf(r, VM, vmid)
    if sub == "config":
        # sorted keys, digest left out, the description encoded as one line (qm.pm `config`)
        for k, v in sorted(vm_config(r, vmid, current="--current" in argv or "-current" in argv).items()):
            print(f"{k}: {v.replace(chr(10), '%0A') if k == 'description' else v}")
    elif sub == "pending":
        print_conf(r, VM, vmid)
    elif sub == "status":
        # qm.pm `status` prints QMP's status of a running VM; the simulated one is never paused
        print(f"status: {'running' if vm_running(r, vmid) else 'stopped'}")
    elif sub == "start":
        vm_start(r, vmid)
    elif sub in ("stop", "shutdown"):
        vm_stop(r, vmid)
    else:
        raise Fail(f"unknown command 'qm {sub}'", 255)


# ---- pvesh: the API from the command line ---------------------------------------------------------------
# The config keys pve-container's schema types as integers or booleans (src/PVE/LXC/Config.pm $confdesc): its
# parser checks each value against the schema (check_type), so the API hands them back as JSON numbers.
CT_NUMBER_KEYS = {"unprivileged", "memory", "swap", "cores", "cpuunits", "onboot", "template", "protection", "tty",
                  "console", "cpulimit"}


def ct_api_config(r, vmid, current=False) -> dict:
    """GET /nodes/{node}/lxc/{vmid}/config: the keys `pct config` shows (pending taken in unless current), the raw
    lxc.* keys as [[key, value], …], and the file's SHA1 digest (pve-container src/PVE/API2/LXC/Config.pm
    `vm_config`, which `pct config` calls and prints)."""
    desc, keys, raw, rest = read_conf(r, CT, vmid)
    view = conf_view(keys, split_pending(rest)[0], current)
    out = typed(view, CT_NUMBER_KEYS)
    if desc:
        out["description"] = "\n".join(l[1:] for l in desc)
    if raw:
        out["lxc"] = [[k.strip(), v.strip()] for k, v in (re.split(r"[:=]", l, 1) for l in raw)]
    out["digest"] = hashlib.sha1(conf_path(r, CT, vmid).read_bytes()).hexdigest()
    return out


# The config keys qemu-server's schema types as integers, numbers or booleans (src/PVE/QemuServer.pm $confdesc @
# e6352be67f70042a7433a3a3c712b36d02f9f7cb); `memory` is a property string there, so it stays text.
VM_NUMBER_KEYS = {"onboot", "autostart", "reboot", "cpulimit", "cpuunits", "balloon", "shares", "smp", "sockets",
                  "cores", "numa", "keephugepages", "vcpus", "acpi", "kvm", "tdf", "localtime", "freeze", "template",
                  "tablet", "migrate_speed", "migrate_downtime", "protection"}


def typed(keys: dict, numbers: set) -> dict:
    """The keys a schema types as numbers given as JSON numbers, the rest as the text the config file holds."""
    return {k: (float(v) if "." in v else int(v)) if k in numbers and re.fullmatch(r"\d+(\.\d+)?", v) else v
            for k, v in keys.items()}


def vm_api_config(r, vmid, current=False) -> dict:
    """GET /nodes/{node}/qemu/{vmid}/config: the keys `qm config` shows (pending taken in unless current) and the
    file's SHA1 digest (qemu-server src/PVE/API2/Qemu.pm `vm_config` @ e6352be67f70042a7433a3a3c712b36d02f9f7cb)."""
    out = typed(vm_config(r, vmid, current), VM_NUMBER_KEYS)
    out["digest"] = hashlib.sha1(conf_path(r, VM, vmid).read_bytes()).hexdigest()
    return out


def vm_api_list(r, full=False) -> list:
    """GET /nodes/{node}/qemu: each VM's vmstatus entry; with `full` QMP's status as `qmpstatus`, which is the plain
    status when QMP gives none (qemu-server src/PVE/API2/Qemu.pm `vmlist`, src/PVE/QemuServer.pm `vmstatus` @
    e6352be67f70042a7433a3a3c712b36d02f9f7cb). The simulated VMs are never paused."""
    listed = []
    for vmid, name, status, memory_mb, disk_gb, pid in qm_list_rows(r):
        entry = {"vmid": vmid, "name": name, "status": status, "maxmem": memory_mb * 1024 * 1024,
                 "maxdisk": int(disk_gb * 1024 ** 3), "cpus": int(vm_config(r, vmid, True).get("cores", "1"))}
        if pid != "0":
            entry["pid"] = int(pid)
        if full:
            entry["qmpstatus"] = status
        listed.append(entry)
    return listed


def ct_api_list(r) -> list:
    """GET /nodes/{node}/lxc: each container's vmstatus entry: its vmid, its name (the hostname, else CT<vmid>),
    its status and its type (pve-container src/PVE/API2/LXC.pm `vmlist`, src/PVE/LXC.pm `vmstatus` @
    94f558522ef61f9858c39c264d0ac4e697e49268)."""
    return [{"vmid": v, "name": read_conf(r, CT, v)[1].get("hostname") or f"CT{v}", "type": "lxc",
             "status": "running" if ct_running(r, v) else "stopped"} for v in vmids(r, CT)]


def ct_api_status(r, vmid) -> dict:
    """GET /nodes/{node}/lxc/{vmid}/status/current: the container's vmstatus entry and its HA state; a container
    without a config is refused by load_config (pve-container src/PVE/API2/LXC/Status.pm `vm_status` @
    015740e60515e48cea9bb1814ad60ff05c3e356b)."""
    read_conf(r, CT, vmid)
    (entry,) = [e for e in ct_api_list(r) if e["vmid"] == vmid]
    return {**entry, "ha": {"managed": 0}}


def pci_mappings(r) -> list:
    """GET /cluster/mapping/pci: each mapping of etc/pve/mapping/pci.cfg with its id, its `map` entries as
    written, its other keys, and the file's digest (pve-manager PVE/API2/Cluster/Mapping/PCI.pm `index` @
    14a22df35955d97dfc1af21e117dc894a29df0c9; the section format of pve-guest-common src/PVE/Mapping/PCI.pm)."""
    p = r / "etc/pve/mapping/pci.cfg"
    if not p.exists():
        return []
    digest = hashlib.sha1(p.read_bytes()).hexdigest()
    found, current = [], None
    for line in p.read_text().splitlines():
        if not line.strip():
            continue
        if line[:1].strip():
            current = {"id": line.split()[0], "digest": digest}
            found.append(current)
        elif current is not None:
            key, _, value = line.strip().partition(" ")
            if key == "map":
                current.setdefault("map", []).append(value.strip())
            else:
                current[key] = value.strip()
    return found


def cmd_pvesh(argv):
    """`pvesh get PATH [--current 1] [--full 1] --output-format json` for the API paths gpuhosts reads. Its JSON is
    the API's result on one line, keys sorted (pve-common src/PVE/CLIFormatter.pm `print_api_result` @
    ac6c61bf135f4e0bb261c4b95cec2071677da99e)."""
    r = root()
    args = [a for a in argv if not a.startswith("-")]
    options = {a.lstrip("-"): b for a, b in zip(argv, argv[1:] + [""]) if a.startswith("-")}
    if args[:1] != ["get"] or len(args) < 2:
        raise Fail(f"unknown command 'pvesh {' '.join(argv)}'", 255)
    if options.get("output-format") != "json":
        raise Fail("the simulated pvesh prints only --output-format json", 255)
    path = args[1]
    # A failing API call (pmxcfs down, a lock, a broken config): the message on stderr and Perl's status for a die.
    failing = settings(r).get("pvesh_fail", {})
    if path in failing:
        raise Fail(failing[path], 255)
    on = {k: options.get(k) in ("1", "true", "yes") for k in ("current", "full")}
    match = re.fullmatch(r"/nodes/([^/]+)/(lxc|qemu)(?:/(\d+)/(config|status/current))?", path)
    if match and match[1] != node_name(r):
        raise Fail(f"hostname lookup '{match[1]}' failed - failed to get address info for: {match[1]}: Name or "
                   "service not known", 255)
    if path == "/cluster/mapping/pci":
        answer = pci_mappings(r)
    elif match and match[2] == "lxc" and match[4] == "status/current":
        answer = ct_api_status(r, int(match[3]))
    elif match and match[2] == "lxc" and match[3]:
        answer = ct_api_config(r, int(match[3]), current=on["current"])
    elif match and match[2] == "qemu" and match[4] == "config":
        read_conf(r, VM, int(match[3]))
        answer = vm_api_config(r, int(match[3]), current=on["current"])
    elif match and match[2] == "qemu" and not match[3]:
        answer = vm_api_list(r, full=on["full"])
    elif match and not match[3]:
        answer = ct_api_list(r)
    else:
        raise Fail(f"no such resource '{path}'", 255)
    print(json.dumps(answer, sort_keys=True, separators=(",", ":")))
    return 0
