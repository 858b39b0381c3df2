"""Several simulated Proxmox hosts in one stack (`gpuhosts:hosts`), each its own fakehost tree behind its own sshd.

    fleet = Fleet.seed(tmp_path, 4)          # kpro5's seed four times: kpro5, kpro5-1, kpro5-2, kpro5-3
    Stack(project, "fleet", "kpro5", fleet.values(), fleet.secrets())   # a stack of them for the real CLI

Every host's sshd accepts the one client key of the stack (`gpuhosts:sshPrivateKey` is one secret for all hosts),
and pins a host key of its own. The first host keeps kpro5's name; `migrated` marks it as the one a one-host stack
held (gpuhosts/fleet.py).
"""

from __future__ import annotations

import copy
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakehost.installer import make_fake_run
from fakehost.tree import seed_kpro5
from gpuhosts.fleet import FLEET_SECTIONS
from sshhost import SshHost
from sshhost.bed import SECRETS, VERSION, host_values

def host_name(index: int) -> str:
    return "kpro5" if index == 0 else f"kpro5-{index}"


@dataclass
class FleetHost:
    name: str
    tree: Path
    ssh: SshHost


@dataclass
class Fleet:
    root: Path
    hosts: list[FleetHost]
    run_file: Path
    sha256: str

    @classmethod
    def seed(cls, root: Path, count: int, run_file: Path | None = None, sha256: str | None = None) -> "Fleet":
        root.mkdir(parents=True, exist_ok=True)
        if run_file is None:
            run_file = root / f"NVIDIA-Linux-x86_64-{VERSION}.run"
            sha256 = make_fake_run(run_file, VERSION)
        hosts: list[FleetHost] = []
        try:
            for index in range(count):
                name = host_name(index)
                tree = seed_kpro5(root / name)
                hosts.append(FleetHost(name, tree, SshHost(tree, root / f"ssh-{name}").start()))
        except BaseException:
            for host in hosts:
                host.ssh.stop()
            raise
        # One client key for every host, as one stack secret holds it.
        public = (hosts[0].ssh.private_key.with_suffix(".pub").read_text().split()[:2])
        for host in hosts[1:]:
            (host.ssh.workdir / "authorized_keys").write_text(" ".join(public) + "\n")
        return cls(root, hosts, run_file, sha256)

    # --- the stack ------------------------------------------------------------------------------------------------
    def secrets(self) -> dict[str, str]:
        return {"sshPrivateKey": self.hosts[0].ssh.private_key.read_text(), **SECRETS}

    def values(self, migrated: bool = True) -> dict[str, Any]:
        """kpro5's host side once per host, each aimed at its own sshd; the driver is the stack's, shared."""
        one = host_values()
        nvidia = dict(one["nvidia"], url=f"file://{self.run_file}", sha256=self.sha256)
        entries = []
        for index, host in enumerate(self.hosts):
            entry = {**copy.deepcopy(one["host"]), "gpus": copy.deepcopy(one["gpus"]),
                     "containers": copy.deepcopy(one["containers"])}
            entry["name"] = host.name
            entry["ssh"].update(host=host.ssh.host, port=host.ssh.port, user=host.ssh.user,
                                hostKey=host.ssh.host_key)
            if index == 0 and migrated:
                entry["migratedFromHost"] = True
            entries.append(entry)
        # The stack-wide sections move up beside `hosts` as they are (monitoring among them).
        shared = {key: copy.deepcopy(one[key]) for key in FLEET_SECTIONS if key in one and key != "hosts"}
        return {**shared, "nvidia": nvidia, "hosts": entries}

    def close(self) -> None:
        for host in self.hosts:
            host.ssh.stop()

    def remove(self) -> None:
        self.close()
        shutil.rmtree(self.root, ignore_errors=True)
