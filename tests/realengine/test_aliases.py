"""Aliases through the real engine. A kpro5 converged by gpuhosts as it registered before the resource tree (every
unit a `pulumi-python:dynamic:Resource` under the host's component: flat_program.py) moves to today's program, whose
units live under typed components and carry aliases; then the one-host stack moves into `gpuhosts:hosts`, which
renames every unit to `kpro5/<unit>` (aliases again). Each time the real engine plans no replace, creates and deletes
no unit, and runs nothing on the host."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest

from realengine import Stack
from realengine.hosts import entries
from sshhost.bed import Bed
from gpuhosts.fleet import FLEET_SECTIONS

pytestmark = pytest.mark.pulumi
FLAT_TYPE = "pulumi-python:dynamic:Resource"


def as_list_of_hosts(values: dict) -> dict:
    """A one-host stack's values as `gpuhosts:hosts` holds them, the host marked as the one the stack held."""
    host = {**copy.deepcopy(values["host"]), "gpus": values["gpus"], "containers": values["containers"],
            "migratedFromHost": True}
    shared = {key: values[key] for key in FLEET_SECTIONS if key in values and key != "hosts"}
    return {**shared, "kind": values["kind"], "hosts": [host]}


def unit_types(stack: Stack) -> dict[str, str]:
    return {name: entry["type"] for name, entry in stack.resources().items()
            if entry["type"].startswith("pulumi-python:dynamic")}


def test_a_flat_stack_moves_into_the_tree_and_then_into_a_list_of_hosts_without_touching_the_host(project, tmp_path):
    bed = Bed.seed(tmp_path / "host")
    program = project.root / "__main__.py"
    try:
        shutil.copy(program, project.root / "today.py")
        shutil.copy(Path(__file__).with_name("flat_program.py"), program)
        stack = Stack(project, "kpro5", "kpro5", bed.values(), bed.secrets())
        stack.up()
        flat = unit_types(stack)
        assert flat and set(flat.values()) == {FLAT_TYPE}, flat
        converged = entries(bed.tree)
    finally:
        shutil.move(project.root / "today.py", program)

    preview = stack.preview()
    planned = preview.changed()
    assert {op for op, _ in planned.values()} <= {"create"}, planned
    created = set(planned)
    assert not created & set(flat), "a unit would be created again"
    up = stack.up()
    assert up.host_operations == [] and set(up.changed()) == created and set(up.changed().values()) <= {"create"}
    tree = unit_types(stack)
    assert set(tree) == set(flat) and FLAT_TYPE not in tree.values(), tree
    assert entries(bed.tree) == converged

    stack.set_values(as_list_of_hosts(bed.values()))
    moved = stack.preview().changed()
    assert {op for op, _ in moved.values()} <= {"create", "delete"}, moved
    assert not {name for name in moved if name.removeprefix("kpro5/") in tree}, moved
    up = stack.up()
    assert up.host_operations == [], up.host_operations
    renamed = unit_types(stack)
    assert set(renamed) == {f"kpro5/{name}" for name in tree}, sorted(renamed)
    assert entries(bed.tree) == converged
    assert stack.preview().changed() == {}


def test_a_replaced_unit_leaves_the_host_as_it_is_and_says_why(project, tmp_path):
    """`pulumi up --replace` creates the new resource first and deletes the old one last: the old one's teardown
    finds the unit owned by the new one, leaves the host as it is, and the run says so."""
    bed = Bed.seed(tmp_path / "host")
    try:
        stack = Stack(project, "replace", "kpro5", bed.values(), bed.secrets())
        stack.up()
        converged = entries(bed.tree)
        up = stack.up("--replace", stack.urn("node-exporter"))
        assert up.changed() == {"node-exporter": "replace"} or set(up.changed().values()) <= {
            "create-replacement", "replace", "delete-replaced"}, up.changed()
        assert ("node-exporter", "teardown") in up.host_operations and ("node-exporter", "ensure") in up.host_operations
        said = [m for m in up.diagnostics() if "node-exporter: teardown skipped:" in m]
        assert len(said) == 1 and "owns this unit now (renamed or replaced)" in said[0], up.diagnostics()
        assert entries(bed.tree) == converged
        assert stack.preview().changed() == {}
    finally:
        bed.close()


def test_units_a_release_moved_keep_their_resources(project, sglang, tmp_path):
    """The boot-time device nodes became a kind of their own (the move of a download the bake-off's reference
    shares is the same alias, held by tests/test_program.py): a stack converged before keeps every unit, nothing
    runs on the host."""
    from sshhost import free_port

    bed = Bed.seed(tmp_path / "host")
    program = project.root / "__main__.py"
    try:
        values = bed.services_values(sglang.port, free_port())
        shutil.copy(program, project.root / "today.py")
        shutil.copy(Path(__file__).with_name("former_program.py"), program)
        try:
            stack = Stack(project, "moved", "kpro5", values, bed.secrets())
            stack.up()
            before = unit_types(stack)
        finally:
            shutil.move(project.root / "today.py", program)
        converged = entries(bed.tree)
        assert before["nvidia-uvm-at-boot"].endswith(":LxcGpuPassthrough")
        up = stack.up()
        assert up.host_operations == [] and not [op for op in up.changed().values() if op != "same"], up.changed()
        after = unit_types(stack)
        assert set(after) == set(before) and after["nvidia-uvm-at-boot"].endswith(":NvidiaDeviceNodes")
        assert entries(bed.tree) == converged
    finally:
        bed.close()
