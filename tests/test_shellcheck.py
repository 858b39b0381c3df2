"""Every script the stacks render passes `bash -n` and shellcheck, for both boot loaders."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import KPRO5_SECRETS, PROJECT, kpro5_values
from components.proxmox_host import plan_host
from gpuhosts.config import validate_stack


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


def inner_scripts(text: str) -> list[str]:
    """Scripts a command runs inside a container: shellcheck does not read into a quoted here-document."""
    return [part.split("\nGPUHOSTS_INNER\n", 1)[0] for part in text.split("<<'GPUHOSTS_INNER'\n")[1:]]


def scripts():
    found = []
    for variant, values in variants().items():
        for step in plan_host(validate_stack(values, KPRO5_SECRETS)).steps:
            found.append(pytest.param(step.create, "bash", id=f"{variant}/{step.name}/create"))
            found.append(pytest.param(step.delete, "bash", id=f"{variant}/{step.name}/delete"))
            for operation in ("create", "delete"):
                for inner in inner_scripts(getattr(step, operation)):
                    found.append(pytest.param(inner, "bash", id=f"{variant}/{step.name}/{operation}-in-container"))
            for file in step.files:
                if file.content.startswith("#!/bin/sh"):
                    found.append(pytest.param(file.content, "sh", id=f"{variant}{file.path}"))
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
