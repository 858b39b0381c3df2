"""Renaming the host, renaming the host's component type or re-nesting the units in code, or replacing units leaves
the host as it is, through the real CLI.

A renamed component or re-nested units change every unit's URN: the engine creates the new resources and deletes
the old ones last, as `--replace` does for the units it names. Without the ownership record
(templates/common/run.sh.j2) the old resources' teardowns would uninstall the driver and hand the A6000s back to
vfio-pci. A renamed host changes only inputs: the units that write the host's name (its metrics' labels) run.
"""

from __future__ import annotations

import copy
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from fakehost.tree import OWNER_RECORDS, tree_listing, volatile
from gpuhosts.plans.proxmox_host import plan_host
from gpuhosts.stacks import validate_stack
from realengine import Run
from realengine.beds import Converged

pytestmark = pytest.mark.pulumi
REPLACED = ("vfio-binding", "nvidia-driver", "ct129-gpu-devices", "ct129-nvidia-userspace")


@dataclass(frozen=True)
class Rename:
    name: str
    program: str | None = None      # the program variant (beside this file) the change is made by
    replace: tuple[str, ...] = ()   # `pulumi up --replace` of these units
    host_name: str | None = None    # the host renamed in the stack file


RENAMES = [
    Rename("host renamed", host_name="kpro5b"),
    Rename("component renamed", program="renamed_component_program.py"),
    Rename("units re-nested", program="renested_program.py"),
    Rename("units replaced (--replace)", replace=REPLACED),
]


@contextmanager
def program_variant(host: Converged, variant: str | None):
    """The project copy's program replaced by a variant for the length of a case."""
    if variant is None:
        yield
        return
    program = host.stack.project.root / "__main__.py"
    today = program.with_name("today.py")
    shutil.copy(program, today)
    shutil.copy(Path(__file__).with_name(variant), program)
    try:
        yield
    finally:
        shutil.move(today, program)


def scripts_said(run: Run, script: str) -> dict[str, bool]:
    """Per unit, whether its `script` (ensure or teardown) reported a change, from the provider's log."""
    said = {}
    for line in run.provider_lines:
        words = line.split()
        if line.startswith("gpuhosts-unit: ") and len(words) == 4 and words[2] == script \
                and words[3].startswith("changed="):
            said[words[1]] = words[3] == "changed=true"
    return said


def rewritten(old_values: dict, new_values: dict) -> dict[str, set[str]]:
    """The units whose declared state the change of values moves, each with the paths of the files it writes: what
    an `up` must change on the host. Read from the plans, never listed: a host's name is a label on its metrics."""
    old, new = (plan_host(validate_stack(values, {"sshPrivateKey"})).units for values in (old_values, new_values))
    return {key: {file.path.lstrip("/") for file in new[key].files}
            for key in old.keys() & new.keys() if old[key].desired != new[key].desired}


@pytest.mark.parametrize("rename", RENAMES, ids=lambda r: r.name)
def test_a_rename_or_replacement_leaves_the_host_as_it_is(project, kpro5_snapshot, tmp_path, rename):
    host = Converged.restore(kpro5_snapshot, tmp_path / "bed", project)
    bed = host.bed
    try:
        before = tree_listing(bed.tree, (*volatile(bed.tree), OWNER_RECORDS))
        values = host.values()
        if rename.host_name:
            values = copy.deepcopy(values)
            values["host"]["name"] = rename.host_name
        moved = rewritten(host.values(), values)
        with program_variant(host, rename.program):
            up = host.up(values, *[f"--replace={host.stack.urn(unit)}" for unit in rename.replace])
            deleted = {name for name, op in up.operations().items() if op in ("delete", "delete-replaced")}
            torn = scripts_said(up, "teardown")
            if rename.host_name is None:
                # Every old resource went, and its teardown left the unit to the resource that owns it now.
                assert deleted and set(torn) >= {unit for unit in REPLACED} and not any(torn.values()), torn
            acted = {unit for unit, changed in scripts_said(up, "ensure").items() if changed}
            assert acted == set(moved), (acted, sorted(moved))
            after = tree_listing(bed.tree, (*volatile(bed.tree), OWNER_RECORDS))
            changed_paths = {path for path in before.keys() | after.keys() if before.get(path) != after.get(path)}
            assert changed_paths <= set().union(*moved.values()), \
                f"the host changed beyond {sorted(moved)}: {sorted(changed_paths)}"
            assert bool(changed_paths) == bool(moved), "the changed units wrote nothing"
            assert bed.problems() == []
            assert host.preview().changed() == {}
            # The new resources own the units now: destroying them still restores the host's start.
            gone = host.destroy()
        assert {unit for unit, changed in scripts_said(gone, "teardown").items() if changed} >= {
            "vfio-binding", "nvidia-driver"}
        assert bed.driver("0000:41:00.0") == "vfio-pci" and not (bed.tree / "sys/module/nvidia").exists()
    finally:
        host.close()
