"""The simulated hosts the real-engine tier converges, and how a host is compared with how it started."""

from __future__ import annotations

import hashlib
import os
import time
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
        self.engine = EngineStandin(kind="sglang", sglang_length=3.4, sglang_rate=0.8, key=key)
        self.server = start_engine(self.engine, self.port)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Held:
    """A command on a simulated host that waits, once started, until the test lets it go: `started` appears when it
    runs, `release()` lets it on (through the host's fault folder, first on its PATH: tests/sshhost)."""

    def __init__(self, ssh, command: str):
        self.started = ssh.workdir / f"held-{command}.started"
        self.released = ssh.workdir / f"held-{command}.released"
        script = ssh.fault_bin / command
        script.write_text(f"""#!/bin/bash
: >{self.started}
while [ ! -e {self.released} ]; do sleep 0.1; done
rm -f "$0"
exec "$(PATH="${{PATH#*:}}"; type -P {command})" "$@"
""")
        script.chmod(0o755)

    def wait_started(self, process=None, cap_s: float = 600) -> None:
        """Waits for the marker; a cap that reports a hang (or the process's end) rather than a verdict."""
        waited = 0.0
        while not self.started.exists():
            if process is not None and process.poll() is not None:
                raise AssertionError(f"ended before the held command ran:\n{process.stdout.read()[-4000:]}")
            if waited > cap_s:
                raise AssertionError(f"{self.started.name} never appeared")
            time.sleep(0.1)
            waited += 0.1

    def release(self) -> None:
        self.released.touch()
