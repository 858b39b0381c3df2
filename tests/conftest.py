"""Shared fixtures: the kpro5 stack as data, and a copy of it to mutate."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from gpuhosts.plan import read_stack_file

PROJECT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


# What `pulumi config set --secret` gives kpro5 before its first `pulumi up`.
KPRO5_SECRETS = frozenset({"sshPrivateKey", "hfToken", "llmApiKey"})


def kpro5_values() -> dict:
    values, _secure = read_stack_file(PROJECT / "stacks" / "Pulumi.kpro5.yaml")
    return copy.deepcopy(values)


# What `pulumi config set --secret` gives the training node.
TRAINER_SECRETS = frozenset({"sshPrivateKey", "hfToken"})


def trainer_values() -> dict:
    values, _secure = read_stack_file(PROJECT / "stacks" / "Pulumi.trainer.yaml")
    return copy.deepcopy(values)


@pytest.fixture
def trainer() -> dict:
    return trainer_values()


@pytest.fixture
def kpro5() -> dict:
    return kpro5_values()
