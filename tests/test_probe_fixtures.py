"""The host units' probes as they ran read-only on a real NVIDIA machine (tests/fixtures/facts/*/probes), checked
against the kernel's files captured in the same run, and the current probes run over that machine's captured tree."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from gpuhosts.plans.proxmox_host import plan_host
from conftest import FIXTURES, KPRO5_SECRETS, kpro5_values
from gpuhosts.stacks import validate_stack
from gpuhosts.protocol import parse_facts

CAPTURES = sorted(p for p in (FIXTURES / "facts").glob("*/probes") if p.is_dir())


def raw_sections(capture: Path) -> dict[str, str]:
    sections, name = {}, None
    for line in (capture / "raw.txt").read_text().splitlines():
        if line.startswith("== "):
            name = line[3:]
            sections[name] = ""
        elif name is not None:
            sections[name] += line + "\n"
    return sections


def machine(capture: Path) -> dict:
    raw = raw_sections(capture)
    version_line = raw["/proc/driver/nvidia/version"].splitlines()[0]
    majors = {parts[1]: parts[0] for parts in (line.split() for line in raw["/proc/devices"].splitlines())
              if len(parts) == 2 and parts[0].isdigit()}
    return {
        "address": raw["address"].strip(),
        "version": re.search(r"\d{3}\.\d{2,3}(\.\d{2,3})?", version_line).group(0),
        "type": "open" if "Open Kernel Module" in version_line else "proprietary",
        "minor": re.search(r"^Device Minor:\s*(\d+)", raw["information"], re.M).group(1),
        "uvm": majors["nvidia-uvm"], "caps": majors["nvidia-caps"],
    }


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.parent.name)
def test_the_probes_reported_the_machine_as_its_kernel_describes_it(capture):
    want = machine(capture)
    driver = parse_facts((capture / "nvidia-driver.txt").read_text())
    assert driver["loaded module"] == want["version"] and driver["loaded module type"] == want["type"]
    devices = parse_facts((capture / "ct129-gpu-devices.txt").read_text())
    assert devices[f"observed: minor of {want['address']}"] == want["minor"]
    assert devices["observed: major of nvidia-uvm"] == want["uvm"]
    assert devices["observed: major of nvidia-caps"] == want["caps"]
    assert parse_facts((capture / "ct129-nvidia-userspace.txt").read_text())["host module"] == want["version"]
    uvm = parse_facts((capture / "nvidia-uvm-at-boot.txt").read_text())
    assert uvm["node /dev/nvidia-uvm"] == "present"
    assert (capture / "readonly-diff.txt").read_text() == "", "a probe changed the machine"


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.parent.name)
def test_todays_probes_over_the_captured_tree_agree_with_the_machine(capture, tmp_path):
    want = machine(capture)
    values = kpro5_values()
    values.pop("services")
    values.pop("benchmarks", None)  # a benchmark compares services: none without them
    values["gpus"] = [{"address": want["address"], "model": "H200", "use": "container", "container": 129}]
    graph = plan_host(validate_stack(values, KPRO5_SECRETS))
    env = {**os.environ, "GPUHOSTS_HOST_ROOT": str(capture.parent / "tree"), "PATH": f"{tmp_path}:/usr/bin:/bin"}
    for key in ("nvidia-driver", "ct129-gpu-devices"):
        result = subprocess.run(["bash", "-c", graph[key].probe], capture_output=True, text=True, env=env, timeout=60)
        assert result.returncode == 0, result.stderr
        facts = parse_facts(result.stdout)
        captured = parse_facts((capture / f"{key}.txt").read_text())
        machine_derived = [name for name in captured if name.startswith(("loaded module", "observed: "))]
        assert machine_derived and {n: facts[n] for n in machine_derived} == {n: captured[n] for n in machine_derived}
