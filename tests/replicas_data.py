"""kpro5 with its SGLang service as two replicas (one RTX A6000 each, TP 1) behind a gateway: the stack the
replica, gateway and rollout tests plan, and whose gateway command line tests/verify_gateway checks."""

from __future__ import annotations

from conftest import KPRO5_SECRETS, kpro5_values
from gpuhosts.config import StackConfig
from gpuhosts.stacks import validate_stack

GATEWAY = {"port": 8080, "bind": "0.0.0.0", "policy": "round_robin",
           "health": {"intervalS": 2, "timeoutS": 2, "failureThreshold": 2, "successThreshold": 1}}


def replica_values(mutate=None) -> dict:
    values = kpro5_values()
    service = values["services"][0]
    values["services"] = [service]
    service.pop("gpus")
    service["tensorParallelSize"] = 1
    service["replicas"] = [{"gpus": ["0000:41:00.0"]}, {"gpus": ["0000:61:00.0"], "port": 30001}]
    service["gateway"] = dict(GATEWAY)
    if mutate is not None:
        mutate(values)
    return values


def replica_stack(mutate=None) -> StackConfig:
    return validate_stack(replica_values(mutate), KPRO5_SECRETS)
