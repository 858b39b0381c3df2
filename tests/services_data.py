"""The kpro5 stack's services (stacks/Pulumi.kpro5.yaml) as data, validated against the rest of that stack."""

from __future__ import annotations

import copy

from conftest import KPRO5_SECRETS, kpro5_values
from gpuhosts.config import StackConfig
from gpuhosts.stacks import validate_stack
from gpuhosts.services import ServiceConfig, validate_services


def example() -> tuple[list[dict], set[str]]:
    return copy.deepcopy(kpro5_values()["services"]), set(KPRO5_SECRETS)


def kpro5_stack() -> StackConfig:
    return validate_stack(kpro5_values(), KPRO5_SECRETS)


def kpro5_services(mutate=None) -> tuple[ServiceConfig, ...]:
    raw, secure = example()
    if mutate is not None:
        mutate(raw)
    return validate_services(raw, kpro5_stack(), secure)


HF_TOKEN = "hf_ServiceTestToken5f9d2c"


API_KEY = "sk-service-test-key-81b3e7"


SECRETS = {"hfToken": HF_TOKEN, "llmApiKey": API_KEY}
