"""The NVIDIA ``.run`` installer.

``make_fake_run(path, version)`` writes a self-contained ``NVIDIA-Linux-x86_64-<ver>.run`` stand-in; running
it lands here with ``--version-of-this-run <ver>``. What it installs is listed in
``var/lib/nvidia/fakehost-manifest.json`` so that ``--uninstall`` removes exactly that.

As the real installer: kernel modules need ``proxmox-headers-$(uname -r)``; ``--dkms`` registers with DKMS
only when the ``dkms`` package is installed (else a warning and a plain build); nouveau loaded is an error;
the new module is test-loaded, which fails when no GPU is free for nvidia (e.g. all bound to vfio-pci);
a loaded older module is unloaded first, which fails while a GPU is held (persistence mode, open nodes).
"""
import hashlib
import json
import os
import sys
from pathlib import Path

from . import TESTS, kernel
from . import dkms as dkms_tree
from .system import dpkg_list
from .util import Fail, container, kernel_release, root, run_main, write

MANIFEST = "var/lib/nvidia/fakehost-manifest.json"
KNOWN = {"-s", "--silent", "-a", "--accept-license", "-q", "--no-questions", "--ui=none", "--dkms", "--no-dkms",
         "--no-kernel-modules", "--no-kernel-module", "--uninstall", "--skip-module-load", "--no-x-check",
         "--no-nouveau-check", "--disable-nouveau", "--install-libglvnd", "--no-install-libglvnd", "--no-drm",
         "--no-rebuild-initramfs", "--rebuild-initramfs", "--no-backup", "--no-systemd", "--no-peermem",
         "--no-install-compat32-libs", "--no-opengl-files", "--no-wine-files",
         "--allow-installation-with-running-driver"}
DKMS_CONF = ('PACKAGE_NAME="nvidia"\nPACKAGE_VERSION="{version}"\nAUTOINSTALL="yes"\nBUILT_MODULE_NAME[0]="nvidia"\n'
             'DEST_MODULE_LOCATION[0]="/kernel/drivers/video"\n' + dkms_tree.MODULE_TYPE + '{type}\n')
RUNNING_DRIVER_WARNING = (
    "WARNING: Continuing installation despite the presence of a loaded NVIDIA kernel module.  Some sanity checks "
    "will not be performed.  It is strongly recommended that you reboot your computer after installation is "
    "complete.")
LOAD_ERROR = ("ERROR: Unable to load the kernel module 'nvidia.ko'.  This happens most frequently when this kernel "
              "module was built against the wrong or improperly configured kernel sources, with a version of gcc "
              "that differs from the one used to build the target kernel, or if another driver, such as nouveau, "
              "is present and prevents the NVIDIA kernel module from obtaining ownership of the NVIDIA device(s), "
              "or no NVIDIA device installed in this system is supported by this NVIDIA Linux graphics driver "
              "release.")


def make_fake_run(path, version) -> str:
    """Writes an executable .run stand-in for ``version``; returns its sha256 (to pin in a stack)."""
    path = Path(path)
    path.write_text(f"#!/bin/sh\n# NVIDIA-Linux-x86_64-{version}.run (simulated)\n"
                    f'PYTHONPATH="{TESTS}${{PYTHONPATH:+:$PYTHONPATH}}" '
                    f'exec python3 -m fakehost.installer --version-of-this-run {version} "$@"\n')
    path.chmod(0o755)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _mkfile(r, relpath, text, mode, created):
    p = r / relpath
    d = p.parent
    missing = []
    while not d.exists():
        missing.append(d)
        d = d.parent
    created["dirs"] += [x.relative_to(r).as_posix() for x in missing]
    write(p, text, mode)
    created["files"].append(relpath)


def uninstall(r, quiet):
    m = r / MANIFEST
    if not m.exists():
        raise Fail("ERROR: No NVIDIA driver is currently installed." if not quiet else "", 1)
    man = json.loads(m.read_text())
    # nvidia-installer 580.95.05 misc.c dkms_remove_module (`dkms remove -m nvidia -v <ver> --all`): DKMS forgets
    # the version on every kernel, builds for later kernels and failed build logs included.
    dkms_tree.remove(r, "nvidia", man["version"])
    for f in man["files"]:
        (r / f).unlink(missing_ok=True)
    for d in sorted(man["dirs"], key=lambda x: -x.count("/")):
        if (r / d).is_dir() and not any((r / d).iterdir()):
            (r / d).rmdir()
    if not quiet:
        print(f"Uninstallation of existing driver: NVIDIA Accelerated Graphics Driver for Linux-x86_64 "
              f"({man['version']}) is complete.")


def install(r, ver, opts):
    modules = not ({"--no-kernel-modules", "--no-kernel-module"} & opts)
    mtype = next((o.split("=", 1)[1] for o in opts if o.startswith("--kernel-module-type=")),
                 "open" if int(ver.split(".")[0]) >= 560 else "proprietary")
    if mtype not in ("open", "proprietary"):
        raise Fail(f"ERROR: Invalid kernel module type '{mtype}'", 1)
    kv = kernel_release()
    warnings = []
    if modules:
        if not {f"proxmox-headers-{kv}", f"pve-headers-{kv}"} & set(dpkg_list(r)):
            raise Fail("ERROR: Unable to find the kernel source tree for the currently running kernel.  Please make "
                       "sure you have installed the kernel source files for your kernel and that they are properly "
                       "configured.", 1)
        if container():
            raise Fail(LOAD_ERROR, 1)
        if kernel.is_loaded(r, "nouveau"):
            raise Fail("ERROR: The Nouveau kernel driver is currently in use by your system.  This driver is "
                       "incompatible with the NVIDIA driver, and must be disabled before proceeding.", 1)
        load = "--skip-module-load" not in opts
        keep_running = False
        if kernel.is_loaded(r, "nvidia"):
            st = kernel.kstate(r)
            held = st["persistenced"] or st["holders"] or any(kernel.holders_of(r, a) for a, _ in kernel.nv_gpus(r))
            if held and "--allow-installation-with-running-driver" in opts:
                # nvidia-installer 580.95.05 kernel.c check_for_unloaded_kernel_module: with the running module kept,
                # the load tests are skipped and the new module waits for a reboot.
                warnings.append(RUNNING_DRIVER_WARNING)
                keep_running, load = True, False
            elif held:
                raise Fail("ERROR: An NVIDIA kernel module 'nvidia' appears to already be loaded in your kernel.  "
                           "This may be because it is in use (for example, by an X server, a CUDA program, or the "
                           "NVIDIA Persistence Daemon).  Please be sure to exit any programs that may be using the "
                           "GPU(s) before attempting to upgrade your driver.", 1)
        free = [a for a in kernel.pci_devices(r) if kernel.is_nv_gpu(r, a) and (
            kernel.driver_of(r, a) == "nvidia" or (not kernel.driver_of(r, a) and kernel.matches(r, "nvidia", a)))]
        if load and not free:
            raise Fail(LOAD_ERROR, 1)
        for m in ("nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia") if not keep_running else ():
            kernel.remove_module(r, m)
    if (r / MANIFEST).exists():
        uninstall(r, True)
    created = {"version": ver, "type": mtype, "files": [], "dirs": []}
    lib = "usr/lib/x86_64-linux-gnu"
    for name in ("libnvidia-ml.so", "libcuda.so"):
        _mkfile(r, f"{lib}/{name}.{ver}", f"simulated {name} {ver}\n", 0o755, created)
        os.symlink(f"{name}.{ver}", r / f"{lib}/{name}.1")
        created["files"].append(f"{lib}/{name}.1")
    for tool in ("nvidia-smi", "nvidia-persistenced", "nvidia-modprobe", "nvidia-uninstall"):
        # a stand-in is on PATH; these files make "$root/usr/bin/<tool>" runnable and mark it installed
        _mkfile(r, f"usr/bin/{tool}", f'#!/bin/sh\nexec {tool} "$@"\n', 0o755, created)
    if modules:
        dkms = "--dkms" in opts and "dkms" in dpkg_list(r)
        if "--dkms" in opts and not dkms:
            warnings.append("WARNING: The DKMS package is not installed: the kernel modules will be built and "
                            "installed without DKMS and will not be rebuilt for new kernels.")
        if dkms:
            # nvidia-installer 580.95.05 misc.c dkms_register_module: the module built for the running kernel is
            # handed to DKMS as built and installed there (`dkms ldtarball`, the kernel-<kver>-<arch> link), its
            # source in /usr/src/nvidia-<ver> with AUTOINSTALL, so DKMS rebuilds it for each new kernel.
            dkms_tree.add(r, "nvidia", ver, DKMS_CONF.format(version=ver, type=mtype), created)
            try:
                dkms_tree.build_and_install(r, "nvidia", ver, kv, created)
            except Fail as e:
                raise Fail(f"{e.msg}\nERROR: Failed to install the kernel module through DKMS.", 1)
        else:
            for mod, ko in kernel.NV_KO.items():
                _mkfile(r, f"lib/modules/{kv}/kernel/drivers/video/{ko}", f"simulated {ko} version={ver} type={mtype}\n",
                        0o644, created)
    _mkfile(r, MANIFEST, "", 0o644, created)
    write(r / MANIFEST, json.dumps(created, indent=1) + "\n")
    for w in warnings:
        print(w, file=sys.stderr)
    if modules and load:
        from .system import modprobe
        modprobe(r, "nvidia")


def main(argv):
    r = root()
    ver = None
    if argv[:1] == ["--version-of-this-run"]:
        ver, argv = argv[1], argv[2:]
    opts = set(argv)
    bad = [o for o in opts if o not in KNOWN and not o.startswith("--kernel-module-type=")]
    if bad:
        raise Fail(f"ERROR: Unrecognized option: '{bad[0]}'\nInvalid commandline, please run `nvidia-installer "
                   "--help` for usage information.", 1)
    silent = bool({"-s", "--silent"} & opts)
    if "--uninstall" in opts:
        return uninstall(r, silent)
    if not silent and not sys.stdin.isatty():
        raise Fail("ERROR: Unable to ask questions without a terminal; run with --silent.", 1)
    if ver is None:
        raise Fail("nvidia-installer: run the .run file to install a driver", 1)
    install(r, ver, opts)


if __name__ == "__main__":
    sys.exit(run_main(main))
