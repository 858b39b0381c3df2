"""Running a command line the host's configuration names (ExecStart=, a modprobe `install` line, a package's
program) with the stand-ins: an absolute path names a stand-in where one exists, else the file inside the tree."""
import os
import re
import subprocess
import sys

from . import BIN, host_env
from .util import tree


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
