"""NVIDIA user-space tools (nvidia-smi, nvidia-modprobe, nvidia-persistenced) and fuser.

The tools the .run installer provides answer "command not found" until it installed them under the root.
"""
import glob
import json
import re
import sys
from pathlib import Path

from . import kernel
from .util import Fail, container, ct_seen_devices, root, settings, tree, unprefix, write

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
    if not ct and (r / "usr/bin/nvidia-modprobe").exists():
        # NVML, a user-space driver component, has nvidia-modprobe make the nodes it opens (nvidia-modprobe.1.m4
        # at tag 580.126.09, DESCRIPTION): the control node and every GPU's.
        create_nodes(r, [NV_CTL_MINOR] + [m for _, m in gpus])
    if ct:  # only the nodes the container got at its last start
        nodes = {p for p, _ in ct_seen_devices(t, ct)}
        if "/dev/nvidiactl" not in nodes:
            raise Fail(NOT_LOADED, 9)
        gpus = [(a, m) for a, m in gpus if f"/dev/nvidia{m}" in nodes]
    return gpus


FAILURES = Path(__file__).resolve().parent.parent / "fixtures/facts/h200-tool-failures/commands.json"


def _help_fields(name: str) -> set:
    """The fields `nvidia-smi --help-query-…` lists (an alias follows " or "), from the capture beside FAILURES."""
    text = (FAILURES.parent / name).read_text()
    return {f for line in text.splitlines() if line.startswith('"') for f in re.findall(r'^"([^"]+)"|or "([^"]+)"', line)
            for f in f if f}


QUERY_FIELDS = {"--query-gpu": _help_fields("help-query-gpu.txt"),
                "--query-compute-apps": _help_fields("help-query-compute-apps.txt")}


def check_query(switch: str, names: list):
    """The real tool refuses an unknown field before it prints anything (capture `smi-bad-field`)."""
    for name in names:
        if name not in QUERY_FIELDS[switch]:
            raise Fail(f'Field "{name}" is not a valid field to query.\n', 2)


def field(t, addr, minor, index, name):
    dev = kernel.attr(t, addr, "device")
    model, mem, _ = kernel.GPU_MODELS.get(dev, ("NVIDIA Graphics Device", 0, ""))
    st = kernel.kstate(t)
    values = {"index": str(index), "name": model, "pci.bus_id": bus_id(addr), "gpu_bus_id": bus_id(addr),
              "driver_version": kernel.nv_module_version(t), "uuid": kernel.gpu_uuid(addr),
              "persistence_mode": "Enabled" if st["persistence"].get(addr) else "Disabled",
              "memory.total": f"{mem} MiB", "pci.device_id": f"0x{dev[2:].upper()}10DE"}
    if name not in values:
        raise Fail(f"fakehost: nvidia-smi field {name} is valid but not simulated", 2)
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




def captured_failure(case: str) -> int:
    """Prints what the real tool printed in a captured case of tests/fixtures/facts/h200-tool-failures and
    answers its exit status: nvidia-smi reports its errors on stdout."""
    c = json.loads(FAILURES.read_text())[case]
    sys.stdout.write(c["stdout"])
    sys.stderr.write(c["stderr"])
    return c["rc"]


def cmd_nvidia_smi(argv):
    """nvidia-smi prints its own errors on stdout (captures `smi-i-missing`, `smi-bad-field`); only a missing program
    is the shell's message on stderr."""
    try:
        return _nvidia_smi(argv)
    except Fail as e:
        if e.code == 127:
            raise
        sys.stdout.write(e.msg + "\n")
        return e.code


def _nvidia_smi(argv):
    r, t = root(), tree()
    if settings(t).get("nvidia_smi_fail"):  # a case name of the captured failures
        return captured_failure(settings(t)["nvidia_smi_fail"])
    for switch in QUERY_FIELDS:
        if opt(argv, switch):
            check_query(switch, [n.strip() for n in opt(argv, switch).split(",")])
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


# nvidia-modprobe, as nvidia-modprobe.c main and modprobe-utils/nvidia-modprobe-utils.c at tag 580.126.09 do it.
NV_MAJOR = 195  # NV_MAJOR_DEVICE_NUMBER
NV_CTL_MINOR = 255  # NV_CTL_DEVICE_NUM: -c=255 names /dev/nvidiactl (assign_device_file_name)


def chardev_major(r, name):
    """nvidia_get_chardev_major: the major of a whole-line name in /proc/devices' character section; None."""
    p = r / "proc/devices"
    lines = p.read_text().split("\n\n")[0].splitlines()[1:] if p.exists() else []
    return next((int(line.split()[0]) for line in lines if line.split()[1:] == [name]), None)


def mknod(r, path, major, minor) -> bool:
    """mknod_helper: a node with the right number stays, any other file there is replaced; mode 0666, root."""
    node, want = r / path.lstrip("/"), f"c {major}:{minor}\n"
    if not (node.is_file() and node.read_text() == want):
        node.unlink(missing_ok=True)
        write(node, want, 0o666)
    return True


def nvidia_mknod(r, minor) -> bool:
    """nvidia_mknod: /dev/nvidiaN for 0..254, /dev/nvidiactl for 255, nothing (a failure) outside."""
    if not 0 <= minor <= NV_CTL_MINOR:
        return False
    return mknod(r, "/dev/nvidiactl" if minor == NV_CTL_MINOR else f"/dev/nvidia{minor}", NV_MAJOR, minor)


def uvm_mknod(r, base) -> bool:
    """nvidia_uvm_mknod: only /dev/nvidia-uvm (base) and /dev/nvidia-uvm-tools (base+1), major from /proc/devices."""
    major = chardev_major(r, "nvidia-uvm")
    return major is not None and mknod(r, "/dev/nvidia-uvm", major, base) and \
        mknod(r, "/dev/nvidia-uvm-tools", major, base + 1)


def create_nodes(r, minors) -> bool:
    """What a user-space driver component running as root asks nvidia-modprobe for: the module and these nodes."""
    from .system import modprobe
    try:
        modprobe(r, "nvidia")
    except Fail:
        return False
    return all(nvidia_mknod(r, m) for m in minors)


def cmd_nvidia_modprobe(argv):
    r = root()
    require_installed(r, "nvidia-modprobe")
    uvm = "-u" in argv or "--unified-memory" in argv
    try:
        minors = [int(a.split("=", 1)[1]) for a in argv if a.startswith(("-c=", "--create-nvidia-device-file="))]
        minors += [int(argv[i + 1]) for i, a in enumerate(argv)
                   if a in ("-c", "--create-nvidia-device-file") and i + 1 < len(argv)]
    except ValueError:
        print("ERROR: Invalid commandline, please run `nvidia-modprobe --help` for usage information.", file=sys.stderr)
        return 1
    if not uvm:  # main's last branch: load nvidia, then one nvidia_mknod per -c
        return 0 if create_nodes(r, minors) else 1
    from .system import modprobe
    try:
        modprobe(r, "nvidia_uvm")  # nvidia_uvm_modprobe; modprobe brings nvidia, which nvidia-uvm depends on
    except Fail:
        return 1  # modprobe runs with its output silenced (silence_process_actions)
    return 0 if all(uvm_mknod(r, m) for m in minors) else 1


def cmd_nvidia_persistenced(argv):
    r = root()
    require_installed(r, "nvidia-persistenced")
    st = kernel.kstate(r)
    if container() or kernel.nv_module_version(r) is None or st["persistenced"]:
        raise Fail("nvidia-persistenced failed to initialize. Check syslog for more details.", 1)
    # It opens every GPU through nvidia-cfg, which runs nvidia-modprobe for the module and the nodes
    # (nvidia-persistenced.1.m4 at tag 580.126.09, PRIVILEGES).
    if not create_nodes(r, [NV_CTL_MINOR] + [m for _, m in kernel.nv_gpus(r)]):
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
    # psmisc's fuser prints its errors on stderr and exits 1, as it does for "no process": only stderr tells
    # them apart (psmisc 23.6 and 23.7, tests/fixtures/facts/h200-tool-failures `fuser-missing`, `fuser-idle`).
    if settings(tree()).get("fuser_fail"):
        print(settings(tree())["fuser_fail"], file=sys.stderr)
        return 1
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
