"""DKMS 3.0.10 (Debian 12), for the NVIDIA module the ``.run`` registers, and kernel updates that build it.

Layout as dell/dkms v3.0.10 (3f72c9b059bccbc1ca1ff8b431c1763b1bdb60cd) ``dkms.in`` keeps it under ``/var/lib/dkms``:
``<m>/<v>/source`` links to ``/usr/src/<m>-<v>`` (``add_module``); a build for a kernel leaves the modules in
``<m>/<v>/<kver>/<arch>/module/`` and its log in ``…/log/make.log`` (``actual_build``); installed means
``<m>/kernel-<kver>-<arch>`` links to ``<v>/<kver>/<arch>`` (``do_install``, ``_is_module_installed``) and the modules
are in ``/lib/modules/<kver>/updates/dkms``. A failed build leaves its log in ``<m>/<v>/build/make.log``.

The host setting ``dkms_build_fails`` (a list of kernel releases) makes every build for those kernels fail, as a
module that does not compile against a newer kernel does. ``install_kernel`` is what installing a newer Proxmox
kernel with its headers does on such a host: the kernel's post-install hook runs ``dkms autoinstall`` for it.
"""
import os
import shutil
import sys
from pathlib import Path

from . import TESTS, kernel
from .system import dpkg_list, initrd_bytes, refresh, update_grub
from .util import Fail, root, settings, write

ARCH = "x86_64"
# The simulated source tree says which kernel module it builds (the real one is the open or the proprietary source).
MODULE_TYPE = "# fakehost: kernel module type "
TREE = "var/lib/dkms"
FIXTURES = TESTS / "fixtures/dkms"
# The sample values the fixtures were written with (tests/fixtures/dkms/README.md).
SAMPLE_VERSION, SAMPLE_KERNELS = "580.95.05", ("6.8.12-4-pve", "6.8.12-9-pve")


def _fixture(name: str, version: str, kver: str) -> list:
    text = (FIXTURES / name).read_text().replace(SAMPLE_VERSION, version)
    for sample in SAMPLE_KERNELS:
        text = text.replace(sample, kver)
    return text.splitlines()


def source_dir(module, version) -> str:
    return f"usr/src/{module}-{version}"


def base_dir(module, version, kver) -> str:
    return f"{TREE}/{module}/{version}/{kver}/{ARCH}"


def build_log(module, version, kver=None) -> str:
    """Where the make log of a build is: beside the build for a kernel when it succeeded, else in build/."""
    return f"{base_dir(module, version, kver)}/log/make.log" if kver else f"{TREE}/{module}/{version}/build/make.log"


def _conf(r, module, version) -> dict:
    out = {}
    source = os.readlink(r / TREE / module / version / "source")  # absolute on the host: inside the tree here
    for line in (r / source.lstrip("/") / "dkms.conf").read_text().splitlines():
        if line.startswith(MODULE_TYPE):
            out["module_type"] = line[len(MODULE_TYPE):]
        elif "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            out[k] = v.strip('"')
    return out


def is_added(r, module, version) -> bool:
    return (r / TREE / module / version / "source").is_symlink()


def is_built(r, module, version, kver) -> bool:
    return (r / base_dir(module, version, kver) / "module" / kernel.NV_KO[module]).exists()


def is_installed(r, module, version, kver) -> bool:
    link = r / TREE / module / f"kernel-{kver}-{ARCH}"
    return link.is_symlink() and os.readlink(link) == f"{version}/{kver}/{ARCH}"


def add(r, module, version, conf_text, created):
    """The .run's DKMS hand-over (nvidia-installer misc.c dkms_gen_tarball + ``dkms ldtarball``): the source with
    its dkms.conf goes to /usr/src, DKMS links it."""
    _make(r, f"{source_dir(module, version)}/dkms.conf", conf_text, created)
    link = r / TREE / module / version / "source"
    _mkdirs(r, link.parent, created)
    os.symlink(f"/{source_dir(module, version)}", link)
    created["files"].append(link.relative_to(r).as_posix())


def build_and_install(r, module, version, kver, created=None):
    """Builds the registered module for ``kver`` and installs it there; a Fail with DKMS's words if it cannot."""
    created = created if created is not None else {"files": [], "dirs": []}
    if kver in settings(r).get("dkms_build_fails", []):
        _make(r, build_log(module, version), f"DKMS make.log for {module}-{version} for kernel {kver} ({ARCH})\n"
              "simulated: the module does not compile against this kernel\n", created)
        raise Fail("\n".join(_fixture("build-failed-3.0.10.txt", version, kver)[:2]), 10)
    mtype = _conf(r, module, version).get("module_type", "open")
    base = base_dir(module, version, kver)
    _make(r, f"{base}/log/make.log", f"DKMS make.log for {module}-{version} for kernel {kver} ({ARCH})\n", created)
    for ko in kernel.NV_KO.values():
        body = f"simulated {ko} version={version} type={mtype}\n"
        _make(r, f"{base}/module/{ko}", body, created)
        _make(r, f"lib/modules/{kver}/updates/dkms/{ko}", body, created)
    link = r / TREE / module / f"kernel-{kver}-{ARCH}"
    link.unlink(missing_ok=True)
    os.symlink(f"{version}/{kver}/{ARCH}", link)
    created["files"].append(link.relative_to(r).as_posix())


def remove(r, module, version):
    """``dkms remove -m M -v V --all`` (3.0.10 ``remove_module``): uninstalled from every kernel, its tree gone."""
    top = r / TREE / module
    for link in sorted(top.glob(f"kernel-*-{ARCH}")) if top.is_dir() else []:
        target = os.readlink(link)
        if link.is_symlink() and target.split("/")[0] == version:
            kver = target.split("/")[1]
            for ko in kernel.NV_KO.values():
                (r / f"lib/modules/{kver}/updates/dkms/{ko}").unlink(missing_ok=True)
            for d in (f"lib/modules/{kver}/updates/dkms", f"lib/modules/{kver}/updates"):
                if (r / d).is_dir() and not any((r / d).iterdir()):
                    (r / d).rmdir()
            link.unlink()
    shutil.rmtree(top / version, ignore_errors=True)
    if top.is_dir() and not any(top.iterdir()):
        top.rmdir()


def _mkdirs(r, d: Path, created):
    missing = []
    while not d.exists():
        missing.append(d)
        d = d.parent
    created["dirs"] += [x.relative_to(r).as_posix() for x in missing]
    for x in reversed(missing):
        x.mkdir()


def _make(r, relpath, text, created):
    _mkdirs(r, (r / relpath).parent, created)
    write(r / relpath, text)
    if relpath not in created["files"]:
        created["files"].append(relpath)


def modules(r):
    """(module, version) of every registered module, sorted."""
    base = r / TREE
    return sorted((m.name, v.name) for m in base.iterdir() if m.is_dir() for v in m.iterdir()
                  if v.is_dir() and is_added(r, m.name, v.name)) if base.is_dir() else []


def status_lines(r, module=None, version=None, kver=None) -> list:
    """``dkms status`` as 3.0.10's do_status prints it (tests/fixtures/dkms/status-3.0.10.txt)."""
    out = []
    for m, v in modules(r):
        if (module and m != module) or (version and v != version):
            continue
        kernels = [kver] if kver else sorted(d.name for d in (r / TREE / m / v).iterdir()
                                             if d.is_dir() and d.name[:1].isdigit())
        built = [k for k in kernels if is_built(r, m, v, k)]
        for k in built:
            installed, plain, _added = (line.replace("nvidia/", f"{m}/", 1) for line in _fixture("status-3.0.10.txt", v, k))
            out.append(installed if is_installed(r, m, v, k) else plain)
        if not built:
            out.append(_fixture("status-3.0.10.txt", v, SAMPLE_KERNELS[0])[2].replace("nvidia/", f"{m}/", 1))
    return out


def cmd_dkms(argv):
    r = root()
    if "dkms" not in dpkg_list(r):  # the stand-in is on PATH; the program is there only with its package
        raise Fail("bash: dkms: command not found", 127)
    action, opts, it = (argv[0] if argv else ""), {}, iter(argv[1:])
    for a in it:
        if a in ("-m", "-v", "-k", "-a"):
            opts[a] = next(it, "")
        elif a.startswith("--"):
            opts[a] = True
        elif "/" in a:
            opts["-m"], opts["-v"] = a.split("/", 1)
    if action == "status":
        for line in status_lines(r, opts.get("-m"), opts.get("-v"), opts.get("-k")):
            print(line)
        return 0
    if action == "autoinstall":
        kver = opts.get("-k") or settings(r)["kernel"]
        failed = False
        for m, v in modules(r):
            if is_installed(r, m, v, kver) or _conf(r, m, v).get("AUTOINSTALL") != "yes":
                continue
            try:
                build_and_install(r, m, v, kver)
                print(f"{m}/{v} autoinstall on {kver}: installed")
            except Fail as e:
                print(e.msg, file=sys.stderr)
                failed = True
        if failed:
            raise Fail("\n".join(_fixture("build-failed-3.0.10.txt", SAMPLE_VERSION, kver)[2:]), 11)
        return 0
    if action == "install":
        m, v, kver = opts.get("-m"), opts.get("-v"), opts.get("-k") or settings(r)["kernel"]
        if not (m and v and is_added(r, m, v)):
            raise Fail(f"Error! The module/version combo: {m}-{v} is not located in the DKMS tree.", 3)
        build_and_install(r, m, v, kver)
        return 0
    raise Fail(f"Error! Unknown action specified: \"{action}\"", 1)


def install_kernel(t: Path, kver: str, boot: bool = True):
    """apt-get install proxmox-kernel-<kver>-signed proxmox-headers-<kver> on a host with DKMS, then (``boot``)
    a reboot into it, the newest kernel being the default one. The kernel's postinst hook (dkms 3.0.10
    ``kernel_postinst.d_dkms`` → ``dkms_autoinstaller start``) builds every AUTOINSTALL module for it; a failed build
    is reported and the kernel stays installed."""
    s = settings(t)
    kernels = list(s.get("kernels") or [s["kernel"]])
    if kver not in kernels:
        kernels.append(kver)
    from .util import configure
    configure(t, kernels=kernels)
    write(t / f"boot/vmlinuz-{kver}", f"simulated Linux {kver}\n")
    (t / f"lib/modules/{kver}/kernel/drivers").mkdir(parents=True, exist_ok=True)
    have = dpkg_list(t)
    new = [p for p in (f"proxmox-kernel-{kver}-signed", f"proxmox-headers-{kver}") if p not in have]
    write(t / "var/lib/fakehost/dpkg-installed", "".join(p + "\n" for p in sorted(have + new)))
    write(t / f"boot/initrd.img-{kver}", initrd_bytes(t, kver))
    failed = []
    if "dkms" in have:
        for m, v in modules(t):
            if _conf(t, m, v).get("AUTOINSTALL") == "yes" and not is_installed(t, m, v, kver):
                try:
                    build_and_install(t, m, v, kver)
                except Fail as e:
                    failed.append(e.msg)
    import contextlib
    import io
    with contextlib.redirect_stdout(io.StringIO()):
        update_grub(t, verbose=False) if s["bootloader"] == "grub" else refresh(t)
    if boot:
        import subprocess
        from . import host_env
        configure(t, kernel=kver)
        subprocess.run(["reboot"], env=host_env(t), check=True, capture_output=True)
    return failed


def main(argv):
    return cmd_dkms(argv)


if __name__ == "__main__":
    from .util import run_main
    sys.exit(run_main(main))
