"""Renaming the host, renaming or re-nesting a component, or replacing a unit leaves the host as it is.

Without the ownership record (templates/common/run.sh.j2) the old resources' teardowns, which the engine runs
after the new resources are created, would uninstall the driver and hand the A6000s back to vfio-pci.
"""

from __future__ import annotations

import pytest

from fakehost.tree import OWNER_RECORDS, tree_listing, volatile
from lifecycle.renames import RENAMES, rewritten
from sshhost.bed import Bed


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    bed = Bed.seed(tmp_path_factory.mktemp("renames") / "template")
    bed.up()
    yield bed
    bed.close()


@pytest.mark.parametrize("rename", RENAMES, ids=lambda r: r.name)
def test_a_rename_or_replacement_leaves_the_host_as_it_is(template, tmp_path, rename):
    bed = Bed.copy_of(template, tmp_path / "bed")
    try:
        before = tree_listing(bed.tree, (*volatile(bed.tree), OWNER_RECORDS))
        moved = rewritten(bed.values(), rename.values(bed)) if rename.values else {}
        program = rename.program(bed)
        ops = bed.up(program=program, replace=list(rename.replace))
        deleted = [op for op in ops if op.operation == "delete"]
        if rename.values is None:
            assert deleted and all(op.changed is False for op in deleted), [(op.name, op.changed) for op in deleted]
        acted = {op.name for op in ops if op.operation in ("create", "update") and op.changed is not False}
        assert acted == set(moved), [(op.name, op.operation, op.changed) for op in ops]
        after = tree_listing(bed.tree, (*volatile(bed.tree), OWNER_RECORDS))
        changed_paths = {path for path in before.keys() | after.keys() if before.get(path) != after.get(path)}
        assert changed_paths <= set().union(*moved.values()), f"the host changed beyond {sorted(moved)}: " \
            f"{sorted(changed_paths)}"
        assert bool(changed_paths) == bool(moved), "the changed units wrote nothing"
        assert bed.problems() == []
        assert bed.preview(program=program).changed() == {}
        # The new resources own the units now: destroying them still restores the host's start.
        gone = [op for op in bed.destroy() if op.operation == "delete"]
        assert {op.name for op in gone if op.changed} >= {"vfio-binding", "nvidia-driver"}
        assert bed.driver("0000:41:00.0") == "vfio-pci" and not (bed.tree / "sys/module/nvidia").exists()
    finally:
        bed.close()
