"""The simulated modprobe.d (tests/fakehost/system.py ModprobeConf) against the real kmod.

The modprobe.d files the kpro5 stack renders (vfio binding, NVIDIA driver) and the seed's own, plus a table of
cases for kmod's rules, are read by `modprobe -C DIR… --showconfig` and dry-run with `modprobe -n -v -d TREE`
over a stand-in module tree (empty .ko files indexed by depmod -b). The kernel command line is bind-mounted over
/proc/cmdline in a private mount namespace (`unshare -rm`), since kmod reads no other. Where kmod is missing or
the namespace cannot be made, the comparison is skipped with the reason; the fixture check at the end runs always.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import KPRO5_SECRETS, kpro5_values
from fakehost import kernel
from fakehost.system import CONFIG_DIRS, ModprobeConf, options_concat, probe_list
from gpuhosts.plans import nvidia_driver, vfio_binding
from gpuhosts.stacks import validate_stack

KVER = "6.8.12-4-pve"
MODPROBE = "/usr/sbin/modprobe"
FIXTURE = Path(__file__).parent / "fixtures/kmod/showconfig"
# The stand-in tree's modules, at the paths a Proxmox kernel (and the .run with --dkms) puts them.
MODULE_PATHS = {"vfio": "kernel/drivers/vfio/vfio.ko", "vfio_iommu_type1": "kernel/drivers/vfio/vfio_iommu_type1.ko",
                "vfio_pci": "kernel/drivers/vfio/pci/vfio-pci.ko", "nouveau": "kernel/drivers/gpu/drm/nouveau/nouveau.ko",
                "snd_hda_intel": "kernel/sound/pci/hda/snd-hda-intel.ko", "nvidia": "updates/dkms/nvidia.ko",
                "nvidia_uvm": "updates/dkms/nvidia-uvm.ko", "nvidia_modeset": "updates/dkms/nvidia-modeset.ko",
                "nvidia_drm": "updates/dkms/nvidia-drm.ko"}
SEED = {"pve-blacklist.conf": "# This file contains a list of modules which are not supported by Proxmox VE\n\n"
                              "blacklist nvidiafb\n",
        "vfio.conf": "options vfio-pci ids=10de:2204,10de:1aef,10de:2230\n"}
CMDLINE = "initrd=\\EFI\\proxmox\\6.8.12-4-pve\\initrd.img-6.8.12-4-pve root=ZFS=rpool/ROOT/pve-1 boot=zfs iommu=pt"


def rendered() -> dict:
    """basename -> text of the modprobe.d files the kpro5 stack installs."""
    config = validate_stack(kpro5_values(), KPRO5_SECRETS)
    files = {**vfio_binding.render_files(config), **nvidia_driver.render_files(config)}
    return {f.path.rsplit("/", 1)[1]: f.content for f in files.values() if f.path.startswith("/etc/modprobe.d/")}


# id, {directory: {name: text}} besides the rendered and seed files in etc/modprobe.d, modules.softdep, cmdline
CASES = [
    ("rendered and seed", {}, "", CMDLINE),
    ("first softdep wins, by basename across files", {"etc/modprobe.d": {"00-early.conf": "softdep nvidia pre: nouveau\n"}},
     "", CMDLINE),
    ("modules.softdep sorts among the files by its name",
     {"etc/modprobe.d": {"zz-late.conf": "softdep nvidia_uvm pre: nouveau\n"}},
     "softdep nvidia_uvm pre: vfio\n", CMDLINE),
    ("first install wins", {"etc/modprobe.d": {"00-install.conf": "install vfio_pci /bin/true\n"}}, "", CMDLINE),
    ("a file in /etc hides the same name in /lib",
     {"lib/modprobe.d": {"vfio.conf": "options vfio-pci ids=10de:2230\n"}}, "", CMDLINE),
    ("/run before /usr/local/lib before /lib",
     {"run/modprobe.d": {"x.conf": "options nouveau modeset=0\n"},
      "usr/local/lib/modprobe.d": {"x.conf": "options nouveau modeset=1\n", "y.conf": "blacklist snd_hda_intel\n"},
      "lib/modprobe.d": {"y.conf": "blacklist nvidia\n", "z.conf": "options vfio_pci disable_idle_d3=1\n"}},
     "", CMDLINE),
    ("continued lines, tabs and a mid-line #",
     {"etc/modprobe.d": {"cont.conf": "options vfio-pci \\\n    ids=10de:2230 # note\nsoftdep nouveau pre:\\\n vfio\n"
                                      "\toptions\tnouveau\tmodeset=0\n  # indented\n"}}, "", CMDLINE),
    ("options accumulate", {"etc/modprobe.d": {"more.conf": "options vfio_pci disable_vga=1\n"}}, "", CMDLINE),
    (".alias files count, other names do not",
     {"etc/modprobe.d": {"x.alias": "blacklist nouveau\n", "y.conf.bak": "blacklist nvidia\n",
                         ".hidden.conf": "blacklist vfio\n"}}, "", CMDLINE),
    ("kernel command line options", {}, "",
     CMDLINE + " vfio-pci.ids=10de:2230 vfio_pci.disable_vga=1 \"nvidia.NVreg_X=1 2\" modprobe.blacklist=nouveau,x"),
]


def make_case(base: Path, extra: dict, softdep: str, cmdline: str) -> Path:
    """A host tree holding the case's modprobe.d, module tree and /proc/cmdline."""
    for name, text in {**SEED, **rendered()}.items():
        (base / "etc/modprobe.d").mkdir(parents=True, exist_ok=True)
        (base / "etc/modprobe.d" / name).write_text(text)
    for directory, files in extra.items():
        for name, text in files.items():
            (base / directory).mkdir(parents=True, exist_ok=True)
            (base / directory / name).write_text(text)
    for d in CONFIG_DIRS:
        (base / d).mkdir(parents=True, exist_ok=True)
    modules = base / "lib/modules" / KVER
    for path in MODULE_PATHS.values():
        (modules / path).parent.mkdir(parents=True, exist_ok=True)
        (modules / path).write_bytes(b"")
    (base / "var/lib/fakehost").mkdir(parents=True, exist_ok=True)
    (base / "var/lib/fakehost/settings.json").write_text(json.dumps({"kernel": KVER}))
    (base / "proc").mkdir(exist_ok=True)
    (base / "proc/cmdline").write_text(cmdline + "\n")
    if shutil.which("depmod") or Path("/usr/sbin/depmod").exists():
        # depmod indexes the stand-ins (and writes modules.softdep from their empty modinfo)
        subprocess.run([shutil.which("depmod") or "/usr/sbin/depmod", "-b", str(base), KVER], capture_output=True)
    (modules / "modules.softdep").write_text("# Soft dependencies extracted from modules themselves.\n" + softdep)
    return base


def kmod(base: Path, *args: str) -> str:
    """The real modprobe over the case's directories (in kmod's order) with its /proc/cmdline."""
    if not Path(MODPROBE).exists():
        pytest.skip("kmod is not installed here (make system-deps installs it)")
    configs = " ".join(f"-C {base / d}" for d in CONFIG_DIRS)
    script = (f"mount --bind {base}/proc/cmdline /proc/cmdline && "
              f"{MODPROBE} -d {base} -S {KVER} {configs} {' '.join(args)}")
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True)
    if done.returncode and "mount" in done.stderr + done.stdout and "modprobe" not in done.stderr:
        pytest.skip(f"no private mount namespace for /proc/cmdline here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    return done.stdout


def config_part(showconfig: str) -> str:
    return showconfig.split("\n# End of configuration files.")[0]


@pytest.mark.parametrize("extra, softdep, cmdline", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_showconfig_matches_kmod(tmp_path, extra, softdep, cmdline):
    base = make_case(tmp_path, extra, softdep, cmdline)
    assert config_part(ModprobeConf.from_dirs(base).showconfig()) == config_part(kmod(base, "--showconfig"))


def simulated_dry_run(base: Path, conf: ModprobeConf, mod: str, ignore_install: bool) -> list:
    """What `modprobe -n -v` prints (tools/modprobe.c print_action) for the simulated probe list."""
    lines = []
    for m, may_install, _required in probe_list(base, conf, mod, ignore_install):
        options = options_concat(conf.options_of(m), "")
        command = conf.install_of(m)
        if command is not None and may_install:
            lines.append(f"install {command} {options}")
        elif m in MODULE_PATHS:
            lines.append(f"insmod {base}/lib/modules/{KVER}/{MODULE_PATHS[m]} {options}")
    return lines


@pytest.mark.parametrize("extra, softdep, cmdline", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
@pytest.mark.parametrize("mod, ignore_install", [("nvidia", False), ("nvidia-uvm", False), ("nouveau", False),
                                                 ("snd-hda-intel", False), ("vfio-pci", False), ("vfio-pci", True)])
def test_the_probe_list_matches_kmods_dry_run(tmp_path, monkeypatch, extra, softdep, cmdline, mod, ignore_install):
    """Which softdep and which install command win, in what order, and the options each module gets."""
    base = make_case(tmp_path, extra, softdep, cmdline)
    real = kmod(base, "-n", "-v", *(["--ignore-install"] if ignore_install else []), mod)
    # Empty .ko files carry no dependencies, so kmod sees none: nor does the simulation here.
    monkeypatch.setattr(kernel, "MODULES", {m: ((), drv) for m, (_, drv) in kernel.MODULES.items()})
    assert simulated_dry_run(base, ModprobeConf.from_dirs(base), mod, ignore_install) == real.splitlines()


def test_the_simulated_showconfig_prints_what_kmod_printed_for_the_fixture(tmp_path):
    """tests/fixtures/kmod/showconfig: a tree of modprobe.d files and kmod 30's --showconfig of it (README)."""
    base = tmp_path / "host"
    shutil.copytree(FIXTURE / "tree", base)
    for d in CONFIG_DIRS:
        (base / d).mkdir(parents=True, exist_ok=True)
    expected = (FIXTURE / "showconfig.txt").read_text()
    assert config_part(ModprobeConf.from_dirs(base, KVER).showconfig()) == config_part(expected)
