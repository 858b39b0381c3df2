"""The committed stacks as what their Prometheus watches (gpuhosts.observability.Watch), and the real tools that
check it: Debian's prometheus package's promtool and prometheus, prometheus-alertmanager (`make system-deps`)."""

from __future__ import annotations

import shutil

import pytest

from conftest import KPRO5_SECRETS, kpro5_values, trainer_values
from gpuhosts.observability import Watch, watch_proxmox, watch_trainer
from gpuhosts.stacks import validate_stack
from gpuhosts.training import NodeConfig, TrainerStack, TrainingConfig


def kpro5_watch(engine: str = "sglang") -> Watch:
    """kpro5 as committed (SGLang enabled), or with vLLM enabled instead, as its stack file says to compare them."""
    values = kpro5_values()
    for service in values["services"]:
        service["enabled"] = service["engine"]["name"] == engine
    return watch_proxmox(validate_stack(values, KPRO5_SECRETS), values["host"]["name"])


def trainer_watch() -> Watch:
    # The watch reads the node and the training's servers only: the typed sections are enough, whatever the data
    # set's checks across sections say.
    values = trainer_values()
    return watch_trainer(TrainerStack(NodeConfig.model_validate(values["node"]),
                                      TrainingConfig.model_validate(values["training"])))


WATCHES = {"kpro5-sglang": lambda: kpro5_watch("sglang"), "kpro5-vllm": lambda: kpro5_watch("vllm"),
           "trainer": trainer_watch}


def tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")
    if found is None:
        pytest.fail(f"{name} is not installed: `make system-deps` installs Debian's prometheus and "
                    "prometheus-alertmanager packages")
    return found
