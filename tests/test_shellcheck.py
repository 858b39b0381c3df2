"""Every script the stacks render — each unit's ensure, teardown and probe, what they run inside a container, the
scripts they install, and the deep check's probe of each download — passes `bash -n` and shellcheck, for both boot
loaders."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from conftest import KPRO5_SECRETS, TRAINER_SECRETS, kpro5_values, trainer_values
from fakehost.hub import REPOS, tree_entries
from gpuhosts.plans.model_download import deep_probe
from gpuhosts.plans.proxmox_host import plan_host
from gpuhosts.plans.training_node import plan_training_node
from gpuhosts.stacks import validate_stack
from gpuhosts.stacks import validate_trainer_stack
from embedded_scripts import inner_scripts


def variants():
    systemd_boot = kpro5_values()
    grub = kpro5_values()
    grub["host"]["bootloader"] = "grub"
    grub["host"]["allowReboot"] = True
    host_gpu = kpro5_values()
    host_gpu["gpus"][3].update(use="host")
    host_gpu["gpus"][3].pop("container")
    for service in host_gpu["services"]:
        service.update(gpus=["0000:41:00.0"], tensorParallelSize=1)
    store = kpro5_values()
    store["containers"][0]["modelStore"] = {"hostPath": "/tank/models"}
    for service in store["services"]:
        service["weightsOn"] = "host"
        service["model"]["deleteOnDestroy"] = True
    store["services"][1]["model"]["deleteOnDestroy"] = True
    return {"kpro5": systemd_boot, "kpro5-grub-reboot": grub, "kpro5-host-gpu": host_gpu, "kpro5-model-store": store}


SCRIPTS = ("ensure", "teardown", "probe")




def scripts():
    """Each distinct script once, named after the first variant that renders it: most units render the same text in
    every variant, and a second shellcheck of the same text can only repeat the first verdict."""
    found = []
    seen: set[tuple[str, str]] = set()

    def add(text: str, shell: str, name: str) -> None:
        if (text, shell) not in seen:
            seen.add((text, shell))
            found.append(pytest.param(text, shell, id=name))

    plans = {variant: plan_host(validate_stack(values, KPRO5_SECRETS)) for variant, values in variants().items()}
    trainer = trainer_values()
    plans["trainer"] = plan_training_node(validate_trainer_stack(trainer, TRAINER_SECRETS)).graph
    trainer["training"]["monitor"].update(bind="0.0.0.0", tokenSecret="monitorToken")
    trainer["training"]["dataset"]["deleteOnDestroy"] = True
    trainer["training"]["deleteCheckpointsOnDestroy"] = True
    plans["trainer-exposed"] = plan_training_node(validate_trainer_stack(trainer, TRAINER_SECRETS | {"monitorToken"})).graph
    for variant, graph in plans.items():
        for unit in graph:
            for operation in SCRIPTS:
                text = getattr(unit, operation)
                add(text, "bash", f"{variant}/{unit.key}/{operation}")
                for inner in inner_scripts(text):
                    add(inner, "bash", f"{variant}/{unit.key}/{operation}-in-container")
            if unit.hub is not None:
                # `gpuhosts check --deep`'s probe, over the simulated Hub's listing of the repository.
                text, _ = deep_probe(unit, tree_entries(REPOS[unit.hub.repo]()))
                add(text, "bash", f"{variant}/{unit.key}/deep-probe")
                for inner in inner_scripts(text):
                    add(inner, "bash", f"{variant}/{unit.key}/deep-probe-in-container")
            for file in unit.files:
                for shebang, shell in (("#!/bin/sh", "sh"), ("#!/bin/bash", "bash")):
                    if file.content.startswith(shebang + "\n"):
                        add(file.content, shell, f"{variant}{file.path}")
    return found


@pytest.mark.parametrize("text, shell", scripts())
def test_script_is_valid_and_shellcheck_clean(text, shell, tmp_path):
    script = tmp_path / "script.sh"
    script.write_text(text)
    syntax = subprocess.run([shell, "-n", str(script)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    assert shutil.which("shellcheck"), "shellcheck is missing: `make system-deps` installs it"
    lint = subprocess.run(["shellcheck", "--shell", shell, "--severity", "style", str(script)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout


def test_every_probe_and_its_inner_script_is_checked():
    """The table above reaches the probes, including the part a probe runs inside a container."""
    params = scripts()
    ids = [param.id for param in params]
    assert "kpro5/vfio-binding/probe" in ids and "trainer/preflight/probe" in ids
    assert len({param.values for param in params}) == len(params), "a script is checked twice"
    assert "kpro5/ct129-service-qwen-sglang/probe-in-container" in ids
    assert "kpro5-model-store/ct129-model-store/probe" in ids
