"""The kpro5 stack against a simulated host over SSH: tree, sshd, stack file, program, engine — in one folder.

    bed = Bed.seed(tmp_path)                 # the seed's kpro5, its sshd started
    bed.up()                                 # the program's resources for the stack, then `pulumi up` of them
    bed.preview()                            # refresh, then what `pulumi preview` would do
    bed.up(moved_to_vfio(bed.values()))      # another stack: a new stack file, the program run again
    bed.destroy()
    bed.close()

The engine is tests/engine: the real host-unit provider in Pulumi's dynamic-provider server, driven as the
engine drives it (refresh, parallel steps, create-before-delete).
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fakehost import host_env, kernel
from fakehost.installer import make_fake_run
from fakehost.tree import seed_kpro5
from fakehost.view import HostView
import os
import sys

from conftest import READY_CAP_S
from engine import ApplyError, Engine, Op, Preview
from sshhost import SshHost

from gpuhosts.provider import state_signature

PROJECT = Path(__file__).resolve().parents[2]
STACK = "kpro5"
VERSION = "580.126.09"
A6000 = ("0000:41:00.0", "0000:61:00.0")
RTX3090_FUNCTIONS = ("0000:01:00.0", "0000:01:00.1", "0000:21:00.0", "0000:21:00.1")
MODEL = "var/lib/lxc/129/rootfs/srv/models/Qwen3.6-27B/config.json"
# What `pulumi config set --secret` would hold for this stack; the provider sends them on stdin.
SECRETS = {"hfToken": "hf_LifecycleToken7d3e91", "llmApiKey": "sk-lifecycle-key-2b8c40"}
TESTS = Path(__file__).resolve().parents[1]


def record_program(stack_file: Path, stack: str, secrets: dict[str, str]) -> list[dict[str, Any]]:
    """The resources the real __main__.py registers for the stack file (tests/engine/program.py)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(PROJECT)])}
    result = subprocess.run([sys.executable, "-m", "engine.program", str(stack_file), stack], input=json.dumps(secrets),
                            capture_output=True, text=True, cwd=PROJECT, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"the program failed for {stack_file}:\n{result.stderr[-4000:]}")
    return json.loads(result.stdout)


def write_plan(stack: str, stack_file: Path, out: Path) -> Path:
    """The real `gpuhosts plan`, as a separate process."""
    result = subprocess.run([sys.executable, "-m", "gpuhosts.cli", "plan", stack, "--stack-file", str(stack_file),
                             "--out", str(out)], cwd=PROJECT, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"gpuhosts plan failed:\n{result.stdout}{result.stderr}")
    return out


def stack_document() -> dict[str, Any]:
    return yaml.safe_load((PROJECT / "stacks" / f"Pulumi.{STACK}.yaml").read_text())


def host_values() -> dict[str, Any]:
    """The committed kpro5 stack's host side, as a bed converges it: without its services and bake-off."""
    config = stack_document()["config"]
    values = {k.split(":", 1)[1]: copy.deepcopy(v) for k, v in config.items() if k.startswith("gpuhosts:")}
    values.pop("services")
    values.pop("benchmarks", None)  # a benchmark compares services: none without them
    return values


def host_unit_order() -> list[str]:
    """The host side's units in the plan's apply order, read from the plan, never written down."""
    return list(host_unit_graph())


def host_unit_graph() -> dict[str, tuple[str, ...]]:
    """The host side's units in apply order, each with the units it needs."""
    from gpuhosts.plans.proxmox_host import plan_host
    from gpuhosts.stacks import validate_stack

    plan = plan_host(validate_stack(host_values(), {"sshPrivateKey"}))
    return {unit.key: tuple(unit.needs) for unit in plan.apply_order}


def moved_to_vfio(values: dict[str, Any]) -> dict[str, Any]:
    """The change: the second RTX A6000 leaves CT 129 for VMs."""
    values = copy.deepcopy(values)
    values["gpus"][3] = {"address": "0000:61:00.0", "model": "RTX A6000", "use": "vfio"}
    return values


@dataclass
class Bed(HostView):
    root: Path
    tree: Path
    run_file: Path
    sha256: str
    ssh: SshHost
    engine: Engine
    plans: int = 0
    durations: dict[str, float] = field(default_factory=dict)

    # --- making one ---------------------------------------------------------------------------------------------
    @classmethod
    def seed(cls, root: Path, run_file: Path | None = None, sha256: str | None = None, **seed_args) -> "Bed":
        root.mkdir(parents=True, exist_ok=True)
        tree = seed_kpro5(root / "kpro5", **seed_args)
        return cls._open(root, tree, run_file, sha256)

    @classmethod
    def copy_of(cls, other: "Bed", root: Path) -> "Bed":
        """A private copy of another bed's host and state, with an sshd of its own (a new port and host key)."""
        root.mkdir(parents=True, exist_ok=True)
        shutil.copytree(other.tree, root / "kpro5", symlinks=True)
        if other.engine.state_file.exists():
            shutil.copy(other.engine.state_file, root / "state.json")
        bed = cls._open(root, root / "kpro5", other.run_file, other.sha256)
        bed.retarget_state()
        return bed

    def retarget_state(self) -> None:
        """Point the copied state at this bed's sshd: the copy is the same host behind another port and key."""
        state = self.engine.state()
        for entry in state.values():
            for section in ("inputs", "outputs"):
                host = entry.get(section, {}).get("host")
                if isinstance(host, dict):
                    host.update(address=self.ssh.host, port=self.ssh.port, user=self.ssh.user,
                                hostKey=self.ssh.host_key)
            # Moved on purpose, so signed anew with this bed's key, as the stack's own `up` would have.
            if "signature" in entry.get("outputs", {}):
                entry["outputs"]["signature"] = state_signature(entry["outputs"], self.secrets()["sshPrivateKey"])
        if state:
            self.engine._save(state)

    @classmethod
    def _open(cls, root: Path, tree: Path, run_file: Path | None, sha256: str | None) -> "Bed":
        if run_file is None:
            run_file = root / f"NVIDIA-Linux-x86_64-{VERSION}.run"
            sha256 = make_fake_run(run_file, VERSION)
        ssh = SshHost(tree, root / "ssh").start()
        bed = cls(root, tree, run_file, sha256, ssh, None)  # type: ignore[arg-type]
        bed.engine = Engine(root / "state.json", bed.config())
        return bed

    def secrets(self) -> dict[str, str]:
        """What `pulumi config set --secret` holds for the stack: the SSH key and the services' secrets."""
        return {"sshPrivateKey": self.ssh.private_key.read_text(), **SECRETS}

    def config(self) -> dict[str, str]:
        return {f"gpuhosts:{k}": v for k, v in self.secrets().items()}

    def close(self) -> None:
        self.ssh.stop()

    # --- the stack ------------------------------------------------------------------------------------------------
    def values(self) -> dict[str, Any]:
        """The kpro5 stack's values, aimed at this host: its sshd, its pinned key, the fake `.run`."""
        values = host_values()
        values["host"]["ssh"].update(host=self.ssh.host, port=self.ssh.port, user=self.ssh.user,
                                     hostKey=self.ssh.host_key)
        values["nvidia"].update(url=f"file://{self.run_file}", sha256=self.sha256)
        # The host's own units; services_values() adds the container's services.
        return values

    def services_values(self, sglang_port: int, vllm_port: int) -> dict[str, Any]:
        """values() with kpro5's services, listening where the gate on this machine can reach an engine stand-in."""
        values = self.values()
        services = copy.deepcopy(stack_document()["config"]["gpuhosts:services"])
        for service, port in zip(services, (sglang_port, vllm_port)):
            service.update(port=port, bind="127.0.0.1")
            service["gate"].update(readyTimeoutS=READY_CAP_S, maxTokens=64)
        values["services"] = services
        return values

    def write_stack(self, values: dict[str, Any], name: str | None = None) -> Path:
        document = stack_document()
        document["config"] = {f"gpuhosts:{k}": v for k, v in values.items()}
        self.plans += 1
        path = self.root / "stacks" / (name or f"Pulumi.kpro5-{self.plans}.yaml")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        return path

    def plan(self, values: dict[str, Any] | None = None) -> Path:
        """`gpuhosts plan kpro5 --stack-file … --out …` of these values; the plan folder."""
        stack_file = self.write_stack(values or self.values())
        return write_plan(STACK, stack_file, self.root / "plans" / stack_file.stem)

    def program(self, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """The resources the real program registers for these values, as the engine receives them."""
        return record_program(self.write_stack(values or self.values()), STACK, self.secrets())

    # --- operations ---------------------------------------------------------------------------------------------
    def up(self, values: dict[str, Any] | None = None, program: list | None = None, **options) -> list[Op]:
        """`pulumi up` (refresh first) of these values or of a program already recorded; options: targets, refresh."""
        return self.engine.up(program if program is not None else self.program(values), **options)

    def preview(self, values: dict[str, Any] | None = None, program: list | None = None, **options) -> Preview:
        return self.engine.preview(program if program is not None else self.program(values), **options)

    def destroy(self, *, refresh: bool = True, continue_on_error: bool = False) -> list[Op]:
        """`pulumi destroy`; the refreshes' reads and the deletes' ops, in the order they ended.

        refresh=True is what the CLI does under Pulumi.yaml's `options.refresh: always`, which covers "a pulumi update
        / preview / destroy" alike (the project file's `options.refresh`); False is `--refresh=false`, the deletes
        planned from the state alone, for a host that no longer answers. continue_on_error is `--continue-on-error`:
        "Continue to perform the destroy operation despite the occurrence of errors"
        (pulumi.com/docs/iac/cli/commands/pulumi_destroy); operations in flight finish, resources independent of a
        failed one are still brought to the requested state (the Pulumi blog's "Continue on Error in the Pulumi
        CLI"), a resource that a failed one depends on is kept, the run fails naming every failed delete, and only
        what was deleted leaves the state (tests/engine `_delete_all`).
        """
        return self.engine.destroy(refresh=refresh, continue_on_error=continue_on_error)

    def stack_rm(self, stack: str = STACK, force: bool = False) -> None:
        """`pulumi stack rm`: refused while the state holds resources, unless `--force` ("Forces deletion of the
        stack, leaving behind any resources managed by the stack": pulumi.com/docs/iac/cli/commands/pulumi_stack_rm)."""
        left = sorted(entry["name"] for entry in self.engine.state().values())
        if left and not force:
            raise ApplyError(f"'{stack}' still has resources; removal rejected ({', '.join(left)}): run `pulumi "
                             "destroy`, or `pulumi stack rm --force` to leave them behind", [])
        self.engine.stack_rm()

    # --- the host (its state is read through HostView) -------------------------------------------------------
    def keep_persistence_on(self, address: str) -> None:
        """Persistence mode on for a GPU, with a daemon that turns it straight back on: `nvidia-smi -pm 0` does not stick."""
        kernel.set_persistence(self.tree, address, "Enabled")
        sticky = self.ssh.fault_bin / "nvidia-smi"
        sticky.write_text('#!/bin/bash\nfor a in "$@"; do [ "$a" = -pm ] && exit 0; done\n'
                          'exec "$(PATH="${PATH#*:}"; type -P nvidia-smi)" "$@"\n')
        sticky.chmod(0o755)

    def on_host(self, command: str) -> subprocess.CompletedProcess:
        """A command on the host, over SSH (as an operator would run it)."""
        return subprocess.run(self.ssh.ssh_argv(command), capture_output=True, text=True, timeout=300)

    def locally(self, argv: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(argv, capture_output=True, text=True, env=host_env(self.tree), timeout=300)

    def smi_in_container(self, vmid: int = 129) -> subprocess.CompletedProcess:
        return self.on_host(f"pct exec {vmid} -- nvidia-smi --query-gpu=pci.bus_id,driver_version --format=csv,noheader")

    @staticmethod
    def ensure_scripts(program: list[dict[str, Any]]) -> list[tuple[str, str]]:
        return [(r["name"], r["inputs"]["ensure"]) for r in program if "ensure" in r["inputs"]]

    def problems(self, values: dict[str, Any] | None = None) -> list[str]:
        """How the host differs from the state the stack declares (empty when it is there), read from the host."""
        values = values or self.values()
        found: list[str] = []
        gpus = values["gpus"]
        for gpu in gpus:
            slot = gpu["address"].rsplit(".", 1)[0]
            wanted = "vfio-pci" if gpu["use"] == "vfio" else "nvidia"
            for function in (f"{slot}.0", f"{slot}.1"):
                want = wanted if function.endswith(".0") else ("vfio-pci" if gpu["use"] == "vfio" else None)
                have = self.driver(function)
                if want is not None and have != want:
                    found.append(f"{function} is on '{have}', not {want}")
                if want is None and have == "vfio-pci":
                    found.append(f"{function} is still on vfio-pci")
        version_file = self.tree / "sys/module/nvidia/version"
        if not version_file.exists() or version_file.read_text().strip() != VERSION:
            found.append("nvidia module is not loaded at " + VERSION)
            return found
        in_ct = [g["address"] for g in gpus if g["use"] == "container"]
        expected = sorted([f"/dev/nvidia{self.minor(a)}" for a in in_ct]
                          + ["/dev/nvidiactl", "/dev/nvidia-uvm"])
        if sorted(self.container_devices()) != expected:
            found.append(f"CT 129 has {sorted(self.container_devices())}, not {expected}")
        if not (self.tree / "dev/nvidia-uvm").exists():
            found.append("/dev/nvidia-uvm is missing")
        if "iommu=pt" not in self.text("/etc/kernel/cmdline"):
            found.append("iommu=pt is not in /etc/kernel/cmdline")
        smi = self.smi_in_container()
        got = sorted(smi.stdout.replace(",", " ").split())
        want = sorted(["0000" + a for a in in_ct] + [VERSION] * len(in_ct))  # bus ids have an 8-digit domain
        if smi.returncode != 0 or got != want:
            found.append(f"nvidia-smi in CT 129: {smi.returncode} {smi.stdout.strip()} {smi.stderr.strip()}")
        return found


def timed(function, *args, **kwargs) -> tuple[Any, float]:
    started = time.monotonic()
    result = function(*args, **kwargs)
    return result, time.monotonic() - started


def names(ops: list[Op], operation: str | None = None) -> list[str]:
    return [op.name for op in ops if op.operation != "read" and (operation is None or op.operation == operation)]
