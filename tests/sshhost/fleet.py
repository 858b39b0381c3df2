"""Several simulated Proxmox hosts in one stack (`gpuhosts:hosts`), each its own fakehost tree behind its own sshd.

    fleet = Fleet.seed(tmp_path, 4)          # kpro5's seed four times: kpro5, kpro5-1, kpro5-2, kpro5-3
    fleet.up()                               # the program's resources for the stack, then `pulumi up` of them
    fleet.hosts[2].ssh.stop()                # a host that no longer answers (its sshd refuses)
    fleet.preview()

Every host's sshd accepts the one client key of the stack (`gpuhosts:sshPrivateKey` is one secret for all hosts),
and pins a host key of its own. The first host keeps kpro5's name; `migrated` marks it as the one a one-host stack
held (gpuhosts/fleet.py). The engine is tests/engine, as for one host.
"""

from __future__ import annotations

import copy
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from engine import Engine, Op, Preview
from fakehost.installer import make_fake_run
from fakehost.tree import seed_kpro5
from gpuhosts.fleet import FLEET_SECTIONS
from sshhost import SshHost
from sshhost.bed import SECRETS, VERSION, host_values, record_program, stack_document

FLEET_STACK = "fleet"


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
    engine: Engine
    plans: int = 0

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
        fleet = cls(root, hosts, run_file, sha256, None)  # type: ignore[arg-type]
        fleet.engine = Engine(root / "state.json", fleet.config())
        return fleet

    @classmethod
    def adopting(cls, root: Path, tree: Path, ssh: SshHost, state_file: Path, run_file: Path, sha256: str,
                 count: int) -> "Fleet":
        """A fleet whose first host is a one-host stack's, its state and all, and `count - 1` new hosts."""
        fleet = cls.seed(root / "others", count - 1, run_file, sha256) if count > 1 else None
        others = [] if fleet is None else fleet.hosts
        for index, host in enumerate(others, start=1):
            host.name = host_name(index)
        public = " ".join(ssh.private_key.with_suffix(".pub").read_text().split()[:2])
        for host in others:
            (host.ssh.workdir / "authorized_keys").write_text(public + "\n")
        adopted = cls(root, [FleetHost(host_name(0), tree, ssh), *others], run_file, sha256, None)  # type: ignore
        adopted.engine = Engine(state_file, adopted.config())
        return adopted

    # --- the stack ------------------------------------------------------------------------------------------------
    def secrets(self) -> dict[str, str]:
        return {"sshPrivateKey": self.hosts[0].ssh.private_key.read_text(), **SECRETS}

    def config(self) -> dict[str, str]:
        return {f"gpuhosts:{k}": v for k, v in self.secrets().items()}

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

    def write_stack(self, values: dict[str, Any]) -> Path:
        document = stack_document()
        document["config"] = {f"gpuhosts:{k}": v for k, v in values.items()}
        self.plans += 1
        path = self.root / "stacks" / f"Pulumi.{FLEET_STACK}-{self.plans}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        return path

    def program(self, values: dict[str, Any] | None = None, stack: str = FLEET_STACK) -> list[dict[str, Any]]:
        """The program's resources for these values; the provider will be configured with the whole stack config
        as the engine configures it (objects as JSON text: pkg/resource/deploy/target.go `GetPackageConfig`)."""
        values = values or self.values()
        self.engine.config = {**self.config(), **{f"gpuhosts:{k}": v if isinstance(v, str) else json.dumps(v)
                                                  for k, v in values.items()}}
        return record_program(self.write_stack(values), stack, self.secrets())

    # --- operations ---------------------------------------------------------------------------------------------
    def up(self, values: dict[str, Any] | None = None, program: list | None = None, **options) -> list[Op]:
        return self.engine.up(program if program is not None else self.program(values), **options)

    def preview(self, values: dict[str, Any] | None = None, program: list | None = None, **options) -> Preview:
        return self.engine.preview(program if program is not None else self.program(values), **options)

    def close(self) -> None:
        for host in self.hosts:
            host.ssh.stop()

    def remove(self) -> None:
        self.close()
        shutil.rmtree(self.root, ignore_errors=True)
