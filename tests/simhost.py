"""The simulated kpro5 that the scripts run against directly (tests/fakehost), without SSH or an engine: a host seeded
as kpro5 stands, the plan's units of a stack aimed at it, each script run as the provider runs it; the fixtures
`host` (the seed), `converged_template` (one converge per test run, shared by the workers) and `converged` (a
private copy of it) are registered in conftest.py.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import KPRO5_SECRETS, kpro5_values
from fakehost import host_env
from fakehost.installer import make_fake_run
from fakehost.tree import seed_kpro5, tree_digest
from fakehost.view import HostView
from gpuhosts.plans.proxmox_host import plan_host
from gpuhosts.protocol import ProtocolError, parse_facts, parse_result
from gpuhosts.provider import OBSERVATION
from gpuhosts.stacks import validate_stack
from gpuhosts.units import Unit

VERSION = "580.126.09"
# A probe must change nothing, not even under run/ (a lock file, a reboot marker); only the stand-ins' own logs
# of what they were asked may differ.
STAND_IN_LOGS = ("var/log/fakehost",)
A6000 = ("0000:41:00.0", "0000:61:00.0")
RTX3090_FUNCTIONS = ("0000:01:00.0", "0000:01:00.1", "0000:21:00.0", "0000:21:00.1")


@dataclass
class Host(HostView):
    tree: Path
    run_file: Path
    sha256: str
    # The Proxmox VE release the stack declares: the committed one ("stack"), another, or None (not declared).
    proxmox_release: str | None = "stack"

    def values(self) -> dict:
        values = kpro5_values()
        if self.proxmox_release is None:
            values["host"].pop("proxmoxRelease", None)
        elif self.proxmox_release != "stack":
            values["host"]["proxmoxRelease"] = self.proxmox_release
        values["nvidia"].update(url=f"file://{self.run_file}", sha256=self.sha256)
        # The host's own units; the services of its container are exercised in test_service_scripts.py.
        values.pop("services")
        values.pop("benchmarks", None)  # a benchmark compares services: none without them
        return values

    def units(self, values: dict | None = None) -> list[Unit]:
        return plan_host(validate_stack(values or self.values(), KPRO5_SECRETS)).apply_order

    def unit(self, key: str, values: dict | None = None) -> Unit:
        (found,) = [u for u in self.units(values) if u.key == key]
        return found

    def run(self, script: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=host_env(self.tree),
                              timeout=120)

    def apply(self, unit: Unit, operation: str = "ensure") -> str:
        result = self.run(getattr(unit, operation))
        assert result.returncode == 0, f"{unit.key} {operation} failed:\n{result.stdout}\n{result.stderr}"
        # Every ensure and teardown that succeeds ends with its result line (the provider fails a unit without one).
        parse_result(result.stdout)
        return result.stdout

    def up(self, values: dict | None = None) -> dict[str, str]:
        return {unit.key: self.apply(unit) for unit in self.units(values)}

    def destroy(self, values: dict | None = None) -> dict[str, str]:
        return {unit.key: self.apply(unit, "teardown") for unit in reversed(self.units(values))}

    def probe_output(self, unit: Unit) -> dict:
        """Everything the unit's probe reports, observations included; the probe must leave the host as it found
        it."""
        before = tree_digest(self.tree, exclude=STAND_IN_LOGS)
        result = self.run(unit.probe)
        assert result.returncode == 0, f"{unit.key} probe failed:\n{result.stdout}\n{result.stderr}"
        assert tree_digest(self.tree, exclude=STAND_IN_LOGS) == before, f"{unit.key}'s probe changed the host"
        return parse_facts(result.stdout)

    def probe(self, unit: Unit) -> dict:
        """The facts the probe reports that a plan can declare; observations (minors, dynamic majors) left out."""
        return {k: v for k, v in self.probe_output(unit).items() if not k.startswith(OBSERVATION)}

    def smi_in_container(self, vmid: int = 129) -> subprocess.CompletedProcess:
        return subprocess.run(["pct", "exec", str(vmid), "--", "nvidia-smi", "--query-gpu=pci.bus_id,driver_version",
                               "--format=csv,noheader"], capture_output=True, text=True, env=host_env(self.tree))


@pytest.fixture
def host(tmp_path) -> Host:
    tree = seed_kpro5(tmp_path / "kpro5")
    run_file = tmp_path / f"NVIDIA-Linux-x86_64-{VERSION}.run"
    sha256 = make_fake_run(run_file, VERSION)
    return Host(tree, run_file, sha256)


def run_folder(tmp_path_factory) -> Path:
    """A folder of this test run that every worker of it sees (pytest-xdist gives each worker a folder of its own
    under it), and no other run."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextmanager
def made_once(folder: Path):
    """Whoever comes first makes `folder` (the body runs when it lacks its `done` marker); the others wait for it."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield not (folder / "done").exists()
        (folder / "done").touch()


@pytest.fixture(scope="session")
def converged_template(tmp_path_factory) -> tuple[Host, str, str]:
    """kpro5 converged from its seed once per test run and kept, read-only, for the tests that start where it ends
    (each on a copy): (host, start digest, digest after up)."""
    root = run_folder(tmp_path_factory) / "converged-kpro5"
    run_file = root / f"NVIDIA-Linux-x86_64-{VERSION}.run"
    with made_once(root) as first:
        if first:
            host = Host(seed_kpro5(root / "kpro5"), run_file, make_fake_run(run_file, VERSION))
            start = host.digest()
            host.up()
            (root / "digests.json").write_text(json.dumps(
                {"sha256": host.sha256, "start": start, "after": host.digest()}))
    digests = json.loads((root / "digests.json").read_text())
    return Host(root / "kpro5", run_file, digests["sha256"]), digests["start"], digests["after"]


@pytest.fixture
def converged(converged_template, tmp_path) -> Host:
    """A private copy of the converged kpro5, so each test may change it."""
    template, _start, _after = converged_template
    shutil.copytree(template.tree, tmp_path / "kpro5", symlinks=True)
    return Host(tmp_path / "kpro5", template.run_file, template.sha256)


def refused(host: Host, unit: Unit, words: str, operation: str = "ensure") -> None:
    before = host.digest()
    result = host.run(getattr(unit, operation))
    assert result.returncode != 0, f"{unit.key} should refuse:\n{result.stdout}"
    assert "refused:" in result.stderr and words in result.stderr, result.stderr
    with pytest.raises(ProtocolError):
        parse_result(result.stdout)
    assert host.digest() == before, f"{unit.key} changed the host while refusing"


def older_driver(host: Host, version: str = "570.148.08") -> dict:
    values = host.values()
    run_file = host.run_file.with_name(f"NVIDIA-Linux-x86_64-{version}.run")
    values["nvidia"].update(version=version, url=f"file://{run_file}", sha256=make_fake_run(run_file, version))
    return values
