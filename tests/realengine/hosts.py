"""The simulated hosts the real-engine tier converges, and how a host is compared with how it started."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from engine_standin import Engine as EngineStandin, start_engine
from fakehost.tree import OWNER_RECORDS, _walk
from sshhost import free_port
from sshhost.bed import SECRETS

# What `pulumi destroy` keeps on purpose: user data (the models in the container's store) and the logs of the
# simulated host's own stand-ins.
KEPT = ("var/lib/lxc/129/rootfs/srv/models/", "var/log/fakehost/")


def entries(tree: Path) -> dict[str, str]:
    """Each path of a host's tree with a digest of what it is (mode, link target or content)."""
    found = {}
    for name, path in _walk(tree, None):
        mode = f"{path.lstat().st_mode:o}"
        if path.is_symlink():
            found[name] = f"{mode} -> {os.readlink(path)}"
        elif path.is_file() and not name.startswith(OWNER_RECORDS):
            found[name] = f"{mode} {hashlib.sha256(path.read_bytes()).hexdigest()}"
        else:
            found[name] = mode
    return found


def differences(before: dict[str, str], after: dict[str, str], kept: tuple[str, ...] = KEPT) -> list[str]:
    """The paths that differ between two readings of a host, apart from what is kept on purpose and the folders
    that hold it."""
    changed = sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))
    return [name for name in changed
            if not (name + "/").startswith(kept) and not any(folder.startswith(name + "/") for folder in kept)]


class SglangStandin:
    """The SGLang engine stand-in the services' deploy gate measures (tests/engine_standin.py), on a free port."""

    def __init__(self, key: str = SECRETS["llmApiKey"]):
        self.port = free_port()
        self.server = start_engine(EngineStandin(kind="sglang", sglang_length=3.4, sglang_rate=0.8, key=key),
                                   self.port)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
