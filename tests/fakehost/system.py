"""Host tools: modprobe, update-initramfs, proxmox-boot-tool, update-grub, apt-get/dpkg, uname."""
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

from . import BIN, host_env, kernel
from .util import Fail, kernel_release, root, settings, tree, write


# ---- modprobe configuration -----------------------------------------------------------------------------

class ModprobeConf:
    """The modprobe.d directives that matter here: options, blacklist, softdep, install."""

    def __init__(self, files: dict):
        self.options, self.blacklist, self.pre, self.install = {}, set(), {}, {}
        for name in sorted(files, key=os.path.basename):
            if not name.endswith(".conf"):
                continue
            for line in files[name].replace("\\\n", " ").splitlines():
                w = line.split("#", 1)[0].split()
                if len(w) < 2:
                    continue
                mod = kernel.norm(w[1])
                if w[0] == "options":
                    self.options.setdefault(mod, {}).update(dict(o.split("=", 1) if "=" in o else (o, "") for o in w[2:]))
                elif w[0] == "blacklist":
                    self.blacklist.add(mod)
                elif w[0] == "softdep" and "pre:" in w:
                    i = w.index("pre:") + 1
                    self.pre.setdefault(mod, []).extend(
                        kernel.norm(x) for x in w[i:w.index("post:") if "post:" in w else len(w)])
                elif w[0] == "install":
                    self.install[mod] = " ".join(w[2:])

    @classmethod
    def live(cls, r):
        files = {}
        for d in ("usr/lib/modprobe.d", "lib/modprobe.d", "etc/modprobe.d"):  # etc wins over lib by name
            for p in sorted((r / d).glob("*.conf")) if (r / d).is_dir() else []:
                files[p.name] = p.read_text()
        return cls(files)


def modprobe(r, mod, conf=None, ignore_install=False):
    mod = kernel.norm(mod)
    if kernel.is_loaded(r, mod):
        return
    conf = conf or ModprobeConf.live(r)
    if mod in conf.install and not ignore_install:
        rc = run_command_line(r, conf.install[mod])
        if rc:
            raise Fail(f"modprobe: ERROR: Error running install command '{conf.install[mod]}' for module {mod}: retcode {rc}")
        return
    if not kernel.available(r, mod):
        raise Fail(f"modprobe: FATAL: Module {mod} not found in directory /lib/modules/{kernel_release(r)}")
    for dep in conf.pre.get(mod, []) + list(kernel.MODULES[mod][0]):
        modprobe(r, dep, conf)
    kernel.insert_module(r, mod, conf.options.get(mod))


def modules_list(text: str) -> list:
    """Module names of /etc/modules or a modules-load.d file."""
    return [line.split()[0] for line in text.splitlines() if line.strip() and line.lstrip()[0] not in "#;"]


def cmd_modprobe(argv):
    r = root()
    remove = quiet = ignore_install = False
    names = []
    for a in argv:
        if a in ("-r", "--remove"):
            remove = True
        elif a in ("-q", "--quiet"):
            quiet = True
        elif a == "--ignore-install":
            ignore_install = True
        elif a.startswith("-"):
            continue
        elif "=" in a and names:  # module parameters on the command line
            continue
        else:
            names.append(a)
    if not names:
        raise Fail("modprobe: ERROR: missing module name.")
    try:
        if remove:
            for n in names:
                kernel.remove_module(r, n)
        else:
            modprobe(r, names[0], ignore_install=ignore_install)
    except Fail as e:
        raise Fail("" if quiet and "not found" in e.msg else e.msg, 1)


# ---- running configured command lines (ExecStart=, modprobe install) with the stand-ins -------------------

def map_program(r, prog: str) -> str:
    """An absolute program path names a stand-in when one exists, else the file inside the tree."""
    if prog.startswith("/"):
        if (BIN / os.path.basename(prog)).is_file():
            return str(BIN / os.path.basename(prog))
        if (r / prog.lstrip("/")).exists():
            return str(r / prog.lstrip("/"))
    return prog


def _standin_paths(r, script: str) -> str:
    """Inside a ``sh -c`` script absolute program paths are rewritten as ``map_program`` does: to a stand-in, or
    to an executable file that the tree holds at that path (a script the host's configuration names)."""
    def mapped(m):
        path = m.group(0)
        if (BIN / os.path.basename(path)).is_file():
            return str(BIN / os.path.basename(path))
        inside = r / path.lstrip("/")
        return str(inside) if inside.is_file() and os.access(inside, os.X_OK) else path
    return re.sub(r"(?<![\w/.$-])/[\w.+/-]+", mapped, script)


def run_argv(r, argv, env=None) -> int:
    shell = os.path.basename(argv[0]) in ("sh", "bash")
    argv = [map_program(r, argv[0])] + [_standin_paths(r, a) if shell and argv[i - 1] == "-c" else a
                                        for i, a in enumerate(argv) if i]
    e = host_env(tree(), **({} if env is None else env))
    e["GPUHOSTS_HOST_ROOT"] = str(r)
    for k in ("FAKEHOST_TREE", "FAKEHOST_CONTAINER"):
        if os.environ.get(k):
            e[k] = os.environ[k]
    try:
        return subprocess.run(argv, env=e, timeout=120).returncode
    except FileNotFoundError:
        print(f"{argv[0]}: No such file or directory", file=sys.stderr)
        return 127


def run_command_line(r, line: str) -> int:
    return run_argv(r, ["/bin/sh", "-c", line])


# ---- initramfs ------------------------------------------------------------------------------------------

def initrd_sources(r) -> list:
    out = []
    for pat in ("etc/modprobe.d/*", "etc/modules", "etc/modules-load.d/*", "etc/initramfs-tools/**/*"):
        out += [p for p in r.glob(pat) if p.is_file() or p.is_symlink()]
    return sorted({p.relative_to(r).as_posix() for p in out})


def initrd_bytes(r, kver) -> bytes:
    """A deterministic image of what update-initramfs copies: same config in, same bytes out."""
    parts = [f"fakehost initramfs for Linux {kver}\n".encode()]
    for name in initrd_sources(r):
        p = r / name
        data = f"-> {os.readlink(p)}".encode() if p.is_symlink() else p.read_bytes()
        parts.append(f"=== {name} {stat.S_IMODE(p.lstat().st_mode):o} {len(data)}\n".encode() + data + b"\n")
    return b"".join(parts)


def parse_initrd(data: bytes) -> dict:
    """name -> (mode, content) of the files inside an image made by initrd_bytes."""
    out, i = {}, data.index(b"\n") + 1
    while i < len(data):
        j = data.index(b"\n", i)
        _, name, mode, size = data[i:j].decode().split(" ")
        out[name] = (int(mode, 8), data[j + 1:j + 1 + int(size)])
        i = j + 2 + int(size)
    return out


def kernels(r) -> list:
    return [settings(r)["kernel"]]


def cmd_update_initramfs(argv):
    r = root()
    if not {"-u", "-c"} & set(argv):
        raise Fail("Usage: update-initramfs {-c|-d|-u} [-k version] [-v] [-b directory]", 1)
    k = argv[argv.index("-k") + 1] if "-k" in argv else kernels(r)[-1]
    targets = kernels(r) if k == "all" else [k]
    for kv in targets:
        if kv not in kernels(r):
            raise Fail(f"update-initramfs: {kv} has no modules directory", 1)
        print(f"update-initramfs: Generating /boot/initrd.img-{kv}")
        write(r / f"boot/initrd.img-{kv}", initrd_bytes(r, kv))
    if settings(r)["bootloader"] == "systemd-boot":  # the proxmox-boot-tool post-update hook syncs the ESP
        print("Running hook script 'zz-proxmox-boot'..")
        refresh(r)


# ---- boot loaders ---------------------------------------------------------------------------------------

def loader_entry(r, kv) -> Path:
    return r / f"boot/loader/entries/proxmox-{kv}.conf"


def refresh(r):
    s = settings(r)
    cmdline = " ".join((r / "etc/kernel/cmdline").read_text().split())
    print(f"Copying and configuring kernels on /dev/disk/by-uuid/{s['esp_uuid']}")
    for kv in kernels(r):
        print(f"\tCopying kernel and creating boot-entry for {kv}")
        write(loader_entry(r, kv), f"title    Proxmox Virtual Environment\nversion  {kv}\noptions  {cmdline}\n"
              f"linux    /EFI/proxmox/{kv}/vmlinuz-{kv}\ninitrd   /EFI/proxmox/{kv}/initrd.img-{kv}\n")


def cmd_proxmox_boot_tool(argv):
    r = root()
    s = settings(r)
    sub = argv[0] if argv else ""
    esp = s["bootloader"] == "systemd-boot"
    if sub == "status":
        quiet = "--quiet" in argv
        if not quiet:
            print("Re-executing '/usr/sbin/proxmox-boot-tool' in new private mount namespace..", file=sys.stderr)
            print("System currently booted with uefi")
        if not esp:
            raise Fail("" if quiet else "E: /etc/kernel/proxmox-boot-uuids does not exist.", 2)
        if not quiet:
            print(f"{s['esp_uuid']} is configured with: uefi (versions: {', '.join(kernels(r))})")
    elif sub == "refresh":
        print("Running hook script 'proxmox-auto-removal'..\nRunning hook script 'zz-proxmox-boot'..")
        if not esp:
            print("No /etc/kernel/proxmox-boot-uuids found, skipping ESP sync.")
            return 0
        print("Re-executing '/etc/kernel/postinst.d/zz-proxmox-boot' in new private mount namespace..")
        refresh(r)
    elif argv[:2] == ["kernel", "list"]:
        print("Manually selected kernels:\nNone.\n\nAutomatically selected kernels:\n" + "\n".join(kernels(r)))
    else:
        raise Fail(f"USAGE: /usr/sbin/proxmox-boot-tool <commands> [ARGS]\n\n  unknown command '{sub}'", 1)


def grub_cmdline(r):
    """GRUB_CMDLINE_LINUX and _DEFAULT as update-grub gets them: by sourcing the shell files."""
    out = subprocess.run(["bash", "-c", 'set -a; . "$1"; for f in "$2"/*.cfg; do [ -e "$f" ] && . "$f"; done; '
                          'printf "%s\\0%s" "$GRUB_CMDLINE_LINUX" "$GRUB_CMDLINE_LINUX_DEFAULT"',
                          "_", str(r / "etc/default/grub"), str(r / "etc/default/grub.d")],
                         capture_output=True, text=True, check=True).stdout
    return out.split("\0")


def update_grub(r, verbose=True):
    lin, default = grub_cmdline(r)
    body = "".join(
        f"menuentry 'Proxmox VE GNU/Linux, with Linux {kv}' --class proxmox --class gnu-linux --class gnu --class os {{\n"
        f"\tlinux\t/boot/vmlinuz-{kv} {settings(r)['grub_root']} ro {lin} {default}\n"
        f"\tinitrd\t/boot/initrd.img-{kv}\n}}\n" for kv in kernels(r))
    write(r / "boot/grub/grub.cfg", "#\n# DO NOT EDIT THIS FILE\n#\n# It is automatically generated by grub-mkconfig"
          " using templates\n# from /etc/grub.d and settings from /etc/default/grub\n#\n" + body)
    if verbose:
        print("Generating grub configuration file ...", file=sys.stderr)
        for kv in kernels(r):
            print(f"Found linux image: /boot/vmlinuz-{kv}\nFound initrd image: /boot/initrd.img-{kv}", file=sys.stderr)
        print("done", file=sys.stderr)


def cmd_update_grub(argv):
    update_grub(root())


def boot_cmdline(r) -> str:
    """/proc/cmdline of the next boot: what the boot loader in use will pass."""
    kv = settings(r)["kernel"]
    if settings(r)["bootloader"] == "systemd-boot":
        opts = re.search(r"^options\s+(.*)$", loader_entry(r, kv).read_text(), re.M).group(1)
        return f"initrd=\\EFI\\proxmox\\{kv}\\initrd.img-{kv} " + " ".join(opts.split())
    line = re.search(rf"^\s*linux\s+/boot/vmlinuz-{re.escape(kv)}\s+(.*)$",
                     (r / "boot/grub/grub.cfg").read_text(), re.M).group(1)
    return f"BOOT_IMAGE=/boot/vmlinuz-{kv} " + " ".join(line.split())


# ---- packages -------------------------------------------------------------------------------------------

def dpkg_list(r) -> list:
    p = r / "var/lib/fakehost/dpkg-installed"
    return p.read_text().split() if p.exists() else []


def pkg_version(name):
    return {"dkms": "3.0.10-8+deb12u1", "proxmox-default-headers": "1.1.0"}.get(
        name, "6.8.12-4" if name.startswith("proxmox-headers-") else "1.0-1")


def cmd_apt_get(argv):
    r = root()
    yes = any(a in ("-y", "--yes", "--assume-yes", "-qy", "-yq") for a in argv)
    it = iter(argv)
    words = []
    for a in it:
        if a == "-o":
            next(it, None)
        elif not a.startswith("-"):
            words.append(a)
    if not words:
        raise Fail("E: No command given", 100)
    sub, pkgs = words[0], words[1:]
    have = dpkg_list(r)
    if sub in ("update", "autoremove", "clean"):
        print("Reading package lists... Done")
        return 0
    if sub not in ("install", "remove", "purge"):
        raise Fail(f"E: Invalid operation {sub}", 100)
    print("Reading package lists...\nBuilding dependency tree...\nReading state information...")
    for p in pkgs:
        if sub == "install" and (not re.fullmatch(r"[a-z0-9][a-z0-9+.-]+", p)
                                 or (p.startswith("proxmox-headers-") and not p.endswith("-pve"))):
            raise Fail(f"E: Unable to locate package {p}", 100)
    todo = [p for p in pkgs if (p not in have) == (sub == "install")]
    for p in pkgs:
        if p not in todo:
            print(f"{p} is already the newest version ({pkg_version(p)})." if sub == "install"
                  else f"Package '{p}' is not installed, so not removed")
    if todo and not yes:
        print("Do you want to continue? [Y/n] Abort.")
        return 1
    verb = "Setting up" if sub == "install" else "Removing"
    for p in todo:
        print(f"{verb} {p} ({pkg_version(p)}) ...")
    new = have + todo if sub == "install" else [p for p in have if p not in todo]
    write(r / "var/lib/fakehost/dpkg-installed", "".join(p + "\n" for p in new))


def cmd_dpkg_query(argv):
    r = root()
    fmt, pkgs, show = "${Package}\t${Version}\n", [], False
    it = iter(argv)
    for a in it:
        if a in ("-W", "--show"):
            show = True
        elif a in ("-f", "--showformat"):
            fmt = next(it)
        elif a.startswith(("-f=", "--showformat=")):
            fmt = a.split("=", 1)[1]
        elif a in ("-s", "--status"):
            return cmd_dpkg(["-s", *list(it)])
        else:
            pkgs.append(a)
    if not show:
        raise Fail("dpkg-query: error: need an action option", 2)
    rc = 0
    for p in pkgs:
        if p not in dpkg_list(r):
            print(f"dpkg-query: no packages found matching {p}", file=sys.stderr)
            rc = 1
            continue
        out = fmt.replace("\\n", "\n").replace("\\t", "\t")
        for k, v in {"Package": p, "Version": pkg_version(p), "Status": "install ok installed",
                     "db:Status-Abbrev": "ii ", "binary:Package": p}.items():
            out = out.replace("${" + k + "}", v)
        sys.stdout.write(out)
    return rc


def cmd_dpkg(argv):
    r = root()
    if argv[:1] not in (["-s"], ["--status"], ["-l"]):
        raise Fail("dpkg: error: only -s and -l are simulated", 2)
    rc = 0
    for p in argv[1:]:
        if p in dpkg_list(r):
            print(f"Package: {p}\nStatus: install ok installed\nVersion: {pkg_version(p)}\n" if argv[0] != "-l"
                  else f"ii  {p}  {pkg_version(p)}  amd64")
        else:
            print(f"dpkg-query: package '{p}' is not installed and no information is available", file=sys.stderr)
            rc = 1
    return rc


def cmd_uname(argv):
    if argv in (["-r"], ["--kernel-release"]):
        print(kernel_release())
        return 0
    real = next((str(Path(d) / "uname") for d in os.environ.get("PATH", "").split(":")
                 if d and Path(d).resolve() != BIN and (Path(d) / "uname").exists()), "/bin/uname")
    return subprocess.run([real, *argv]).returncode
