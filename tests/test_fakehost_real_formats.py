"""The simulated host prints what a real NVIDIA machine prints: the shapes of /proc/driver/nvidia/*, /proc/devices,
nvidia-smi's queries and the tools' failures are checked against captures of an H200 with driver 580.159.04
(tests/fixtures/facts/h200-open-580.159.04, tests/fixtures/facts/h200-tool-failures). Values differ by design (other
GPUs, other minors); the layout that the scripts parse may not."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from conftest import FIXTURES
from fakehost import host_env

H200 = FIXTURES / "facts" / "h200-open-580.159.04"
FAILURES = json.loads((FIXTURES / "facts" / "h200-tool-failures" / "commands.json").read_text())
A6000 = "0000:41:00.0"


def separators(text: str) -> list[tuple[str, str]]:
    """(key, what stands between the colon and the value) per `Key: value` line."""
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^([^:\n]+):([ \t]*)", text, re.M)]


def field_shape(value: str) -> str:
    """The kind of one CSV field, so that a 3090's row and an H200's row compare."""
    for shape, pattern in (("bus id", r"[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]"),
                           ("version", r"\d{3}\.\d{2,3}(\.\d{2,3})?"), ("uuid", r"GPU-[0-9a-f-]{36}"),
                           ("MiB", r"\d+ MiB"), ("percent", r"\d+ %"), ("state", r"Enabled|Disabled"),
                           ("number", r"\d+"), ("name", r"NVIDIA [\w -]+"), ("header", r"[a-z_.]+( \[.+\])?")):
        if re.fullmatch(pattern, value):
            return shape
    return f"other: {value!r}"


def csv_shape(text: str) -> list[list[str]]:
    return [[field_shape(v) for v in line.split(", ")] for line in text.splitlines() if line]


def smi(host, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["nvidia-smi", *argv], capture_output=True, text=True, env=host_env(host.tree), timeout=60)


def test_the_information_file_has_the_real_keys_in_the_real_order_and_spacing(converged):
    real = (H200 / "tree/proc/driver/nvidia/gpus/0000:00:06.0/information").read_text()
    simulated = (converged.tree / "proc/driver/nvidia/gpus" / A6000 / "information").read_text()
    assert separators(simulated) == separators(real)


def test_the_version_file_words_the_open_module_as_the_real_one_does(converged):
    real = (H200 / "tree/proc/driver/nvidia/version").read_text().splitlines()[0]
    simulated = (converged.tree / "proc/driver/nvidia/version").read_text().splitlines()[0]
    shape = r"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  \d{3}\.\d{2,3}\.\d{2,3}  Release Build  \(.*"
    assert re.fullmatch(shape, real), real
    assert re.fullmatch(shape, simulated), simulated


def test_proc_devices_has_the_real_layout(converged):
    def layout(text: str) -> list[str]:
        return ["header" if line.endswith("devices:") else "blank" if not line else
                "entry" if re.fullmatch(r" {0,2}\d{1,3} \S.*", line) else f"other: {line!r}"
                for line in text.splitlines()]
    real, simulated = (H200 / "tree/proc/devices").read_text(), (converged.tree / "proc/devices").read_text()
    assert set(layout(simulated)) == set(layout(real)) == {"header", "blank", "entry"}
    for name in ("nvidia", "nvidiactl", "nvidia-uvm", "nvidia-caps"):
        assert re.search(rf"^ {{0,2}}\d+ {name}$", real, re.M) and re.search(rf"^ {{0,2}}\d+ {name}$", simulated, re.M)


@pytest.mark.parametrize("capture, argv", [
    ("query-gpu-busid-driver.csv", ["--query-gpu=pci.bus_id,driver_version", "--format=csv,noheader"]),
    ("query-gpu-driver-version.csv", ["--query-gpu=driver_version", "--format=csv,noheader"]),
    ("query-gpu-preflight.csv", ["--query-gpu=index,name,driver_version", "--format=csv,noheader"]),
    ("query-gpu-full.csv", ["--query-gpu=index,pci.bus_id,name,uuid,driver_version,persistence_mode,memory.total",
                            "--format=csv,noheader"]),
])
def test_nvidia_smi_queries_have_the_real_columns(converged, capture, argv):
    real = csv_shape((H200 / "nvidia-smi" / capture).read_text())
    result = smi(converged, *argv)
    assert result.returncode == 0, result.stderr
    simulated = csv_shape(result.stdout)
    assert simulated and all(row == real[0] for row in simulated), (simulated, real)


@pytest.mark.parametrize("case, argv", [
    ("smi-i-missing", ["-i", "0000:99:00.0", "--query-gpu=persistence_mode", "--format=csv,noheader"]),
    ("smi-bad-field", ["--query-compute-apps=gpu_bus_id,nope", "--format=csv,noheader"]),
    ("smi-apps", ["--query-compute-apps=gpu_bus_id,pid", "--format=csv,noheader"]),
])
def test_nvidia_smi_fails_as_the_real_one_does(converged, case, argv):
    real = FAILURES[case]
    result = smi(converged, *argv)
    assert (result.returncode, result.stdout, result.stderr) == (real["rc"], real["stdout"], real["stderr"])


@pytest.mark.parametrize("case, argv", [
    ("fuser-missing", ["-s", "/dev/nvidia-does-not-exist"]),
    ("fuser-v-missing", ["-v", "/dev/nvidia-does-not-exist"]),
    ("fuser-idle", ["-s", "/dev/nvidiactl"]),
    ("fuser-v-idle", ["-v", "/dev/nvidiactl"]),
])
def test_fuser_answers_as_psmisc_does(converged, case, argv):
    real = FAILURES[case]
    # The simulated fuser reads paths under the host root, as the scripts pass them.
    argv = [a if not a.startswith("/") else str(converged.tree) + a for a in argv]
    if case.endswith("idle"):
        subprocess.run(["systemctl", "stop", "gpuhosts-nvidia-persistenced.service"], env=host_env(converged.tree),
                       capture_output=True)
    result = subprocess.run(["fuser", *argv], capture_output=True, text=True, env=host_env(converged.tree))
    stderr = result.stderr.replace(str(converged.tree), "")
    assert (result.returncode, result.stdout, stderr) == (real["rc"], real["stdout"], real["stderr"])
