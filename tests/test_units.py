"""`systemd-analyze verify` on every systemd unit the stacks install, in a scratch root.

The scratch root carries the system's own unit files (targets named in [Install]/Before=) and an executable
stand-in at every absolute path a unit runs, since those binaries come with the NVIDIA driver on the host.
"""

from __future__ import annotations


import pytest

from conftest import KPRO5_SECRETS, TRAINER_SECRETS, kpro5_values, trainer_values
from gpuhosts.plans.proxmox_host import plan_host
from gpuhosts.plans.training_node import plan_training_node
from gpuhosts.stacks import validate_stack
from gpuhosts.stacks import validate_trainer_stack
from systemd_scratch import place, verify



def units():
    units = [*plan_host(validate_stack(kpro5_values(), KPRO5_SECRETS)),
             *plan_training_node(validate_trainer_stack(trainer_values(), TRAINER_SECRETS)).graph]
    files = [f for unit in units for f in unit.files]
    return [pytest.param(f, id=f.path) for f in files if f.path.endswith(".service")]








@pytest.mark.parametrize("unit", units())
def test_unit_verifies_clean(unit, scratch_root):
    result = verify(scratch_root, place(scratch_root, unit.path, unit.content))
    assert result.returncode == 0 and result.stderr == "", result.stderr


def test_verify_catches_a_broken_unit(scratch_root):
    """The check above can fail: a misspelt key is reported."""
    broken = place(scratch_root, "/etc/systemd/system/broken.service", "[Service]\nTyp=oneshot\nExecStart=/usr/bin/x\n")
    assert "Unknown key 'Typ'" in verify(scratch_root, broken).stderr
