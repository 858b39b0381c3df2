"""Host tools: modprobe, update-initramfs, proxmox-boot-tool, update-grub, apt-get/dpkg, uname."""
import fnmatch
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from . import BIN, host_env, kernel, systemd
from .programs import run_argv
from .util import Fail, kernel_release, replace_file, root, settings, tree, write


# ---- modprobe configuration -----------------------------------------------------------------------------
# As kmod 30 reads it (Debian 12 ships 30+20221128-1; kmod-project/kmod tag v30, commit
# 4812fa9695654d4204c9ae6158b9d700b9e6b010): libkmod/libkmod.c default_config_paths; libkmod/libkmod-config.c
# kmod_config_new, conf_files_list, conf_files_filter_out, conf_files_insert_sorted, kmod_config_parse,
# kmod_config_add_softdep, softdep_to_char, kmod_config_parse_kcmdline, kcmdline_parse_result; shared/util.c
# freadline_wrapped, underscores; libkmod/libkmod-module.c kmod_module_get_options, _get_install_commands,
# _get_softdeps, module_do_install_commands.

# kmod's search order; a file hides a same-named one in a later directory. Debian 12 is merged-/usr, so
# usr/lib/modprobe.d is lib/modprobe.d there: the tree keeps both and reads usr/lib last.
CONFIG_DIRS = ("etc/modprobe.d", "run/modprobe.d", "usr/local/lib/modprobe.d", "lib/modprobe.d", "usr/lib/modprobe.d")


def modname(word: str):
    """underscores(): '-' becomes '_' outside [...]; None when a bracket is left open."""
    out, depth = [], 0
    for ch in word:
        depth += ch == "["
        depth -= ch == "]" and depth > 0
        out.append("_" if ch == "-" and not depth else ch)
    return None if depth else "".join(out)


def logical_lines(text: str) -> list:
    """freadline_wrapped(): a backslash joins the next line (newline dropped, nothing added); before any other
    character the backslash itself is dropped."""
    lines, cur, i = [], [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            i += 1
            if text[i] != "\n":
                cur.append(text[i])
        elif ch == "\n":
            lines.append("".join(cur))
            cur = []
        elif ch != "\\":
            cur.append(ch)
        i += 1
    if cur:
        lines.append("".join(cur))
    return lines


def kcmdline_options(cmdline: str) -> list:
    """(module, option) pairs that kmod_config_parse_kcmdline takes from /proc/cmdline: `mod.param[=value]`
    words; `modprobe.blacklist=a,b` gives ("modprobe.blacklist", name) pairs. A word quoted whole is re-quoted
    around its value, as kmod does for what GRUB passes."""
    out = []
    for word in _kcmdline_words(cmdline):
        quoted = word.startswith('"') and word.endswith('"') and len(word) > 1
        body = word[1:-1] if quoted else word
        if '"' in body.split("=", 1)[0] or "." not in body.split("=", 1)[0]:
            continue
        mod, param = body.split(".", 1)
        if not mod or "." in param.split("=", 1)[0]:
            continue
        if quoted and "=" in param:
            name, value = param.split("=", 1)
            param = f'{name}="{value}"'
        if mod == "modprobe" and param.startswith("blacklist="):
            out += [("modprobe.blacklist", m) for m in param[len("blacklist="):].split(",")]
        elif modname(mod) is not None:
            out.append((modname(mod), param))
    return out


def _strtok(text: str) -> tuple:
    """strtok_r over blanks and tabs: the first word, and the rest after the one delimiter that ended it (None
    when nothing follows), as kmod_config_parse takes a command, a module and the rest of a line."""
    i = 0
    while i < len(text) and text[i] in " \t":
        i += 1
    if i == len(text):
        return None, None
    j = i
    while j < len(text) and text[j] not in " \t":
        j += 1
    return text[i:j], (text[j + 1:] or None) if j < len(text) else None


def _kcmdline_words(cmdline: str) -> list:
    words, cur, quoted = [], "", False
    for ch in cmdline:
        if ch == '"':
            quoted = not quoted
        if ch in " \t\n\v\f\r" and not quoted:
            if cur:
                words.append(cur)
            cur = ""
        else:
            cur += ch
    return words + ([cur] if cur and not quoted else [])


class ModprobeConf:
    """modprobe.d as kmod applies it: ``files`` maps a file's basename to its text (the directories already
    resolved by ``from_dirs``); they are read in basename order, then the kernel command line."""

    def __init__(self, files: dict, cmdline: str = ""):
        self.blacklist, self.installs, self.removes, self.aliases, self.option_list, self.softdeps = ([] for _ in range(6))
        self.bad = []
        for name in sorted(files):
            for line in logical_lines(files[name]):
                self._parse(name, line)
        for mod, param in kcmdline_options(cmdline):
            if mod == "modprobe.blacklist":
                self.blacklist.append(param)
            else:
                self.option_list.append((mod, param))

    def _parse(self, name, line):
        if not line or line[0] == "#":
            return
        cmd, rest = _strtok(line)
        if cmd == "alias":
            alias, rest = _strtok(rest or "")
            mod, _ = _strtok(rest or "")
            if modname(alias or "") and modname(mod or ""):
                self.aliases.append((modname(alias), modname(mod)))
                return
        elif cmd == "blacklist":
            mod, _ = _strtok(rest or "")
            if modname(mod or ""):
                self.blacklist.append(modname(mod))
                return
        elif cmd in ("options", "install", "remove", "softdep"):
            mod, tail = _strtok(rest or "")
            if modname(mod or "") and tail:
                {"options": self.option_list, "install": self.installs, "remove": self.removes,
                 "softdep": self.softdeps}[cmd].append(
                    (modname(mod), tail.replace("\t", " ") if cmd == "options" else tail))
                return
        if cmd:
            self.bad.append(f"{name}: ignoring bad line starting with '{cmd}'")

    @classmethod
    def from_dirs(cls, r, kver=None, dirs=CONFIG_DIRS, cmdline=None):
        """What kmod reads on the host (or in an image) rooted at ``r``: the config directories, the module
        tree's modules.softdep, /proc/cmdline."""
        files = {}
        softdep = r / f"lib/modules/{kver or kernel_release(r)}/modules.softdep"
        if softdep.is_file():
            files["modules.softdep"] = softdep.read_text()
        for d in dirs:
            for p in sorted((r / d).iterdir()) if (r / d).is_dir() else []:
                if p.name.startswith(".") or not p.name.endswith((".conf", ".alias")) or p.is_dir():
                    continue
                if p.name not in files and p.exists():
                    files[p.name] = p.read_text()
        if cmdline is None:
            cmdline = (r / "proc/cmdline").read_text() if (r / "proc/cmdline").is_file() else ""
        return cls(files, cmdline)

    @classmethod
    def live(cls, r):
        return cls.from_dirs(r)

    # lookups (libkmod-module.c)
    def options_of(self, mod) -> str:
        """Every `options` line for the module, joined by one space (kmod_module_get_options)."""
        return " ".join(v for m, v in self.option_list if m == modname(mod) and v)

    @property
    def options(self) -> dict:
        """module -> {param: value}, as the kernel takes them: a later value of a parameter wins."""
        out = {}
        for m, _ in self.option_list:
            out[m] = parse_params(self.options_of(m))
        return out

    def install_of(self, mod):
        """The first `install` whose pattern matches (fnmatch), as modprobe from module-init-tools did."""
        return next((v for m, v in self.installs if fnmatch.fnmatchcase(modname(mod), m)), None)

    def softdep_of(self, mod) -> tuple:
        """(pre, post) of the first matching `softdep` line; its names are looked up as written."""
        for m, v in self.softdeps:
            if fnmatch.fnmatchcase(modname(mod), m):
                pre, post, mode = [], [], None
                for w in v.split():
                    if w in ("pre:", "post:"):
                        mode = w
                    elif mode:
                        (pre if mode == "pre:" else post).append(w)
                return pre, post
        return [], []

    @property
    def pre(self) -> dict:
        return {m: self.softdep_of(m)[0] for m, _ in self.softdeps}

    @property
    def install(self) -> dict:
        return {m: self.install_of(m) for m, _ in self.installs}

    def showconfig(self) -> str:
        """`modprobe --showconfig` (tools/modprobe.c show_config): blacklist, install, remove, alias, options,
        softdep lines; then the index dump, which the simulated module tree does not have."""
        out = [f"blacklist {m}\n" for m in self.blacklist]
        out += [f"install {m} {v}\n" for m, v in self.installs]
        out += [f"remove {m} {v}\n" for m, v in self.removes]
        out += [f"alias {a} {m}\n" for a, m in self.aliases]
        out += [f"options {m} {v}\n" for m, v in self.option_list]
        out += [f"softdep {m} {_softdep_text(v)}\n" for m, v in self.softdeps]
        return "".join(out) + "\n# End of configuration files. Dumping indexes now:\n\n"


def _softdep_text(value: str) -> str:
    """softdep_to_char(): "pre: " and the names, then "post: " and the names, with no blank between the two."""
    pre, post, mode = [], [], None
    for w in value.split():
        if w in ("pre:", "post:"):
            mode = w
        elif mode:
            (pre if mode == "pre:" else post).append(w)
    return ("pre: " + " ".join(pre) if pre else "") + ("post: " + " ".join(post) if post else "")


def parse_params(text: str) -> dict:
    """The option string split into parameters (blanks separate, double quotes group); a later value of a
    parameter wins, which is what the simulated kernel (kernel.insert_module) assumes."""
    out = {}
    for word in _kcmdline_words(text):
        name, _, value = word.partition("=")
        out[name] = value.replace('"', "")
    return out


def _deps(mod) -> list:
    """The module's hard dependencies, deepest first (modules.dep lists them all)."""
    out = []
    for dep in kernel.MODULES.get(mod, ((), None))[0]:
        out += [d for d in _deps(dep) + [dep] if d not in out]
    return out


def probe_list(r, conf, mod, ignore_install=False) -> list:
    """(module, may run its install command, required) in load order, as kmod_module_get_probe_list builds it:
    each dependency with its softdeps around it, then the module with its own; `--ignore-install` also drops
    the module's softdeps, and a module with a softdep that resolves has its install command ignored."""
    out, seen = [], set()

    def visit(m, required, ignorecmd):
        if m in seen:
            return
        seen.add(m)
        for d in _deps(m):
            fill(d, required)
        if ignorecmd:
            out.append((m, False, required))
        else:
            fill(m, required)

    def fill(m, required):
        pre, post = (
            [kernel.norm(x) for x in names if kernel.available(r, kernel.norm(x)) or conf.install_of(x)]
            for names in conf.softdep_of(m))
        for p in pre:
            visit(p, False, False)
        out.append((m, not (pre or post), required))
        for p in post:
            visit(p, False, False)

    visit(kernel.norm(mod), True, ignore_install)
    return out


def options_concat(configured: str, extra: str) -> str:
    """module_options_concat: the configured options, a blank, then those of the command line."""
    return f"{configured} {extra}" if configured else extra


def modprobe(r, mod, conf=None, ignore_install=False, extra="", image=None):
    """Loads ``mod`` the way kmod_module_probe_insert_module does. ``image``: an unpacked initramfs whose
    modprobe.d applies and whose programs alone an install command can run."""
    mod = kernel.norm(mod)
    if kernel.is_loaded(r, mod):
        return
    conf = conf or (image_conf(r, image) if image else ModprobeConf.live(r))
    if not kernel.available(r, mod) and not (conf.install_of(mod) and not ignore_install):
        raise Fail(f"modprobe: FATAL: Module {mod} not found in directory /lib/modules/{kernel_release(r)}")
    for m, may_install, required in probe_list(r, conf, mod, ignore_install):
        if kernel.is_loaded(r, m):
            continue
        options = options_concat(conf.options_of(m), extra if m == mod else "")
        command = conf.install_of(m)
        try:
            if command is not None and may_install:
                # module_do_install_commands: $CMDLINE_OPTS becomes the options; command_do runs it with
                # system() and MODPROBE_MODULE set.
                line = command.replace("$CMDLINE_OPTS", options)
                env = {"MODPROBE_MODULE": m}
                rc = run_in_image(r, image, ["/bin/sh", "-c", line], env) if image else \
                    run_argv(r, ["/bin/sh", "-c", line], env)
                if rc:
                    raise Fail(f"modprobe: ERROR: Error running install command '{line}' for module {m}: "
                               f"retcode {rc}")
            elif kernel.available(r, m):
                kernel.insert_module(r, m, parse_params(options))
            elif required:
                raise Fail(f"modprobe: FATAL: Module {m} not found in directory /lib/modules/{kernel_release(r)}")
        except Fail:
            if required:  # errors of softdeps are ignored
                raise


def modules_list(text: str) -> list:
    """Module names of /etc/modules or a modules-load.d file."""
    return [line.split()[0] for line in text.splitlines() if line.strip() and line.lstrip()[0] not in "#;"]


def cmd_modprobe(argv):
    r = root()
    image = os.environ.get("FAKEHOST_INITRAMFS") or None
    remove = quiet = ignore_install = showconfig = False
    names, params = [], []
    for a in argv:
        if a in ("-r", "--remove"):
            remove = True
        elif a in ("-q", "--quiet"):
            quiet = True
        elif a == "--ignore-install":
            ignore_install = True
        elif a in ("-c", "--showconfig"):
            showconfig = True
        elif a.startswith("-"):
            continue
        elif names:  # module parameters on the command line (tools/modprobe.c: extra options)
            params.append(a)
        else:
            names.append(a)
    if showconfig:
        sys.stdout.write((image_conf(r, Path(image)) if image else ModprobeConf.live(r)).showconfig())
        return 0
    if not names:
        raise Fail("modprobe: ERROR: missing module name.")
    try:
        if remove:
            for n in names + params:
                kernel.remove_module(r, n)
        else:
            modprobe(r, names[0], ignore_install=ignore_install, extra=" ".join(params),
                     image=Path(image) if image else None)
    except Fail as e:
        raise Fail("" if quiet and "not found" in e.msg else e.msg, 1)


# ---- initramfs ------------------------------------------------------------------------------------------
# What mkinitramfs puts into the image (initramfs-tools 0.142, Debian 12; pexip/os-initramfs-tools tag
# debian/0.142, commit 4191d3ff1f9fefeca8e26da913c57e40027f586d): mkinitramfs (the usr-merged layout,
# CONFDIR/modules through hook-functions add_modules_from_file/force_load into conf/modules, CONFDIR/scripts,
# conf/initramfs.conf, `copy_exec /sbin/modprobe`, `copy_file config` of /etc/modprobe.d/*.conf and
# /lib/modprobe.d/*.conf, run_scripts CONFDIR/hooks, a /bin/sh); hook-functions copy_file, copy_exec,
# set_initlist, get_prereq_pairs, call_scripts.

CONFDIR = "etc/initramfs-tools"
# The programs of the image that are stand-ins on this side (bin/ for modprobe, this machine's sh for /bin/sh):
# the image records them by name, since their path here differs from one checkout to the next.
STANDIN_MARK = b"#!fakehost stand-in "
HOOK_FUNCTIONS = "/usr/share/initramfs-tools/hook-functions"
STANDIN_HOOK_FUNCTIONS = Path(__file__).resolve().parent / "share/hook-functions"
_SCRIPT_NAME = re.compile(r"[A-Za-z0-9._-]+")


def initrd_sources(r) -> list:
    """The host files mkinitramfs copies from the configuration (hooks add what they copy themselves)."""
    out = []
    for pat in ("etc/modprobe.d/*.conf", "lib/modprobe.d/*.conf", "usr/lib/modprobe.d/*.conf",
                f"{CONFDIR}/modules", f"{CONFDIR}/initramfs.conf", f"{CONFDIR}/scripts/*/*", f"{CONFDIR}/hooks/*"):
        out += [p for p in r.glob(pat) if p.is_file() or p.is_symlink()]
    return sorted({p.relative_to(r).as_posix() for p in out})


def _usr_merged(target: str) -> str:
    """copy_file's canonical place: /bin, /lib* and /sbin live under /usr in the image."""
    t = "/" + target.lstrip("/")
    return "/usr" + t if t.startswith(("/bin/", "/lib", "/sbin/")) else t


def _copy_file(r, dest: Path, src: str, target: str):
    """copy_file: a link is followed to the file it names; what the image has already stays."""
    path = r / src.lstrip("/")
    if not path.is_file():
        return
    place = dest / _usr_merged(target).lstrip("/")
    if place.exists():
        return
    place.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(path.resolve(), place)


def _hook_order(hooks: dict) -> list:
    """get_prereq_pairs | tsort: a hook after the hooks it names as prereqs."""
    done, out = set(), []

    def add(name, stack=()):
        if name in done or name in stack or name not in hooks:
            return
        for p in hooks[name]:
            add(p, stack + (name,))
        done.add(name)
        out.append(name)

    for name in sorted(hooks):
        add(name)
    return out


def _run_hooks(r, dest: Path, kver):
    """run_scripts CONFDIR/hooks: executable files with a plain name and valid sh syntax, asked for their
    prereqs, then called; a hook that fails ends the build. A hook sources hook-functions from the host; here
    that is the stand-in in share/, which copies from the tree into DESTDIR."""
    d = r / CONFDIR / "hooks"
    found = {}
    with tempfile.TemporaryDirectory() as tmp:
        for p in sorted(d.iterdir()) if d.is_dir() else []:
            if not _SCRIPT_NAME.fullmatch(p.name) or p.is_dir() or not os.access(p, os.X_OK):
                continue
            text = p.read_text().replace(HOOK_FUNCTIONS, str(STANDIN_HOOK_FUNCTIONS))
            copy = Path(tmp) / p.name
            write(copy, text, 0o755)
            if subprocess.run(["sh", "-n", str(copy)], capture_output=True).returncode:
                continue
            env = host_env(r, DESTDIR=str(dest), CONFDIR="/" + CONFDIR, version=kver,
                           MODULESDIR=f"/lib/modules/{kver}", verbose="n")
            env["GPUHOSTS_HOST_ROOT"] = str(r)
            prereqs = subprocess.run(["sh", str(copy), "prereqs"], env=env, capture_output=True, text=True).stdout
            found[p.name] = (copy, prereqs.split(), env)
        for name in _hook_order({n: v[1] for n, v in found.items()}):
            copy, _, env = found[name]
            rc = subprocess.run(["sh", str(copy)], env=env, stdout=sys.stderr).returncode
            if rc:
                raise Fail(f"E: /{CONFDIR}/hooks/{name} failed with return {rc}.", rc)


def build_initrd(r, kver) -> dict:
    """image path -> (mode, content) of what mkinitramfs puts into the image; a link's content is "-> TARGET"."""
    with tempfile.TemporaryDirectory() as tmp:
        dest = Path(tmp)
        for d in ("bin", "lib", "sbin"):
            (dest / "usr" / d).mkdir(parents=True)
            os.symlink(f"usr/{d}", dest / d)
        for d in ("conf/conf.d", "etc", "run", "scripts", f"usr/lib/modules/{kver}"):
            (dest / d).mkdir(parents=True, exist_ok=True)
        modules = r / CONFDIR / "modules"
        if modules.is_file():
            # add_modules_from_file: `grep '^[^#]' | while read -r module args` and force_load's echo "$@"
            loads = []
            for line in modules.read_text().splitlines():
                if line[:1] in ("", "#") or not line.split():
                    continue
                module, _, args = line.strip(" \t").partition(" ")
                loads.append(f"{module} {args.strip(' ')}\n")
            if loads:
                write(dest / "conf/modules", "".join(loads))
        scripts = r / CONFDIR / "scripts"
        for p in sorted(scripts.glob("*/*")) if scripts.is_dir() else []:
            if p.is_file() and _SCRIPT_NAME.fullmatch(p.name) and not p.parent.name.startswith("."):
                (dest / "scripts" / p.parent.name).mkdir(parents=True, exist_ok=True)
                shutil.copy2(p, dest / "scripts" / p.parent.name / p.name)
        if (r / CONFDIR / "initramfs.conf").is_file():
            shutil.copy2(r / CONFDIR / "initramfs.conf", dest / "conf/initramfs.conf")
        write(dest / "usr/sbin/modprobe", STANDIN_MARK + b"modprobe\n", 0o755)
        (dest / "etc/modprobe.d").mkdir()
        (dest / "usr/lib/modprobe.d").mkdir()
        # /lib/modprobe.d is /usr/lib/modprobe.d on merged-/usr Debian 12; the tree keeps both.
        for d in ("etc/modprobe.d", "lib/modprobe.d", "usr/lib/modprobe.d"):
            for p in sorted((r / d).glob("*.conf")) if (r / d).is_dir() else []:
                _copy_file(r, dest, f"/{d}/{p.name}", f"/{d.removeprefix('usr/')}/{p.name}")
        # depmod -a -b DESTDIR writes the image's modules.softdep from its modules; the tree's stands for it.
        softdep = r / f"lib/modules/{kver}/modules.softdep"
        if softdep.is_file():
            shutil.copy2(softdep, dest / f"usr/lib/modules/{kver}/modules.softdep")
        _run_hooks(r, dest, kver)
        if not (dest / "usr/bin/sh").exists():
            write(dest / "usr/bin/sh", STANDIN_MARK + b"sh\n", 0o755)
        out = {}
        for p in sorted(dest.rglob("*")):
            name = p.relative_to(dest).as_posix()
            if p.is_symlink():
                out[name] = (0o777, f"-> {os.readlink(p)}".encode())
            elif p.is_file():
                out[name] = (stat.S_IMODE(p.stat().st_mode), p.read_bytes())
        return out


def initrd_bytes(r, kver) -> bytes:
    """A deterministic image of what mkinitramfs builds: same configuration in, same bytes out."""
    parts = [f"fakehost initramfs for Linux {kver}\n".encode()]
    for name, (mode, data) in build_initrd(r, kver).items():
        parts.append(f"=== {name} {mode:o} {len(data)}\n".encode() + data + b"\n")
    return b"".join(parts)


def parse_initrd(data: bytes) -> dict:
    """image path -> (mode, content) of the files inside an image made by initrd_bytes."""
    out, i = {}, data.index(b"\n") + 1
    while i < len(data):
        j = data.index(b"\n", i)
        _, name, mode, size = data[i:j].decode().split(" ")
        out[name] = (int(mode, 8), data[j + 1:j + 1 + int(size)])
        i = j + 2 + int(size)
    return out


def unpack_initrd(image: dict, dest: Path):
    """The image as the initramfs sees it, under ``dest``: a stand-in program becomes a link to its stand-in."""
    for name, (mode, content) in image.items():
        p = dest / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if content.startswith(b"-> "):
            os.symlink(content[3:].decode(), p)
        elif content.startswith(STANDIN_MARK):
            prog = content[len(STANDIN_MARK):].decode().strip()
            os.symlink(str(BIN / prog) if (BIN / prog).is_file() else shutil.which(prog), p)
        else:
            write(p, content, mode)


def image_conf(r, image: Path) -> ModprobeConf:
    """The image's modprobe.d (its etc/ and lib/), its module tree's modules.softdep, and /proc/cmdline, which
    the initramfs mounts from the running kernel."""
    cmdline = (r / "proc/cmdline").read_text() if (r / "proc/cmdline").is_file() else ""
    return ModprobeConf.from_dirs(image, kernel_release(r), cmdline=cmdline)


def run_in_image(r, image: Path, argv, env=None) -> int:
    """A command line run inside the initramfs: an absolute program path is the image's file at that path (none:
    the shell reports it missing); PATH holds only the image's directories. Sysfs and proc are the host's
    (init mounts them), so GPUHOSTS_HOST_ROOT still names the tree."""
    def inside(m):
        return str(image / m.group(0).lstrip("/"))
    argv = [str(image / argv[0].lstrip("/")) if argv[0].startswith("/") else argv[0]] + [
        re.sub(r"(?<![\w/.$-])/[\w.+/-]+", inside, a) if argv[i - 1] == "-c" else a for i, a in enumerate(argv) if i]
    e = host_env(r, **(env or {}))
    interpreter = str(Path(sys.executable).parent)  # the stand-ins' own interpreter, not a program of the image
    e.update(PATH=":".join([str(image / "usr/sbin"), str(image / "usr/bin"), interpreter]),
             GPUHOSTS_HOST_ROOT=str(r), FAKEHOST_INITRAMFS=str(image))
    try:
        return subprocess.run(argv, env=e, timeout=120).returncode
    except FileNotFoundError:
        print(f"{argv[0]}: not found", file=sys.stderr)
        return 127


def kernels(r) -> list:
    """Installed kernels, oldest first: the setting ``kernels`` (a newer kernel installed beside the running one),
    else only the running kernel."""
    s = settings(r)
    return list(s.get("kernels") or [s["kernel"]])


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
        try:
            data = initrd_bytes(r, kv)
        except Fail as e:
            print(e.msg, file=sys.stderr)
            raise Fail(f"update-initramfs: failed for /boot/initrd.img-{kv} with {e.code}.", e.code)
        write(r / f"boot/initrd.img-{kv}", data)
    if settings(r)["bootloader"] == "systemd-boot":  # the proxmox-boot-tool post-update hook syncs the ESP
        print("Running hook script 'zz-proxmox-boot'..")
        refresh(r)


# ---- boot loaders ---------------------------------------------------------------------------------------

def loader_entry(r, kv) -> Path:
    return r / f"boot/loader/entries/proxmox-{kv}.conf"


def first_line(p: Path) -> str:
    """proxmox-boot-tool's get_first_line: the first line, also when it ends without a newline
    (src/proxmox-boot/functions @ 5999d616f8fbf5e2c4bec6fe28ce20c874170195)."""
    return p.read_text().split("\n", 1)[0] if p.exists() else ""


def refresh(r):
    """zz-proxmox-boot's update_esps: only the first line of /etc/kernel/cmdline goes on the boot entries, and a
    line without root= aborts the refresh (src/proxmox-boot/zz-proxmox-boot @
    895491a83141755182f680a6d2a35b54625e531e)."""
    s = settings(r)
    p = r / "etc/kernel/cmdline"
    if p.exists():
        cmdline = first_line(p)
        if "root=" not in cmdline:
            raise Fail("No root= parameter in /etc/kernel/cmdline found!", 1)
    else:
        print("No /etc/kernel/cmdline found - falling back to /proc/cmdline", file=sys.stderr)
        cmdline = re.sub(r"\binitrd=[0-9a-zA-Z\\/.-]*\s*", "", (r / "proc/cmdline").read_text().strip())
    print(f"Copying and configuring kernels on /dev/disk/by-uuid/{s['esp_uuid']}", file=sys.stderr)
    for kv in kernels(r):
        print(f"\tCopying kernel and creating boot-entry for {kv}", file=sys.stderr)
        write(loader_entry(r, kv), f"title    Proxmox Virtual Environment\nversion  {kv}\noptions  {cmdline}\n"
              f"linux    /EFI/proxmox/{kv}/vmlinuz-{kv}\ninitrd   /EFI/proxmox/{kv}/initrd.img-{kv}\n")


def cmd_proxmox_boot_tool(argv):
    r = root()
    s = settings(r)
    sub = argv[0] if argv else ""
    esp = s["bootloader"] == "systemd-boot"
    if sub == "status":
        # `status`: the ESP list is checked first (E: …, status 2), then the re-exec line, the boot mode and one
        # line per ESP (src/bin/proxmox-boot-tool `status`/`_status_detail` @ afa65c0a1267de9a5322ce58971cb491ff02e6c0;
        # tests/fixtures/pve/proxmox-boot-tool-status-*.txt)
        quiet = "--quiet" in argv
        if not (r / "etc/kernel/proxmox-boot-uuids").exists():
            raise Fail("" if quiet else "E: /etc/kernel/proxmox-boot-uuids does not exist.", 2)
        if not quiet:
            print("Re-executing '/usr/sbin/proxmox-boot-tool' in new private mount namespace..")
            print("System currently booted with uefi")
            print(f"{s['esp_uuid']} is configured with: uefi (versions: {', '.join(kernels(r))})")
    elif sub == "refresh":
        print("Running hook script 'proxmox-auto-removal'..\nRunning hook script 'zz-proxmox-boot'..")
        if not esp:
            print("No /etc/kernel/proxmox-boot-uuids found, skipping ESP sync.", file=sys.stderr)
            return 0
        print("Re-executing '/etc/kernel/postinst.d/zz-proxmox-boot' in new private mount namespace..")
        refresh(r)  # a failing hook script ends the tool (set -e) with its status
    elif argv[:2] == ["kernel", "list"]:
        print("Manually selected kernels:\nNone.\n\nAutomatically selected kernels:\n" + "\n".join(kernels(r)))
    else:
        raise Fail(f"USAGE: /usr/sbin/proxmox-boot-tool <commands> [ARGS]\n\n  unknown command '{sub}'", 1)


def grub_cmdline(r):
    """GRUB_CMDLINE_LINUX and _DEFAULT as update-grub gets them: grub-mkconfig sources /etc/default/grub, then each
    /etc/default/grub.d/*.cfg in glob order, as shell (Debian's util/grub-mkconfig.in, nekorouter/debian-grub @
    21c59e71dd5c2011c2d6d0064b5fef7529ffb63b)."""
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


# Package -> host setting that holds its version (tree.seed_kpro5 writes real releases; tests/fixtures/pve/README.md).
VERSION_SETTINGS = {"pve-manager": "pve_version", "pve-container": "pve_container_version"}


# Versions a repository offers, newest last, for the packages a stack holds at one: NVIDIA's CUDA repository for
# Debian 12 had DCGM 1:4.5.3-1 and 1:4.6.1-1 side by side (an apt error a DCGM install quotes: "Depends:
# datacenter-gpu-manager-4-multinode (= 1:4.5.3-1) but 1:4.6.1-1 is to be installed"), and the exporter's debs
# carry no epoch (datacenter-gpu-manager-exporter_4.8.2-1_amd64.deb). 4.9.0-1 stands for a later exporter.
REPOSITORY = {
    "datacenter-gpu-manager-4-core": ("1:4.5.3-1", "1:4.6.1-1"),
    "datacenter-gpu-manager-exporter": ("4.8.2-1", "4.9.0-1"),
}
VERSIONS_FILE = "var/lib/fakehost/dpkg-versions"


def installed_versions(r) -> dict:
    p = r / VERSIONS_FILE
    return dict(line.split(" ", 1) for line in p.read_text().splitlines() if line) if p.exists() else {}


def pkg_version(name, r=None):
    held = installed_versions(r if r is not None else tree()).get(name)
    if held:
        return held
    if name in REPOSITORY:
        return REPOSITORY[name][-1]
    setting = VERSION_SETTINGS.get(name)
    if setting and setting in settings(r):
        return settings(r)[setting]
    if name.startswith(("proxmox-headers-", "proxmox-kernel-")):  # the ABI's version: 6.8.12-4-pve -> 6.8.12-4
        return name.split("-", 2)[2].removesuffix("-signed").removesuffix("-pve")
    return {"dkms": "3.0.10-8+deb12u1", "proxmox-default-headers": "1.1.0"}.get(name, "1.0-1")


def dependents(r, removed: list[str], have: list[str]) -> list[str]:
    """Installed packages that depend, directly or not, on one of `removed`."""
    table = r / "var/lib/fakehost/dpkg-depends"
    depends = {}
    if table.is_file():
        for line in table.read_text().splitlines():
            name, _, deps = line.partition(":")
            depends[name.strip()] = deps.split()
    found, frontier = [], list(removed)
    while frontier:
        gone = frontier.pop()
        for name in have:
            if gone in depends.get(name, ()) and name not in found and name not in removed:
                found.append(name)
                frontier.append(name)
    return found


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
    sub, asked = words[0], words[1:]
    # name=version (apt-get(8): a version is selected by following the package name with an equals and the
    # version); one the repository lacks fails as apt 2.6's does (apt-pkg/cacheset.cc: "Version '%s' for '%s' was
    # not found"), and a downgrade under -y needs --allow-downgrades (apt-private/private-install.cc).
    wanted = {}
    for word in asked:
        name, _, version = word.partition("=")
        if version:
            if sub == "install" and version not in REPOSITORY.get(name, (pkg_version(name),)):
                raise Fail(f"E: Version '{version}' for '{name}' was not found", 100)
            wanted[name] = version
    pkgs = [word.partition("=")[0] for word in asked]
    have = dpkg_list(r)
    versions = installed_versions(r)
    moved = [p for p in pkgs if p in have and p in wanted and pkg_version(p, r) != wanted[p]]
    if sub == "install" and moved:
        down = [p for p in moved if compare_versions(wanted[p], pkg_version(p, r)) < 0]
        if down and yes and not any(a in ("--allow-downgrades",) for a in argv):
            raise Fail("E: Packages were downgraded and -y was used without --allow-downgrades.", 100)
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
    if sub == "install":
        todo += [p for p in moved if p not in todo]
    else:
        # apt removes what depends on a package it removes: an installed package whose Depends would be broken
        # goes with it (apt 2.6 apt-get(8) "remove"; apt-pkg/depcache.cc MarkDelete of reverse dependencies under
        # the problem resolver). var/lib/fakehost/dpkg-depends lists "package: its dependencies" for what a test
        # installs beside gpuhosts' packages.
        todo += [p for p in dependents(r, todo, have) if p not in todo]
    if sub in ("remove", "purge") and any(a in ("-s", "--simulate", "--just-print", "--dry-run") for a in argv):
        # apt-get(8) -s, --simulate: "a series of lines each representing a dpkg operation: configure (Conf),
        # remove (Remv) or unpack (Inst)", as "Remv NAME [VERSION]" (apt-private/private-install.cc), nothing done
        for p in todo:
            print(f"Remv {p} [{pkg_version(p, r)}]")
        return 0
    for p in pkgs:
        if p not in todo:
            print(f"{p} is already the newest version ({pkg_version(p)})." if sub == "install"
                  else f"Package '{p}' is not installed, so not removed")
    if todo and not yes:
        print("Do you want to continue? [Y/n] Abort.")
        return 1
    verb = "Setting up" if sub == "install" else "Removing"
    for p in todo:
        print(f"{verb} {p} ({wanted.get(p) or pkg_version(p, r)}) ...")
    for p in todo:
        if sub == "install":
            versions[p] = wanted.get(p) or pkg_version(p, r)
        else:
            versions.pop(p, None)
    held = "".join(f"{p} {v}\n" for p, v in sorted(versions.items()) if p in REPOSITORY)
    if held:
        replace_file(r / VERSIONS_FILE, held)
    else:
        (r / VERSIONS_FILE).unlink(missing_ok=True)
    new = list(dict.fromkeys(have + todo)) if sub == "install" else [p for p in have if p not in todo]
    # dpkg writes its status database sorted by package name (lib/dpkg/dbmodify.c, writedb: pkg_array_sort), so
    # two installs that finish in either order leave the same database.
    replace_file(r / "var/lib/fakehost/dpkg-installed", "".join(p + "\n" for p in sorted(new)))
    for p in todo:
        if p in PAYLOADS:
            unpack(r, p) if sub == "install" else remove_payload(r, p, purge=sub == "purge")


# What a package's converge reads of it: its program and its own unit, and whether its maintainer scripts start
# that unit. Debian 12's prometheus-node-exporter 1.5.0-1+b6 (read from the installed package): the unit below
# (ExecStart with $ARGS, empty in /etc/default/prometheus-node-exporter), enabled and started by its postinst
# through deb-systemd-invoke, which starts a unit only when `systemctl is-enabled` says enabled (init-system-helpers
# 1.65.2 script/deb-systemd-invoke), so a masked one stays stopped. NVIDIA's dcgm-exporter host package (NVIDIA/
# dcgm-exporter 4.5.3-4.8.2 packaging/config-files/systemd/nvidia-dcgm-exporter.service, Makefile `install`): its
# packaging scripts write no maintainer script (hack/package/test.sh @ 7ad58324), so nothing starts its unit.
PAYLOADS = {
    "prometheus-node-exporter": ("usr/bin/prometheus-node-exporter", "prometheus-node-exporter.service", True,
                                 "[Unit]\nDescription=Prometheus exporter for machine metrics\n\n[Service]\n"
                                 "Restart=on-failure\nUser=prometheus\n"
                                 "EnvironmentFile=/etc/default/prometheus-node-exporter\n"
                                 "ExecStart=/usr/bin/prometheus-node-exporter $ARGS\n\n"
                                 "[Install]\nWantedBy=multi-user.target\n"),
    "datacenter-gpu-manager-exporter": ("usr/bin/dcgm-exporter", "nvidia-dcgm-exporter.service", False,
                                        "[Unit]\nDescription=NVIDIA DCGM-exporter service\n\n[Service]\nUser=root\n"
                                        "ExecStart=/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv\n"
                                        "Restart=on-abort\n\n[Install]\nWantedBy=multi-user.target\n"),
}


def unpack(r, package):
    program, unit_name, starts, unit_text = PAYLOADS[package]
    write(r / program, "#!/bin/sh\n# fakehost: the program of " + package + "\nexit 0\n")
    (r / program).chmod(0o755)
    write(r / "lib/systemd/system" / unit_name, unit_text)
    if package == "prometheus-node-exporter":
        write(r / "etc/default/prometheus-node-exporter", 'ARGS=""\n')
    if starts and not systemd.masked(r, unit_name):
        systemd.enable(r, unit_name, quiet=True)
        systemd.start(r, unit_name)


def remove_payload(r, package, purge):
    """`remove` keeps a package's conffiles (/etc/default/…), `purge` removes them too (dpkg(1) --remove, --purge)."""

    program, unit_name, _starts, _text = PAYLOADS[package]
    if systemd.is_active(r, unit_name):
        systemd.stop(r, unit_name)
    (r / program).unlink(missing_ok=True)
    (r / "lib/systemd/system" / unit_name).unlink(missing_ok=True)
    if purge and package == "prometheus-node-exporter":
        (r / "etc/default/prometheus-node-exporter").unlink(missing_ok=True)


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
        for k, v in {"Package": p, "Version": pkg_version(p, tree()), "Status": "install ok installed",
                     "db:Status-Abbrev": "ii ", "binary:Package": p}.items():
            out = out.replace("${" + k + "}", v)
        sys.stdout.write(out)
    return rc


def _version_parts(v: str):
    epoch, _, rest = v.rpartition(":") if ":" in v else ("0", "", v)
    upstream, _, revision = rest.rpartition("-") if "-" in rest else (rest, "", "")
    return int(epoch or 0), upstream, revision


def _order(c: str) -> int:
    return 0 if c.isdigit() else ord(c) if c.isalpha() else -1 if c == "~" else ord(c) + 256 if c else 0


def _verrevcmp(a: str, b: str) -> int:
    """dpkg 1.21.22 (Debian 12) lib/dpkg/version.c verrevcmp: non-digit runs by `order` (~ before everything,
    letters before other signs), digit runs by value."""
    i = j = 0
    while i < len(a) or j < len(b):
        while (i < len(a) and not a[i].isdigit()) or (j < len(b) and not b[j].isdigit()):
            ac, bc = _order(a[i] if i < len(a) else ""), _order(b[j] if j < len(b) else "")
            if ac != bc:
                return ac - bc
            i, j = i + 1, j + 1
        ni = i
        while ni < len(a) and a[ni].isdigit():
            ni += 1
        nj = j
        while nj < len(b) and b[nj].isdigit():
            nj += 1
        da, db = int(a[i:ni] or 0), int(b[j:nj] or 0)
        if da != db:
            return 1 if da > db else -1
        i, j = ni, nj
    return 0


def compare_versions(a: str, b: str) -> int:
    """dpkg_version_compare: epoch, then upstream version, then revision."""
    (ea, ua, ra), (eb, ub, rb) = _version_parts(a), _version_parts(b)
    return (ea > eb) - (ea < eb) or _verrevcmp(ua, ub) or _verrevcmp(ra, rb)


def cmd_dpkg(argv):
    r = root()
    if argv[:1] == ["--compare-versions"]:
        # dpkg 1.21.22 src/main/enquiry.c cmpversions: status 0 when the relation holds, 1 when not.
        if len(argv) != 4:
            raise Fail("dpkg: error: --compare-versions takes three arguments: <version> <relation> <version>", 2)
        a, rel, b = argv[1:]
        ops = {"lt": lambda c: c < 0, "le": lambda c: c <= 0, "eq": lambda c: c == 0, "ne": lambda c: c != 0,
               "ge": lambda c: c >= 0, "gt": lambda c: c > 0}
        if rel not in ops:
            raise Fail("dpkg: error: --compare-versions bad relation", 2)
        return 0 if ops[rel](compare_versions(a, b)) else 1
    if argv[:1] not in (["-s"], ["--status"], ["-l"]):
        raise Fail("dpkg: error: only -s, -l and --compare-versions are simulated", 2)
    rc = 0
    for p in argv[1:]:
        if p in dpkg_list(r):
            print(f"Package: {p}\nStatus: install ok installed\nVersion: {pkg_version(p, tree())}\n" if argv[0] != "-l"
                  else f"ii  {p}  {pkg_version(p, tree())}  amd64")
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
