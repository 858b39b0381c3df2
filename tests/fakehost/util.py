"""Plumbing shared by the stand-ins: where the host is, its settings, failures that end a command."""
import json
import os
import sys
from pathlib import Path


class Fail(Exception):
    """Ends a stand-in with ``msg`` on stderr and exit status ``code``, as the real command would."""

    def __init__(self, msg, code=1):
        super().__init__(msg)
        self.msg, self.code = msg, code


def root() -> Path:
    # Refuse to run without a root: a stand-in must never touch the machine running the tests.
    r = os.environ.get("GPUHOSTS_HOST_ROOT")
    if not r:
        raise Fail("fakehost: GPUHOSTS_HOST_ROOT is not set", 2)
    return Path(r)


def tree() -> Path:
    """The host tree, also from inside a container (where the root is the container's disk)."""
    return Path(os.environ.get("FAKEHOST_TREE") or root())


def container():
    return os.environ.get("FAKEHOST_CONTAINER") or None


def settings(t=None) -> dict:
    return json.loads(((t or tree()) / "var/lib/fakehost/settings.json").read_text())


def configure(t, **knobs):
    """Sets host settings (``None`` removes one), formatted as the seed writes them: removing every knob set
    gives the file back byte for byte."""
    s = settings(Path(t))
    for k, v in knobs.items():
        if v is None:
            s.pop(k, None)
        else:
            s[k] = v
    write(Path(t) / "var/lib/fakehost/settings.json", json.dumps(s, indent=1, sort_keys=True) + "\n")


def kernel_release(t=None) -> str:
    return settings(t)["kernel"]


def write(path: Path, text, mode=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    if mode is not None:
        path.chmod(mode)


def replace_file(path: Path, text: str) -> None:
    """Write a database file as dpkg writes its status: to a new file, then renamed over the old one
    (lib/dpkg/dbmodify.c writedb, "status-new"), so a reader at the same moment, such as another unit's
    dpkg-query outside the lock, sees the old database or the new, never a file cut short."""
    path.parent.mkdir(parents=True, exist_ok=True)
    new = path.with_name(f".{path.name}.new-{os.getpid()}")
    new.write_text(text)
    new.chmod(0o644)  # dpkg's status is 0644 whatever the caller's umask
    os.replace(new, path)


def rel(r: Path, p: str) -> Path:
    """Host path ``p`` (absolute, unprefixed) inside the tree ``r``."""
    return r / p.lstrip("/")


def unprefix(p: str, r=None) -> str:
    """Accepts both ``/dev/x`` and ``$root/dev/x`` and answers ``/dev/x``."""
    r = str(r or root()).rstrip("/")
    return p[len(r):] if p.startswith(r + "/") else p


def run_main(fn, argv=None) -> int:
    try:
        return fn(list(sys.argv[1:] if argv is None else argv)) or 0
    except Fail as e:
        if e.msg:
            print(e.msg, file=sys.stderr)
        return e.code


def ct_seen_devices(t, vmid) -> list:
    """The device nodes a container got at its start (`pct start` records them in run/lxc/<vmid>.devices)."""
    p = t / f"run/lxc/{vmid}.devices"
    return json.loads(p.read_text()) if p.exists() else []
