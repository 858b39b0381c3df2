"""A simulated host and the real CLI's stack that converges it, as one thing a test holds.

    host = Converged.seed(project, tmp_path / "host")           # the seed's kpro5, its sshd, a stack aimed at it
    host.up()                                                  # `pulumi up` of the stack file's values
    copy = Converged.copy_of(host, tmp_path / "copy")          # the converged host restored by copy, state and all
    again = Converged.restore(kpro5_snapshot, tmp_path / "again", project)   # the run's converged kpro5, copied
    copy.up(moved_to_vfio(copy.values()))                      # the stack file edited, then `pulumi up`

A copy is the template's tree copied, an sshd of its own (a new port and host key) that accepts the template's
client key, and the template's state imported with `pulumi stack import` into a stack of its own, aimed at the
copy's sshd and signed anew: the same converged host behind another address, without converging it again.
"""

from __future__ import annotations

import copy
import itertools
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fakehost.tree import tree_digest
from gpuhosts.provider import state_signature
from realengine import Preview, Project, Run, Stack, urn_name
from sshhost.bed import Bed

# A unit's type is `pulumi-python:dynamic/gpuhosts:<Kind>`, and was `pulumi-python:dynamic:Resource` before the
# resource tree: both are the dynamic provider's.
HOST_UNIT_PREFIX = "pulumi-python:dynamic"
_names = itertools.count(1)


def fresh_name(prefix: str = "kpro5") -> str:
    return f"{prefix}-{next(_names)}"


class Converged:
    def __init__(self, bed: Bed, stack: Stack):
        self.bed, self.stack = bed, stack

    @classmethod
    def seed(cls, project: Project, root: Path, values: dict[str, Any] | None = None, **seed_args) -> "Converged":
        bed = Bed.seed(root, **seed_args)
        return cls(bed, Stack(project, fresh_name(), "kpro5", values or bed.values(), bed.secrets()))

    @classmethod
    def copy_of(cls, other: "Converged", root: Path) -> "Converged":
        """A private copy of another's host and state, taken now."""
        return cls.restore(other.snapshot(root / "snapshot"), root, other.stack.project)

    def snapshot(self, folder: Path) -> "Snapshot":
        """The host's tree and the stack's state as they are now, kept in `folder` to restore any number of times."""
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copytree(self.bed.tree, folder / "kpro5", symlinks=True)
        for suffix in ("", ".pub"):
            shutil.copy(str(self.bed.ssh.private_key) + suffix, folder / f"id_ed25519{suffix}")
        return Snapshot(folder, self.stack.name, self.stack.export(), self.values(), self.bed.run_file,
                        self.bed.sha256).save()

    @classmethod
    def restore(cls, snapshot: "Snapshot", root: Path, project: Project) -> "Converged":
        """The snapshot's host behind a new sshd, in a new stack of `project` that holds its state (any project of
        the tier: they share the passphrase the state's secrets are sealed with)."""
        root.mkdir(parents=True, exist_ok=True)
        shutil.copytree(snapshot.folder / "kpro5", root / "kpro5", symlinks=True)
        bed = Bed._open(root, root / "kpro5", snapshot.run_file, snapshot.sha256)
        # The snapshot's client key, so the state's signatures and the stack's secret stay the same.
        for suffix in ("", ".pub"):
            shutil.copy(snapshot.folder / f"id_ed25519{suffix}", str(bed.ssh.private_key) + suffix)
        public = " ".join(bed.ssh.private_key.with_suffix(".pub").read_text().split()[:2])
        (bed.ssh.workdir / "authorized_keys").write_text(public + "\n")
        values = copy.deepcopy(snapshot.values)
        values["host"]["ssh"].update(host=bed.ssh.host, port=bed.ssh.port, user=bed.ssh.user,
                                     hostKey=bed.ssh.host_key)
        made = cls(bed, Stack(project, fresh_name(), "kpro5", values, bed.secrets()))
        if snapshot.deployment["deployment"].get("resources"):
            made.import_state(retargeted(snapshot.deployment, bed, snapshot.stack, made.stack.name))
        return made

    def close(self) -> None:
        self.bed.close()

    # --- the stack --------------------------------------------------------------------------------------------
    def values(self) -> dict[str, Any]:
        """The stack file's values, as an operator reads them before editing."""
        document = yaml.safe_load(self.stack.file.read_text())
        return {k.split(":", 1)[1]: v for k, v in document["config"].items()
                if k.startswith("gpuhosts:") and not (isinstance(v, dict) and set(v) == {"secure"})}

    def edit(self, values: dict[str, Any] | None) -> None:
        if not isinstance(values, (dict, type(None))):
            raise TypeError(f"values are a dict or None, not {values!r}: CLI arguments follow them")
        if values is not None:
            self.stack.set_values(values)

    def up(self, values: dict[str, Any] | None = None, *extra: str, check: bool = True) -> Run:
        self.edit(values)
        return self.stack.up(*extra, check=check)

    def preview(self, values: dict[str, Any] | None = None, *extra: str, check: bool = True) -> Preview:
        self.edit(values)
        return self.stack.preview(*extra, check=check)

    def destroy(self, *extra: str, check: bool = True) -> Run:
        return self.stack.destroy(*extra, check=check)

    def target(self, name: str) -> str:
        """`--target` of a resource by its name (its URN in the state)."""
        return f"--target={self.stack.urn(name)}"

    # --- the state ----------------------------------------------------------------------------------------------
    def deployment(self) -> dict[str, Any]:
        return json.loads(self.stack.pulumi("stack", "export", "--show-secrets").stdout)

    def state(self) -> dict[str, dict[str, Any]]:
        """The state's resources by name, secrets in plain text (`pulumi stack export --show-secrets`)."""
        return {urn_name(entry["urn"]): entry for entry in self.deployment()["deployment"].get("resources", [])
                if entry.get("parent")}

    def units(self) -> dict[str, dict[str, Any]]:
        return {name: entry for name, entry in self.state().items() if entry["type"].startswith(HOST_UNIT_PREFIX)}

    def import_state(self, deployment: dict[str, Any]) -> None:
        path = self.bed.root / f"state-{self.stack.name}.json"
        path.write_text(json.dumps(deployment))
        self.stack.pulumi("stack", "import", "--file", str(path))
        path.unlink()

    # --- the host -----------------------------------------------------------------------------------------------
    def digest(self) -> str:
        return self.bed.digest()


@dataclass(frozen=True)
class Snapshot:
    """A converged host kept on disk: its tree, the client key its state is signed with, the stack's state (as
    `pulumi stack export` wrote it) and values; `snapshot.json` in its folder holds the rest, so another process
    of the same run can restore it."""

    folder: Path
    stack: str
    deployment: dict[str, Any]
    values: dict[str, Any]
    run_file: Path
    sha256: str

    def save(self) -> "Snapshot":
        (self.folder / "snapshot.json").write_text(json.dumps({
            "stack": self.stack, "deployment": self.deployment, "values": self.values,
            "run_file": str(self.run_file), "sha256": self.sha256}))
        return self

    @classmethod
    def load(cls, folder: Path) -> "Snapshot":
        saved = json.loads((folder / "snapshot.json").read_text())
        return cls(folder, saved["stack"], saved["deployment"], saved["values"], Path(saved["run_file"]),
                   saved["sha256"])

    def digest(self) -> str:
        return tree_digest(self.folder / "kpro5")


def retargeted(deployment: dict[str, Any], bed: Bed, source: str, stack: str) -> dict[str, Any]:
    """Another stack's state, its units aimed at `bed`'s sshd and signed with its key, renamed for `stack`."""
    document = copy.deepcopy(deployment)
    private_key = bed.secrets()["sshPrivateKey"]
    for entry in document["deployment"].get("resources", []):
        for section in ("inputs", "outputs"):
            target = (entry.get(section) or {}).get("host")
            if isinstance(target, dict):
                target.update(address=bed.ssh.host, port=bed.ssh.port, user=bed.ssh.user,
                              hostKey=bed.ssh.host_key)
        if "signature" in (entry.get("outputs") or {}):
            entry["outputs"]["signature"] = state_signature(entry["outputs"], private_key)
    return json.loads(json.dumps(document).replace(f"urn:pulumi:{source}::", f"urn:pulumi:{stack}::")
                      .replace(f"gpuhosts-{source}", f"gpuhosts-{stack}"))
