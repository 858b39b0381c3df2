"""kpro5 on each Proxmox VE release it may run (tests/fakehost/tree.py PROFILES, gpuhosts/compat-rules.yaml
`hosts`): Proxmox VE 9.1 on Debian 13 with kernel 6.17 and pve-container 6.1, and Proxmox VE 8.3 on Debian 12.
The stack names the release (host.proxmoxRelease); the plan checks the driver against its kernels and the
driver's ensure against what `pveversion` says."""

from __future__ import annotations

import pytest

from conftest import KPRO5_SECRETS
from fakehost.installer import make_fake_run
from fakehost.tree import PROFILES, profile_seed, seed_kpro5
from gpuhosts.config import ConfigError
from gpuhosts.protocol import parse_result
from gpuhosts.stacks import validate_stack
from simhost import A6000, RTX3090_FUNCTIONS, VERSION, Host


def profile_host(tmp_path, name: str) -> Host:
    tree = seed_kpro5(tmp_path / "kpro5", **profile_seed(name))
    run_file = tmp_path / f"NVIDIA-Linux-x86_64-{VERSION}.run"
    return Host(tree, run_file, make_fake_run(run_file, VERSION), PROFILES[name]["release"])


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_kpro5_converges_on_each_release_and_destroy_restores_it(tmp_path, profile):
    host = profile_host(tmp_path, profile)
    start = host.digest()
    outputs = host.up()
    assert f"pre-flight: Proxmox VE {PROFILES[profile]['pve_version']} (pveversion)" in outputs["nvidia-driver"]
    for function in RTX3090_FUNCTIONS:
        assert host.driver(function) == "vfio-pci", function
    for address in A6000:
        assert host.driver(address) == "nvidia", address
    smi = host.smi_in_container()
    assert smi.returncode == 0 and VERSION in smi.stdout, smi.stderr
    # The exporters run on loopback; the packages' own units stay masked, their programs installed.
    for ours, theirs, program in (
            ("gpuhosts-node-exporter.service", "prometheus-node-exporter.service", "/usr/bin/prometheus-node-exporter"),
            ("gpuhosts-dcgm-exporter.service", "nvidia-dcgm-exporter.service", "/usr/bin/dcgm-exporter")):
        states = host.run(f"systemctl is-active {ours}; systemctl is-enabled {theirs}; "
                          f"systemctl is-active {theirs}; test -x \"$GPUHOSTS_HOST_ROOT{program}\" && echo program")
        assert states.stdout.split() == ["active", "masked", "inactive", "program"], (ours, states)
    assert "--web.listen-address=127.0.0.1:9100" in host.text("/etc/systemd/system/gpuhosts-node-exporter.service")
    rules = host.text("/etc/gpuhosts/monitoring/prometheus/rules/gpuhosts-kpro5.rules.yml")
    assert "GpuhostsGpuXid" in rules and "GpuhostsNodeExporterDown" in rules
    for unit in host.units():
        assert host.probe(unit) == unit.desired, unit.key
    (driver,) = [u for u in host.units() if u.key == "nvidia-driver"]
    assert driver.desired["Proxmox VE release"] == PROFILES[profile]["release"]
    converged = host.digest()
    assert not any(parse_result(out).changed for out in host.up().values())
    assert host.digest() == converged
    host.destroy()
    assert host.digest() == start


def test_a_host_that_runs_another_release_than_the_stack_says_is_refused_before_the_driver(tmp_path):
    host = profile_host(tmp_path, "pve8.3-bookworm")
    host.proxmox_release = "9.1"
    (driver,) = [u for u in host.units() if u.key == "nvidia-driver"]
    before = host.digest()
    result = host.run(driver.ensure)
    assert result.returncode != 0
    assert ("refused: the host runs Proxmox VE 8.3.0 (pveversion), the stack says 9.1 (host.proxmoxRelease)"
            in result.stderr), result.stderr
    assert host.digest() == before
    assert host.probe(driver)["Proxmox VE release"] == "8.3"


@pytest.mark.parametrize("release, driver, refused", [
    ("9.1", "550.163.01", "550.163.01 does not build on the 6.17 kernels of Proxmox VE 9.1"),
    ("9.1", "555.58.02", "555.58.02 does not build on the 6.17 kernels of Proxmox VE 9.1"),
    ("8.3", "550.163.01", None),
    ("9.1", "580.126.09", None),
])
def test_the_plan_refuses_a_driver_that_does_not_build_on_the_releases_kernels(tmp_path, release, driver, refused):
    host = profile_host(tmp_path, "pve9.1-trixie")
    values = host.values()
    values["host"]["proxmoxRelease"] = release
    values["nvidia"]["version"] = driver
    if refused is None:
        validate_stack(values, KPRO5_SECRETS)
        return
    with pytest.raises(ConfigError) as caught:
        validate_stack(values, KPRO5_SECRETS)
    problem = next(p for p in caught.value.problems if p.path == "gpuhosts:nvidia.version")
    assert problem.message.startswith(refused) and "open-gpu-kernel-modules/issues/1143" in problem.message


def test_a_release_gpuhosts_has_not_checked_is_refused_naming_the_known_ones(tmp_path):
    values = profile_host(tmp_path, "pve9.1-trixie").values()
    values["host"]["proxmoxRelease"] = "9.2"
    with pytest.raises(ConfigError) as caught:
        validate_stack(values, KPRO5_SECRETS)
    assert "gpuhosts:host.proxmoxRelease: Proxmox VE 9.2 is not in gpuhosts/compat-rules.yaml hosts (known: 8.3, " \
           "9.1)" in str(caught.value)
