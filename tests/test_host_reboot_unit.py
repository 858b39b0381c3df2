"""HostReboot converged on the simulated host: a unit that left the reboot marker gets the host rebooted, once.

The ensure schedules the reboot with systemd-run and reports the boot id it leaves (the provider then waits for
another: gpuhosts/provider.py); the timer is fired at a point the test chooses, not after its delay.
"""

from __future__ import annotations

import subprocess

import pytest

from conftest import KPRO5_SECRETS, kpro5_values
from fakehost import host_env, systemd
from fakehost.tree import seed_kpro5
from gpuhosts.plans.proxmox_host import plan_host
from gpuhosts.protocol import parse_facts, parse_result
from gpuhosts.stacks import validate_stack

MARKER = "run/gpuhosts/reboot-required"


def reboot_unit():
    values = kpro5_values()
    values["host"]["allowReboot"] = True
    (unit,) = [u for u in plan_host(validate_stack(values, KPRO5_SECRETS)) if u.kind == "HostReboot"]
    return unit


def run(tree, script: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=host_env(tree), timeout=120)


def boot_id(tree) -> str:
    return (tree / "proc/sys/kernel/random/boot_id").read_text().strip()


@pytest.fixture
def host(tmp_path):
    return seed_kpro5(tmp_path / "kpro5")


def test_a_pending_reboot_is_drift_the_ensure_reboots_once_and_the_probe_is_then_clean(host):
    unit = reboot_unit()
    (host / MARKER).parent.mkdir(parents=True, exist_ok=True)
    (host / MARKER).write_text("vfio-binding\n")
    before = boot_id(host)

    probe = run(host, unit.probe)
    assert probe.returncode == 0, probe.stderr
    assert parse_facts(probe.stdout)["reboot pending"] == "yes" != unit.desired["reboot pending"]

    ensure = run(host, unit.ensure)
    assert ensure.returncode == 0, ensure.stderr
    result = parse_result(ensure.stdout)
    assert result.changed and result.report == {"awaitReboot": {"bootId": before}}
    # Scheduled, not done: the command returned before the host went down.
    assert boot_id(host) == before and len(systemd.pending_timers(host)) == 1

    assert systemd.fire_timers(host) == ["systemctl reboot"]
    assert boot_id(host) != before and not (host / MARKER).exists()
    after = run(host, unit.probe)
    assert parse_facts(after.stdout) == unit.desired
    again = run(host, unit.ensure)
    assert again.returncode == 0 and not parse_result(again.stdout).changed
    assert systemd.pending_timers(host) == []


def test_without_the_marker_the_ensure_changes_nothing(host):
    unit = reboot_unit()
    before = boot_id(host)
    ensure = run(host, unit.ensure)
    assert ensure.returncode == 0, ensure.stderr
    assert not parse_result(ensure.stdout).changed and parse_result(ensure.stdout).report in (None, {})
    assert boot_id(host) == before and systemd.pending_timers(host) == []
