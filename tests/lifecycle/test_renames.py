"""Renaming the host, renaming or re-nesting a component, or replacing a unit leaves the host as it is.

Without the ownership record (templates/common/run.sh.j2) the old resources' teardowns, which the engine runs
after the new resources are created, would uninstall the driver and hand the A6000s back to vfio-pci.
"""

from __future__ import annotations

import pytest

from lifecycle.renames import RENAMES
from sshhost.bed import Bed, names


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
        before = bed.digest()
        program = rename.program(bed)
        ops = bed.up(program=program, replace=list(rename.replace))
        deleted = [op for op in ops if op.operation == "delete"]
        if rename.name != "host renamed":
            assert deleted and all(op.changed is False for op in deleted), [(op.name, op.changed) for op in deleted]
        assert all(op.changed is False for op in ops if op.operation in ("create", "update")), \
            [(op.name, op.operation, op.changed) for op in ops]
        assert bed.digest() == before, "the host changed"
        assert bed.problems() == []
        assert bed.preview(program=program).changed() == {}
        # The new resources own the units now: destroying them still restores the host's start.
        gone = [op for op in bed.destroy() if op.operation == "delete"]
        assert {op.name for op in gone if op.changed} >= {"vfio-binding", "nvidia-driver"}
        assert bed.driver("0000:41:00.0") == "vfio-pci" and not (bed.tree / "sys/module/nvidia").exists()
    finally:
        bed.close()
