"""systemctl over the tree's unit files.

Enabling writes the ``<target>.wants/`` links; starting runs ExecStartPre=/ExecStart= of oneshot and
forking units with the stand-ins (``/usr/bin/nvidia-modprobe`` runs the ``nvidia-modprobe`` stand-in).
Long-running services (Type=simple/exec/notify) whose program is not a stand-in are only marked active, unless
the host setting ``serve_engines`` is on and the unit is a container's: then fakehost.engines runs the process
for real and its state is the process's. Active state lives under ``run/``. What systemd checks when it spawns
the service is checked: WorkingDirectory=, EnvironmentFile= and that the program exists. A Type=simple unit that
fails there still starts "successfully" (systemd reports it only afterwards) and is then failed.

A unit is what systemd loads for its name: the first unit file in the search path, a mask (a symlink to /dev/null)
included, then the drop-ins named for it. There is no manager state: every command reads the files as a
daemon-reload would leave them (what `systemctl edit`, `mask` and `unmask` leave too).
"""
import heapq
import os
import shlex
import sys

from . import BIN, engines, kernel
from .programs import run_argv
from .util import Fail, root, write

UNIT_DIRS = ("etc/systemd/system", "run/systemd/system", "lib/systemd/system", "usr/lib/systemd/system")
CONFIG, RUNTIME_CONFIG = UNIT_DIRS[0], UNIT_DIRS[1]
ACTIVE = "run/fakehost/units"


def unit_name(n: str) -> str:
    return n if "." in n else n + ".service"


def is_mask(p) -> bool:
    """systemd.unit(5): a unit file that is empty or a symlink to /dev/null is masked."""
    if p.is_symlink():
        return os.readlink(p) == "/dev/null"
    return p.is_file() and p.stat().st_size == 0


def fragment(r, name):
    """The file systemd loads for ``name``: the first of the search path, a mask included (systemd.unit(5) "Unit
    File Load Path": a name found in an earlier directory hides it in the later ones)."""
    return next((r / d / name for d in UNIT_DIRS if is_mask(r / d / name) or (r / d / name).is_file()), None)


def find_unit(r, name):
    """The unit file of ``name`` systemd can load: None when there is none or the unit is masked."""
    p = fragment(r, name)
    return None if p is None or is_mask(p) else p


def masked(r, name) -> bool:
    p = fragment(r, name)
    return p is not None and is_mask(p)


def shown_path(r, p) -> str:
    return "/" + p.relative_to(r).as_posix()


def dropin_paths(r, name) -> list:
    """The drop-ins of ``name``: the ``*.conf`` files of ``name.d/`` in every unit directory, in the order of their
    file names, one in an earlier directory hiding a file of the same name in a later one (systemd.unit(5),
    "drop-in"). Drop-ins for a whole unit type (``service.d/``) or a name prefix are not simulated."""
    found = {}
    for d in UNIT_DIRS:
        folder = r / d / f"{name}.d"
        for p in sorted(folder.glob("*.conf")) if folder.is_dir() else ():
            if p.is_file():
                found.setdefault(p.name, p)
    return [found[n] for n in sorted(found)]


def parse_unit(*texts: str) -> dict:
    """'Section.Key' -> list of values of a unit file and then its drop-ins, each file read from its own first
    section on (an empty assignment resets the list, across files too: systemd.service(5) ExecStart=)."""
    out = {}
    for text in texts:
        sec = ""
        for line in text.replace("\\\n", " ").splitlines():
            line = line.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("["):
                sec = line.strip("[]")
                continue
            k, _, v = line.partition("=")
            vals = out.setdefault(f"{sec}.{k.strip()}", [])
            if v.strip():
                vals.append(v.strip())
            else:
                vals.clear()
    return out


def loaded(r, name) -> dict:
    """The settings in force: the unit file (none when masked), then its drop-ins, which a masked unit keeps too
    (systemd 252 shows their Environment=: tests/fixtures/systemd/show/README.md)."""
    p = find_unit(r, name)
    return parse_unit(*([p.read_text()] if p else []), *(d.read_text() for d in dropin_paths(r, name)))


def unit(r, name, verb="start") -> dict:
    p = fragment(r, name)
    if p is None:
        raise Fail(f"Failed to {verb} {name}: Unit {name} not found.", 5)
    if is_mask(p):
        # src/systemctl: the job is refused with BUS_ERROR_UNIT_MASKED, "Unit %s is masked."
        raise Fail(f"Failed to {verb} {name}: Unit {name} is masked.", 1)
    return loaded(r, name)


def wants_links(r, name):
    # links point at absolute host paths: test with is_symlink, not exists
    dirs = (r / "etc/systemd/system").glob("*.*")
    return sorted(d / name for d in dirs if d.name.endswith((".wants", ".requires")) and (d / name).is_symlink())


def is_active(r, name) -> bool:
    if engines.tracked(r, name):
        return engines.state(r, name)[0] == "active"
    return (r / ACTIVE / name).exists()


def is_early(u: dict) -> bool:
    """Ordered before module loading and udev coldplug: the place to set driver_override at boot."""
    before = " ".join(u.get("Unit.Before", [])).split()
    early = {"sysinit.target", "systemd-modules-load.service", "systemd-udev-trigger.service",
             "systemd-udevd.service", "local-fs-pre.target"}
    return u.get("Unit.DefaultDependencies", ["yes"])[-1] in ("no", "false", "0") and bool(early & set(before))


def specifiers(value: str) -> str:
    """A setting as systemd reads it after specifier expansion: `%%` is one `%` (systemd.unit(5), "Specifiers");
    gpuhosts writes no other specifier."""
    return value.replace("%%", "%")


def exec_words(line: str) -> list[str]:
    """An Exec*= command line split into its words: quoting as a shell would, then `%%` and `$$` (a literal dollar,
    systemd.service(5), "Command lines") each read as one character."""
    return [specifiers(word).replace("$$", "$") for word in shlex.split(line.lstrip("-@+!:"))]


def env_file(r, path) -> dict | None:
    """KEY=VALUE lines of an EnvironmentFile= (``-path``: optional); None when it cannot be read."""
    p = r / specifiers(path).lstrip("-").lstrip("/")
    if not p.is_file():
        return None
    out = {}
    for line in p.read_text().splitlines():
        k, eq, v = line.strip().partition("=")
        if eq and k and k[0] not in "#;":
            out[k.strip()] = v.strip().strip("'\"")
    return out


def spawn_problem(r, u, argv) -> str | None:
    """What makes systemd fail to spawn a service process (status 200/CHDIR, 203/EXEC, or no environment)."""
    wd = specifiers(u.get("Service.WorkingDirectory", [""])[-1])
    if wd and not wd.startswith("-") and wd != "~" and not (r / wd.lstrip("/")).is_dir():
        return "status=200/CHDIR"
    if any(not f.startswith("-") and env_file(r, f) is None for f in u.get("Service.EnvironmentFile", [])):
        return "Failed to load environment files"
    prog = r / argv[0].lstrip("/")
    if argv[0].startswith("/") and not (prog.is_file() and os.access(prog, os.X_OK)):
        return "status=203/EXEC"
    return None


def start(r, name, extra_env=None) -> int:
    """extra_env: what the process needs to know besides the unit's environment (for a container's units)."""
    u = unit(r, name)
    if engines.tracked(r, name):
        if engines.alive(r, name):
            return 0  # starting a started unit does nothing
        engines.stop(r, name)  # what a failed run left
    typ = u.get("Service.Type", ["simple"])[-1]
    env = dict(extra_env or {})
    env.update(specifiers(kv).split("=", 1) for e in u.get("Service.Environment", []) for kv in shlex.split(e)
               if "=" in kv)
    for f in u.get("Service.EnvironmentFile", []):
        env.update(env_file(r, f) or {})
    in_container = bool(env.get("FAKEHOST_CONTAINER") or os.environ.get("FAKEHOST_CONTAINER"))
    for key in ("Service.ExecStartPre", "Service.ExecStart"):
        for line in u.get(key, []):
            ignore = line.startswith("-")
            argv = exec_words(line)
            server = key == "Service.ExecStart" and typ not in ("oneshot", "forking")
            if server and not (BIN / os.path.basename(argv[0])).is_file():
                if spawn_problem(r, u, argv):
                    write(r / ACTIVE / (name + ".failed"), "")
                    (r / ACTIVE / name).unlink(missing_ok=True)
                    return 0 if typ == "simple" else 1
                if in_container and engines.serving():
                    # Type=simple: the start is done once the process is forked (systemd.service(5) Type=)
                    engines.spawn(r, name, u, argv, env)
                continue  # a server: marked active (or run by engines), not waited for
            rc = run_argv(r, argv, env)
            if rc and not ignore:
                write(r / ACTIVE / (name + ".failed"), "")
                return rc
    (r / ACTIVE / (name + ".failed")).unlink(missing_ok=True)
    if typ != "oneshot" or u.get("Service.RemainAfterExit", ["no"])[-1] in ("yes", "true", "1"):
        write(r / ACTIVE / name, "")
    return 0


def stop(r, name):
    u = loaded(r, name)
    if engines.tracked(r, name):
        engines.stop(r, name)
    for line in u.get("Service.ExecStop", []):
        run_argv(r, shlex.split(line.lstrip("-@+!:")))
    if any(os.path.basename(shlex.split(l.lstrip("-@+!:"))[0]) == "nvidia-persistenced"
           for l in u.get("Service.ExecStart", [])):
        stop_persistenced(r)
    (r / ACTIVE / name).unlink(missing_ok=True)


def stop_persistenced(r):
    """The daemon exits: the GPUs it kept in persistence mode are released."""
    st = kernel.kstate(r)
    if st["persistenced"]:
        st["persistence"] = {a: m for a, m in st["persistence"].items() if m != "daemon"}
        st["persistenced"] = None
        kernel.save(r, st)


def enable(r, name, quiet=False):
    if masked(r, name):
        raise Fail(f"Failed to enable unit: Unit file {shown_path(r, fragment(r, name))} is masked.", 1)
    u = unit(r, name, "enable")
    targets = " ".join(u.get("Install.WantedBy", [])).split()
    req = " ".join(u.get("Install.RequiredBy", [])).split()
    if not targets and not req:
        print("The unit files have no installation config (WantedBy=, RequiredBy=, Also=, Alias= settings in "
              "the [Install] section, and DefaultInstance= for template units). This means they are not meant "
              "to be enabled or disabled using systemctl.", file=sys.stderr)
        return
    src = "/" + find_unit(r, name).relative_to(r).as_posix()
    for t, kind in [(t, "wants") for t in targets] + [(t, "requires") for t in req]:
        link = r / f"etc/systemd/system/{t}.{kind}/{name}"
        if not link.is_symlink():
            link.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(src, link)
            if not quiet:
                print(f"Created symlink /{link.relative_to(r).as_posix()} \u2192 {src}.", file=sys.stderr)


def disable(r, name, quiet=False):
    if masked(r, name):
        # src/shared/install.c INSTALL_CHANGE_IS_MASKED: the links stay
        if not quiet:
            print(f"Unit {shown_path(r, fragment(r, name))} is masked, ignoring.", file=sys.stderr)
        return
    for link in wants_links(r, name):
        link.unlink()
        if not any(link.parent.iterdir()):  # systemd removes the .wants directory it emptied
            link.parent.rmdir()
        if not quiet:
            print(f'Removed "/{link.relative_to(r).as_posix()}".', file=sys.stderr)


def enabled_units(r) -> list:
    dirs = [d for d in (r / "etc/systemd/system").glob("*.*") if d.name.endswith((".wants", ".requires"))]
    names = {p.name for d in dirs for p in d.iterdir()}
    return sorted(n for n in names if n.endswith(".service") and find_unit(r, n))


PVE_GUESTS = "pve-guests.service"
# Proxmox's unit, reconstructed from pve-manager for what ordering needs (tests/fixtures/systemd/README.md).
PVE_GUESTS_STANDIN = BIN.parent.parent / "fixtures/systemd" / PVE_GUESTS


def unit_or_standin(r, name) -> dict:
    if name == PVE_GUESTS and not find_unit(r, name):
        return parse_unit(PVE_GUESTS_STANDIN.read_text())
    return unit(r, name)


def boot_order(r, names, anchor=PVE_GUESTS) -> tuple[list, list]:
    """The units of ``names`` in an order systemd may start them, split at ``anchor``: (those ordered before it,
    directly or through others, and the rest). systemd.unit(5) (systemd 252), "Before=, After=": ordering binds
    only units that are both started, After= is the inverse of Before=, and a unit ordered before another has
    finished starting before the other starts; units with no ordering between them start in parallel, so the
    rest go after the anchor here, the order in which a race could run them. Ties break by name."""
    names = sorted(set(names) | {anchor})
    deps = {n: set() for n in names}  # n -> units that must have started before n
    for n in names:
        u = unit_or_standin(r, n)
        for other in " ".join(u.get("Unit.After", [])).split():
            if other in deps and other != n:
                deps[n].add(other)
        for other in " ".join(u.get("Unit.Before", [])).split():
            if other in deps and other != n:
                deps[other].add(n)
    ready = [n for n in names if not deps[n]]
    heapq.heapify(ready)
    order, left = [], {n: set(d) for n, d in deps.items()}
    while ready:
        n = heapq.heappop(ready)
        order.append(n)
        for m in names:
            if n in left[m]:
                left[m].discard(n)
                if not left[m]:
                    heapq.heappush(ready, m)
    if len(order) != len(names):  # systemd breaks a cycle by dropping a job; the simulation refuses
        raise Fail("fakehost: ordering cycle among " + ", ".join(n for n in names if n not in order))
    before, todo = set(), [anchor]
    while todo:
        for d in deps[todo.pop()]:
            if d not in before:
                before.add(d)
                todo.append(d)
    return [n for n in order if n in before], [n for n in order if n not in before and n != anchor]


def state(r, name) -> str:
    if engines.tracked(r, name):
        return engines.state(r, name)[0]
    return "active" if is_active(r, name) else "failed" if (r / ACTIVE / (name + ".failed")).exists() else "inactive"


def file_state(r, name) -> str:
    """What `is-enabled` prints and UnitFileState holds (systemctl(1) is-enabled): a mask in /run is
    masked-runtime."""
    p = fragment(r, name)
    if p is None:
        return ""
    if is_mask(p):
        return "masked-runtime" if p.parent == r / RUNTIME_CONFIG else "masked"
    u = loaded(r, name)
    return "enabled" if wants_links(r, name) else "disabled" if (
        u.get("Install.WantedBy") or u.get("Install.RequiredBy")) else "static"


# shell_maybe_quote (systemd src/basic/escape.c; SHELL_NEED_QUOTES of src/basic/escape.h): how `show` prints each
# string of a list property such as Environment.
SHELL_NEED_QUOTES = set(" \t\n\r\"\\`$*?['()<>|&;!")


def shell_maybe_quote(value: str) -> str:
    if not any(c in SHELL_NEED_QUOTES or ord(c) < 32 for c in value):
        return value
    return '"' + "".join("\\" + c if c in "\"\\`$" else c for c in value) + '"'


def shown_command(line: str) -> str:
    """One ExecStart= command as `show` prints it (src/systemctl/systemctl-show.c `print_property`, an exec command
    list): argv joined by spaces after quoting and `%%` are read, `$$` left as written (it is read only when the
    command runs). The simulation keeps no run times or pids: each command reads as one that has not run yet."""
    prefix = line[:len(line) - len(line.lstrip("-@+!:"))]
    argv = [specifiers(word) for word in shlex.split(line[len(prefix):])]
    path, argv = (argv[0], argv[1:]) if "@" in prefix else (argv[0], argv)
    return (f"{{ path={path} ; argv[]={' '.join(argv)} ; ignore_errors={'yes' if '-' in prefix else 'no'} ; "
            "start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }")


def environment(u: dict) -> list[str]:
    """Environment= assignments in force: a variable keeps the place of its first assignment and the value of its
    last (systemd src/basic/env-util.c `strv_env_replace_consume`)."""
    out = {}
    for line in u.get("Service.Environment", []):
        for word in shlex.split(line):
            if "=" in word:
                out[word.split("=", 1)[0]] = specifiers(word)
    return list(out.values())


def properties(r, name) -> dict:
    """The properties of ``systemctl show`` the scripts read, in the order systemd 252 prints them
    (tests/fixtures/systemd/show/order.txt): a list for a property with one line per value (ExecStart)."""
    p = fragment(r, name)
    u = loaded(r, name)
    typ = u.get("Service.Type", ["simple"])[-1]
    active = state(r, name)
    sub = {"failed": "failed", "inactive": "dead"}.get(active, "exited" if typ == "oneshot" else "running")
    result = "exit-code" if active == "failed" else "success"
    if engines.tracked(r, name):
        active, sub, result = engines.state(r, name)
    user = u.get("Service.User", [""])
    return {"Type": typ, "Result": result,
            "ExecStart": [shown_command(line) for line in u.get("Service.ExecStart", [])],
            "Environment": " ".join(shell_maybe_quote(a) for a in environment(u)),
            "User": specifiers(user[-1]) if user else "", "Id": name,
            "LoadState": "not-found" if p is None else "masked" if is_mask(p) else "loaded",
            "ActiveState": active, "SubState": sub, "FragmentPath": shown_path(r, p) if p else "",
            "DropInPaths": " ".join(shown_path(r, d) for d in dropin_paths(r, name)),
            "UnitFileState": file_state(r, name)}


def show(r, name, wanted, value_only) -> str:
    """systemctl(1) show: with -p only those properties and each even when empty (one not set is left out
    otherwise); --value prints the values alone. A property with no value at all (a masked unit's ExecStart) prints
    nothing."""
    lines = []
    for key, value in properties(r, name).items():
        if wanted and key not in wanted or not wanted and not value:
            continue
        for one in value if isinstance(value, list) else [value]:
            lines.append(one if value_only else f"{key}={one}")
    return "\n".join(lines)


def mask(r, name, runtime=False, quiet=False) -> int:
    """systemctl(1) mask: the unit's name in the config directory (/run's with --runtime) becomes a symlink to
    /dev/null. A file already there is refused, a unit file written there included: src/shared/install.c
    `create_symlink` fails with EEXIST unless the very same symlink is in place (systemd 252 words it as
    tests/fixtures/systemd/show/README.md records)."""
    link = r / (RUNTIME_CONFIG if runtime else CONFIG) / name
    if is_mask(link) and link.is_symlink():
        return 0
    if link.is_symlink():
        raise Fail(f"Failed to mask unit: File {shown_path(r, link)} already exists and is a symlink to "
                   f"{os.readlink(link)}.", 1)
    if link.exists():
        raise Fail(f"Failed to mask unit: File {shown_path(r, link)} already exists.", 1)
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink("/dev/null", link)
    if not quiet:
        print(f"Created symlink {shown_path(r, link)} \u2192 /dev/null.", file=sys.stderr)
    return 0


def unmask(r, name, runtime=False, quiet=False) -> int:
    """systemctl(1) unmask: a mask of the name in the config directory (/run's with --runtime) is removed, and so is
    every symlink of that directory that pointed at it, such as the .wants/ links of an enabled unit, each emptied
    directory with it (src/shared/install.c `unit_file_unmask`, `remove_marked_symlinks_fd`). A unit file there
    that is no mask is left as it is."""
    config = r / (RUNTIME_CONFIG if runtime else CONFIG)
    link = config / name
    if fragment(r, name) is None:
        print(f"Unit {name} does not exist, proceeding anyway.", file=sys.stderr)
    if not is_mask(link):
        return 0
    link.unlink()
    gone = [link]
    for other in sorted(config.rglob("*")):
        if other.is_symlink() and os.readlink(other) == shown_path(r, link):
            other.unlink()
            gone.append(other)
            if not any(other.parent.iterdir()):
                other.parent.rmdir()
    if not quiet:
        for p in gone:
            print(f'Removed "{shown_path(r, p)}".', file=sys.stderr)
    return 0


def cmd_journalctl(argv):
    return 0  # the services never ran for real: there is nothing to show


STATUS_ACTIVE = {"active": "active (running)", "inactive": "inactive (dead)", "failed": "failed (Result: exit-code)",
                 "activating": "activating (auto-restart) (Result: exit-code)"}
SYSTEMCTL_VALUES = ("-p", "--property", "-n", "--lines", "-o", "--output", "-s", "--signal", "-H", "--host")


def cmd_systemctl(argv):
    r = root()
    quiet = any(a in ("-q", "--quiet") for a in argv)
    now = "--now" in argv
    props, words, it = [], [], iter(argv)
    for a in it:
        if a in SYSTEMCTL_VALUES:
            v = next(it, "")
            props += v.split(",") if a in ("-p", "--property") else []
        elif a.startswith("--property="):
            props += a.split("=", 1)[1].split(",")
        elif not a.startswith("-"):
            words.append(a)
    if not words:
        raise Fail("systemctl: this simulation needs a command", 1)
    sub, names = words[0], [unit_name(n) for n in words[1:]]
    runtime = "--runtime" in argv
    if sub == "daemon-reload":
        return 0
    rc = 0
    for n in names:
        if sub in ("mask", "unmask"):
            (mask if sub == "mask" else unmask)(r, n, runtime, quiet)
            if sub == "mask" and now and fragment(r, n):
                stop(r, n)
        elif sub in ("start", "restart", "reload-or-restart", "try-restart") or (sub == "enable" and now):
            if sub == "enable":
                enable(r, n, quiet)
            elif masked(r, n):  # refused before anything is stopped
                unit(r, n, sub)
            if sub == "enable":
                enable(r, n, quiet)
            if sub != "start" and (is_active(r, n) or engines.tracked(r, n)):
                stop(r, n)
            if sub == "try-restart" and not is_active(r, n):
                continue
            if start(r, n):
                print(f'Job for {n} failed because the control process exited with error code.\nSee "systemctl '
                      f'status {n}" and "journalctl -xeu {n}" for details.', file=sys.stderr)
                rc = 1
        elif sub == "enable":
            enable(r, n, quiet)
        elif sub in ("stop", "disable"):
            if sub == "disable":
                disable(r, n, quiet)
            if (sub == "stop" or now) and fragment(r, n):
                stop(r, n)
        elif sub == "is-active":
            st = state(r, n)
            if not quiet:
                print(st)
            rc = rc or (0 if st == "active" else 3)
        elif sub == "is-enabled":
            st = file_state(r, n)
            if not st:
                if not quiet:
                    print(f"Failed to get unit file state for {n}: No such file or directory", file=sys.stderr)
                rc = 1
                continue
            if not quiet:
                print(st)
            # systemctl(1) is-enabled: disabled and masked states exit non-zero
            rc = rc or (1 if st in ("disabled", "masked", "masked-runtime") else 0)
        elif sub == "show":
            print(show(r, n, props, "--value" in argv))
        elif sub == "status":
            print(f"\u25cf {n}\n     Loaded: loaded (/{find_unit(r, n).relative_to(r).as_posix() if find_unit(r, n) else '?'})"
                  f"\n     Active: {STATUS_ACTIVE[state(r, n)]}")
            rc = rc or (0 if is_active(r, n) else 3)
        else:
            raise Fail(f"Unknown command verb '{sub}'.", 1)
    return rc


# ---- systemd-run: transient timers --------------------------------------------------------------------------------
# Transient units live in /run/systemd/transient (systemd.unit(5), "Unit File Load Path"), so a reboot drops them.
TRANSIENT = "run/systemd/transient"


def cmd_systemd_run(argv):
    """systemd-run(1) with a timer option (`--on-active=`): it creates a transient `run-uN.timer` and `run-uN.service`
    whose ExecStart= is the command, prints "Running timer as unit: run-uN.timer" and "Will run service as unit:
    run-uN.service" and returns at once (src/run/run.c `start_transient_timer`). The command runs when the timer
    elapses; here that is when a test calls `fire_timers`, at a point it chooses, never after a measured delay."""
    r = root()
    options, command = {}, list(argv)
    while command and command[0].startswith("-"):
        option = command.pop(0)
        if option == "--":
            break
        name, _, value = option.partition("=")
        options.setdefault(name, []).append(value)
    if "--on-active" not in options:
        raise Fail("systemd-run: this simulation runs commands only from a timer (--on-active=)", 1)
    if not command:
        raise Fail("systemd-run: Command line to execute required.", 1)
    folder = r / TRANSIENT
    number = 1 + sum(1 for _ in folder.glob("run-u*.timer")) if folder.is_dir() else 1
    name = f"run-u{number}"
    properties = "".join(f"{p}\n" for p in options.get("--timer-property", []))
    write(folder / f"{name}.timer", f"[Timer]\nOnActiveSec={options['--on-active'][-1]}\n{properties}")
    write(folder / f"{name}.service", f"[Service]\nExecStart={shlex.join(command)}\n")
    print(f"Running timer as unit: {name}.timer\nWill run service as unit: {name}.service", file=sys.stderr)
    return 0


def pending_timers(r) -> list[str]:
    folder = r / TRANSIENT
    return sorted(p.stem for p in folder.glob("run-u*.timer")) if folder.is_dir() else []


def fire_timers(r) -> list[str]:
    """Run every pending transient timer's command, as its timer elapsing would; the commands it ran."""
    import subprocess

    from . import host_env

    ran = []
    for name in pending_timers(r):
        service = (r / TRANSIENT / f"{name}.service").read_text()
        command = service.split("ExecStart=", 1)[1].splitlines()[0]
        (r / TRANSIENT / f"{name}.timer").unlink(missing_ok=True)
        (r / TRANSIENT / f"{name}.service").unlink(missing_ok=True)
        subprocess.run(shlex.split(command), env=host_env(r), check=True, capture_output=True, text=True)
        ran.append(command)
    return ran
