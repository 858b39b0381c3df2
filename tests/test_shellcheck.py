"""Every script the stacks render passes `bash -n` and shellcheck, for both boot loaders."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import PROJECT, kpro5_values
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
    return {"kpro5": systemd_boot, "kpro5-grub-reboot": grub, "kpro5-host-gpu": host_gpu}


def scripts():
    found = []
    for variant, values in variants().items():
        for step in plan_host(validate_stack(values)).steps:
            found.append(pytest.param(step.create, "bash", id=f"{variant}/{step.name}/create"))
            found.append(pytest.param(step.delete, "bash", id=f"{variant}/{step.name}/delete"))
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
