"""A simulated Proxmox VE GPU host for running gpuhosts' scripts in tests.

A host is a directory tree (see ``fakehost.tree.seed_kpro5``) plus the stand-in commands in ``bin/``.
``host_env(tree)`` gives the environment a test passes to ``subprocess`` to run a script against it.
"""
import os
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parent
BIN = PKG / "bin"
TESTS = PKG.parent
HOOK = BIN / "fakehost-sysfs-hook"


def host_env(tree, base=None, **extra) -> dict:
    """Environment for running a script (or a stand-in) against the host rooted at ``tree``."""
    env = dict(os.environ if base is None else base)
    for k in ("FAKEHOST_TREE", "FAKEHOST_CONTAINER"):
        env.pop(k, None)
    path = [p for p in env.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin").split(":") if p and p != str(BIN)]
    pypath = [p for p in env.get("PYTHONPATH", "").split(":") if p and p != str(TESTS)]
    # The stand-ins run on this interpreter directly: a version manager's `python3` shim costs ~0.15 s a call.
    interpreter = str(Path(sys.executable).parent)
    path = [p for p in path if p != interpreter]
    env.update(PATH=":".join([str(BIN), interpreter, *path]), PYTHONPATH=":".join([str(TESTS), *pypath]),
               GPUHOSTS_HOST_ROOT=str(tree), GPUHOSTS_SYSFS_HOOK=str(HOOK), LC_ALL="C")
    env.update({k: str(v) for k, v in extra.items()})
    return env
