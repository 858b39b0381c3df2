"""The kpro5 stack's host simulated over SSH: tree, sshd, the driver's `.run` and the stack's values aimed at them,
in one folder.

    bed = Bed.seed(tmp_path)                 # the seed's kpro5, its sshd started
    bed.values()                             # kpro5's values aimed at this host, for a stack file
    bed.close()

The real Pulumi CLI converges it (tests/realengine/beds.py holds a bed and its stack together).
"""

from __future__ import annotations

import copy
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fakehost import kernel
from fakehost.installer import make_fake_run
from fakehost.tree import seed_kpro5
from fakehost.view import HostView
from conftest import READY_CAP_S
from sshhost import SshHost

PROJECT = Path(__file__).resolve().parents[2]
STACK = "kpro5"
VERSION = "580.126.09"
A6000 = ("0000:41:00.0", "0000:61:00.0")
RTX3090_FUNCTIONS = ("0000:01:00.0", "0000:01:00.1", "0000:21:00.0", "0000:21:00.1")
MODEL = "var/lib/lxc/129/rootfs/srv/models/Qwen3.6-27B/config.json"
# What `pulumi config set --secret` would hold for this stack; the provider sends them on stdin.
SECRETS = {"hfToken": "hf_LifecycleToken7d3e91", "llmApiKey": "sk-lifecycle-key-2b8c40"}


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
    plans: int = 0

    # --- making one ---------------------------------------------------------------------------------------------
    @classmethod
    def seed(cls, root: Path, run_file: Path | None = None, sha256: str | None = None, **seed_args) -> "Bed":
        root.mkdir(parents=True, exist_ok=True)
        tree = seed_kpro5(root / "kpro5", **seed_args)
        return cls._open(root, tree, run_file, sha256)

    @classmethod
    def _open(cls, root: Path, tree: Path, run_file: Path | None, sha256: str | None) -> "Bed":
        if run_file is None:
            run_file = root / f"NVIDIA-Linux-x86_64-{VERSION}.run"
            sha256 = make_fake_run(run_file, VERSION)
        return cls(root, tree, run_file, sha256, SshHost(tree, root / "ssh").start())

    def secrets(self) -> dict[str, str]:
        """What `pulumi config set --secret` holds for the stack: the SSH key and the services' secrets."""
        return {"sshPrivateKey": self.ssh.private_key.read_text(), **SECRETS}

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

    def smi_in_container(self, vmid: int = 129) -> subprocess.CompletedProcess:
        return self.on_host(f"pct exec {vmid} -- nvidia-smi --query-gpu=pci.bus_id,driver_version --format=csv,noheader")

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

