"""NVIDIA user-space tools (nvidia-smi, nvidia-modprobe, nvidia-persistenced) and fuser.

The tools the .run installer provides answer "command not found" until it installed them under the root.
"""
import glob
import re
import sys

from . import kernel
from .pve import ct_seen_devices
from .util import Fail, container, root, tree, unprefix, write

NOT_LOADED = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
              "latest NVIDIA driver is installed and running.\n")


def require_installed(r, name):
    if not (r / "usr/bin" / name).exists():
        raise Fail(f"{name}: command not found", 127)


def userspace_version(r):
    libs = glob.glob(str(r / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.*.*"))
    return re.search(r"\.so\.(\d+\.\d+(?:\.\d+)?)$", libs[0]).group(1) if libs else None


def bus_id(addr):
    d, rest = addr.split(":", 1)
    return f"{int(d, 16):08X}:{rest.upper()}"


def visible_gpus(r, t):
    """[(addr, minor)] nvidia-smi sees, after the driver checks every NVML client makes."""
    require_installed(r, "nvidia-smi")
    ver = kernel.nv_module_version(t)
    if ver is None:
        raise Fail(NOT_LOADED, 9)
    if userspace_version(r) != ver:
        raise Fail("Failed to initialize NVML: Driver/library version mismatch\n"
                   f"NVML library version: {userspace_version(r)}", 18)
    gpus = kernel.nv_gpus(t)
    ct = container()
    if ct:  # only the nodes the container got at its last start
        nodes = {p for p, _ in ct_seen_devices(t, ct)}
        if "/dev/nvidiactl" not in nodes:
            raise Fail(NOT_LOADED, 9)
        gpus = [(a, m) for a, m in gpus if f"/dev/nvidia{m}" in nodes]
    return gpus


def field(t, addr, minor, index, name):
    dev = kernel.attr(t, addr, "device")
    model, mem, _ = kernel.GPU_MODELS.get(dev, ("NVIDIA Graphics Device", 0, ""))
    st = kernel.kstate(t)
    values = {"index": str(index), "name": model, "pci.bus_id": bus_id(addr), "gpu_bus_id": bus_id(addr),
              "driver_version": kernel.nv_module_version(t), "uuid": kernel.gpu_uuid(addr),
              "persistence_mode": "Enabled" if st["persistence"].get(addr) else "Disabled",
              "memory.total": f"{mem} MiB", "pci.device_id": f"0x{dev[2:].upper()}10DE"}
    if name not in values:
        raise Fail(f'Field "{name}" is not a valid field to query.', 2)
    return values[name]


def select(gpus, ident):
    """-i accepts an index, a PCI bus id in any of its spellings, or a UUID."""
    for i, (a, m) in enumerate(gpus):
        if ident == str(i) or ident == kernel.gpu_uuid(a) or ident.upper().lstrip("0") == bus_id(a).lstrip("0") \
                or ident.lower() == a or "0000:" + ident.lower() == a:
            return [(i, a, m)]
    raise Fail("No devices were found", 6)


def opt(argv, *names):
    for i, a in enumerate(argv):
        for n in names:
            if a == n and i + 1 < len(argv):
                return argv[i + 1]
            if a.startswith(n + "="):
                return a.split("=", 1)[1]
    return None


def cmd_nvidia_smi(argv):
    r, t = root(), tree()
    gpus = visible_gpus(r, t)
    ident, pm = opt(argv, "-i", "--id"), opt(argv, "-pm", "--persistence-mode")
    fmt = (opt(argv, "--format") or "csv").split(",")
    chosen = select(gpus, ident) if ident is not None else [(i, a, m) for i, (a, m) in enumerate(gpus)]
    if not gpus:
        raise Fail("No devices were found", 6)
    if pm is not None:
        if container():
            raise Fail("Unable to set persistence mode for GPU: Insufficient Permissions\nTerminating early due to previous errors.", 4)
        daemon = kernel.kstate(t)["persistenced"]
        for _, a, _ in chosen:
            kernel.set_persistence(t, a, (("daemon" if daemon else "legacy") if pm == "1" else None))
            kind = "Legacy persistence" if pm == "1" and not daemon else "persistence"
            print(f"{'Enabled' if pm == '1' else 'Disabled'} {kind} mode for GPU {bus_id(a)}.")
        print("All done.")
        return 0
    q = opt(argv, "--query-gpu")
    if q:
        names = [n.strip() for n in q.split(",")]
        if "noheader" not in fmt:
            print(", ".join(n + (" [MiB]" if n == "memory.total" else "") for n in names))
        for i, a, m in chosen:
            vals = [field(t, a, m, i, n) for n in names]
            print(", ".join(v.removesuffix(" MiB") if "nounits" in fmt else v for v in vals))
        return 0
    q = opt(argv, "--query-compute-apps")
    if q:
        names = [n.strip() for n in q.split(",")]
        if "noheader" not in fmt:
            print(", ".join(names))
        addrs = {a for _, a, _ in chosen}
        for h in kernel.kstate(t)["holders"]:
            if h["compute"] and h["gpu"] in addrs:
                vals = {"pid": str(h["pid"]), "process_name": h["command"], "used_memory": "1024 MiB",
                        "gpu_bus_id": bus_id(h["gpu"]), "gpu_uuid": kernel.gpu_uuid(h["gpu"])}
                print(", ".join(vals.get(n, "[N/A]") for n in names))
        return 0
    if "-L" in argv or "--list-gpus" in argv:
        for i, a, m in chosen:
            print(f"GPU {i}: {field(t, a, m, i, 'name')} (UUID: {kernel.gpu_uuid(a)})")
        return 0
    ver = kernel.nv_module_version(t)
    print(f"| NVIDIA-SMI {ver}             Driver Version: {ver}     CUDA Version: 13.0     |")
    for i, a, m in chosen:
        print(f"|  {i:2d}  {field(t, a, m, i, 'name'):<28} {'On' if kernel.kstate(t)['persistence'].get(a) else 'Off':>3}  "
              f"|   {bus_id(a)} Off |")
    return 0


def cmd_nvidia_modprobe(argv):
    r = root()
    require_installed(r, "nvidia-modprobe")
    uvm = "-u" in argv or "--unified-memory" in argv
    minors = [a.split("=", 1)[1] for a in argv if a.startswith(("-c=", "--create-nvidia-device-file="))]
    minors += [argv[i + 1] for i, a in enumerate(argv) if a in ("-c", "--create-nvidia-device-file") and i + 1 < len(argv)]
    from .system import modprobe
    try:
        modprobe(r, "nvidia")
        if uvm:
            modprobe(r, "nvidia_uvm")
    except Fail:
        return 1  # nvidia-modprobe fails silently
    major = kernel.settings(r)["uvm_major"]
    for n in minors:
        if uvm:
            write(r / "dev/nvidia-uvm", f"c {major}:0\n", 0o666)
            write(r / "dev/nvidia-uvm-tools", f"c {major}:1\n", 0o666)
        else:
            write(r / f"dev/nvidia{int(n)}", f"c 195:{int(n)}\n", 0o666)
    return 0


def cmd_nvidia_persistenced(argv):
    r = root()
    require_installed(r, "nvidia-persistenced")
    st = kernel.kstate(r)
    if container() or kernel.nv_module_version(r) is None or st["persistenced"]:
        raise Fail("nvidia-persistenced failed to initialize. Check syslog for more details.", 1)
    st["persistenced"] = kernel.new_pid(r)
    st["next_pid"] = kernel.kstate(r)["next_pid"]
    if "--no-persistence-mode" not in argv:  # persistence mode is the daemon's default
        for a, _ in kernel.nv_gpus(r):
            st["persistence"][a] = "daemon"
    kernel.save(r, st)
    write(r / "run/nvidia-persistenced/nvidia-persistenced.pid", f"{st['persistenced']}\n")
    return 0


def cmd_nvidia_uninstall(argv):
    require_installed(root(), "nvidia-uninstall")
    from .installer import main
    return main(["--uninstall", *argv])


def node_holders(r, node):
    st = kernel.kstate(r)
    out = [(h["pid"], h["command"]) for h in st["holders"] if h["node"] == node]
    if st["persistenced"]:
        held = {f"/dev/nvidia{m}" for a, m in kernel.nv_gpus(r) if st["persistence"].get(a) == "daemon"}
        if node in held or (node == "/dev/nvidiactl" and held):
            out.append((st["persistenced"], "nvidia-persiste"))
    return out


def cmd_fuser(argv):
    r = root()
    silent, verbose, kill = "-s" in argv, "-v" in argv, "-k" in argv
    found = False
    for arg in (a for a in argv if not a.startswith("-")):
        node = unprefix(arg, r)
        if not (r / node.lstrip("/")).exists():
            print(f"Specified filename {arg} does not exist.", file=sys.stderr)
            continue
        hs = node_holders(r, node)
        found = found or bool(hs)
        if silent or not hs:
            pass
        elif verbose:
            print(f"{'USER':>25}        PID ACCESS COMMAND", file=sys.stderr)
            for i, (pid, cmd) in enumerate(hs):
                print(f"{(arg + ':') if i == 0 else '':<20} root  {pid:>9} F.... {cmd}", file=sys.stderr)
        else:
            print(f"{arg}:", end="", file=sys.stderr, flush=True)
            print("".join(f" {pid:>6}" for pid, _ in hs), end="", flush=True)
            print(file=sys.stderr)
        if kill:
            from .systemd import stop_persistenced
            kernel.release(r, node)
            if any(c == "nvidia-persiste" for _, c in hs):
                stop_persistenced(r)
    return 0 if found else 1
