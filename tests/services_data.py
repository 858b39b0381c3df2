"""The kpro5 services example (stacks/examples/kpro5-services.yaml) as data, validated against the kpro5 stack."""

from __future__ import annotations

import copy

from conftest import PROJECT, kpro5_values
from gpuhosts.config import StackConfig, validate_stack
from gpuhosts.plan import read_stack_file
from gpuhosts.services import ServiceConfig, validate_services

EXAMPLE = PROJECT / "stacks" / "examples" / "kpro5-services.yaml"


def example() -> tuple[list[dict], set[str]]:
    values, secure = read_stack_file(EXAMPLE)
    return copy.deepcopy(values["services"]), secure


def kpro5_stack() -> StackConfig:
    return validate_stack(kpro5_values())


def kpro5_services(mutate=None) -> tuple[ServiceConfig, ...]:
    raw, secure = example()
    if mutate is not None:
        mutate(raw)
    return validate_services(raw, kpro5_stack(), secure)
