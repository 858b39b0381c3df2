"""A gpuhosts:kind left over from another stack is the one error, named on gpuhosts:kind with the kind the file's
sections are, instead of the other kind's sections each reported unknown and this kind's required ones missing."""

from __future__ import annotations

import pytest

from conftest import KPRO5_SECRETS, TRAINER_SECRETS, kpro5_values, trainer_values
from gpuhosts.config import ConfigError
from gpuhosts.stacks import validate_stack, validate_trainer_stack

CASES = [
    ("a trainer file saying proxmox", trainer_values, "proxmox", validate_stack, TRAINER_SECRETS,
     "is proxmox, but the file's sections (node, training) are a training node's: set gpuhosts:kind: trainer"),
    ("a kpro5 file saying trainer", kpro5_values, "trainer", validate_trainer_stack, KPRO5_SECRETS,
     "is trainer, but the file's sections (host, nvidia, gpus, containers, services) are a Proxmox host's: "
     "set gpuhosts:kind: proxmox"),
]


@pytest.mark.parametrize("case,values,kind,validate,secrets,message", CASES, ids=[c[0] for c in CASES])
def test_a_kind_another_kinds_sections_contradict_is_the_one_error(case, values, kind, validate, secrets, message):
    raw = values()
    raw["kind"] = kind
    with pytest.raises(ConfigError) as caught:
        validate(raw, set(secrets))
    assert [(p.path, p.message) for p in caught.value.problems] == [("gpuhosts:kind", message)]


def test_a_file_with_sections_of_both_kinds_is_checked_as_its_kind_says():
    raw = kpro5_values()
    raw["training"] = trainer_values()["training"]
    with pytest.raises(ConfigError) as caught:
        validate_stack(raw, set(KPRO5_SECRETS))
    assert [p.path for p in caught.value.problems] == ["gpuhosts:training"]
