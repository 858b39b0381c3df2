"""The facts of a systemd unit gpuhosts installs (gpuhosts/facts.py `systemd_unit_facts`), read by the rendered
probe from `systemctl show` as systemd 252 printed it (tests/fixtures/systemd/show/, captured by its capture.sh).

Each row: a capture, the unit file it was captured from, the state the plan declares, and the facts whose observed
value differs from the declared one (with that value). Every other fact must read back exactly as declared: that is
what makes a converged unit show no drift, and a drop-in or a mask show as the field it changes.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from conftest import FIXTURES
from gpuhosts.facts import render_probe, systemd_unit_facts
from gpuhosts.protocol import parse_facts
from gpuhosts.render import HostFile

SHOW = FIXTURES / "systemd" / "show"
SGLANG = "gpuhosts-qwen-sglang.service"
SGLANG_DROPINS = f"/etc/systemd/system/{SGLANG}.d"
SGLANG_ENV = "CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0,1 HF_HUB_OFFLINE=1"
PERSISTENCED = "gpuhosts-nvidia-persistenced.service"

# (capture, unit file, (enabled, active) declared, {fact kind: observed value where it differs})
ROWS = [
    ("running", "gpuhosts-running.service", (True, True), {}),
    ("failing", "gpuhosts-failing.service", (True, True), {"systemd": "enabled failed"}),
    ("qwen-sglang-enabled", SGLANG, (True, True), {"systemd": "enabled inactive"}),
    ("qwen-sglang", SGLANG, (False, False), {}),
    ("qwen-vllm-dflash", "gpuhosts-qwen-vllm-dflash.service", (False, False), {}),
    ("nvidia-persistenced", PERSISTENCED, (False, False), {}),
    ("nvidia-uvm", "gpuhosts-nvidia-uvm.service", (False, False), {}),
    ("hidden-state-server", "gpuhosts-hidden-state-server.service", (False, False), {}),
    ("dflash-training", "gpuhosts-dflash-training.service", (False, False), {}),
    ("training-monitor", "gpuhosts-training-monitor.service", (False, False), {}),
    ("quoting", "gpuhosts-quoting.service", (True, True), {"systemd": "static inactive"}),
    ("qwen-sglang-dropin-execstart", SGLANG, (True, False), {
        "ExecStart": "{ path=/opt/gpuhosts/qwen-sglang/venv/bin/python ; argv[]=/opt/gpuhosts/qwen-sglang/venv/bin/python "
                     "/usr/local/lib/gpuhosts/sglang-serve.py --model-path /srv/models/other --port 30001 ; "
                     "ignore_errors=no }",
        "DropInPaths": f"{SGLANG_DROPINS}/override.conf"}),
    ("qwen-sglang-dropin-environment", SGLANG, (True, False), {
        "Environment": f"{SGLANG_ENV} SGLANG_DEBUG=1", "DropInPaths": f"{SGLANG_DROPINS}/override.conf"}),
    ("qwen-sglang-two-dropins", SGLANG, (True, False), {
        "Environment": f"{SGLANG_ENV} SGLANG_DEBUG=1", "User": "nobody",
        "DropInPaths": f"{SGLANG_DROPINS}/10-user.conf {SGLANG_DROPINS}/override.conf"}),
    ("qwen-sglang-masked", SGLANG, (True, True), {"systemd": "masked inactive", "ExecStart": "", "Environment": ""}),
    ("training-monitor-masked", "gpuhosts-training-monitor.service", (True, True),
     {"systemd": "masked inactive", "ExecStart": ""}),
    ("nvidia-persistenced-dropin", PERSISTENCED, (False, False), {
        "ExecStart": "{ path=/usr/bin/nvidia-persistenced ; argv[]=/usr/bin/nvidia-persistenced --no-persistence-mode ; "
                     "ignore_errors=no }",
        "DropInPaths": f"/etc/systemd/system/{PERSISTENCED}.d/override.conf"}),
    ("not-found", SGLANG, (True, True), {"systemd": "missing inactive", "ExecStart": "", "Environment": ""}),
]


def kind(fact_name: str) -> str:
    return fact_name.split(" ", 1)[0]


def probe_against(tmp_path, facts, shown: str) -> dict:
    """Run the rendered probe with a `systemctl` that prints `shown` for `show` and fails otherwise."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (tmp_path / "shown.txt").write_text(shown)
    systemctl = bin_dir / "systemctl"
    systemctl.write_text(f'#!/bin/sh\n[ "$1" = show ] || exit 1\ncat {tmp_path / "shown.txt"}\n')
    systemctl.chmod(0o755)
    script = tmp_path / "probe.sh"
    script.write_text(render_probe("fixture", facts))
    result = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "GPUHOSTS_HOST_ROOT": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    return parse_facts(result.stdout)


@pytest.mark.parametrize("capture, unit_name, state, differs", ROWS, ids=[row[0] for row in ROWS])
def test_the_facts_read_systemds_own_output(tmp_path, capture, unit_name, state, differs):
    unit_file = HostFile(f"/etc/systemd/system/{unit_name}", (SHOW / "units" / unit_name).read_text())
    facts = systemd_unit_facts(unit_file, enabled=state[0], active=state[1])
    observed = probe_against(tmp_path, facts, (SHOW / f"{capture}.txt").read_text())
    assert set(observed) == {fact.name for fact in facts}
    assert {kind(f.name) for f in facts} >= set(differs), "a row names a fact kind the unit does not have"
    for fact in facts:
        want = differs.get(kind(fact.name), fact.desired)
        assert observed[fact.name] == want, (fact.name, observed[fact.name], fact.desired)


def test_drop_ins_for_every_service_or_a_prefix_are_not_this_units(tmp_path):
    """systemd.unit(5) "drop-in": `service.d/` applies to every service and `gpuhosts-.service.d/` to every unit
    of that prefix; both appear in DropInPaths, but they are the host's policy, not a change to this unit."""
    shown = (SHOW / "qwen-sglang-dropin-environment.txt").read_text().replace(
        f"DropInPaths={SGLANG_DROPINS}/override.conf",
        "DropInPaths=/usr/lib/systemd/system/service.d/10-timeout-abort.conf "
        "/etc/systemd/system/gpuhosts-.service.d/50-limits.conf "
        f"/etc/systemd/system/gpuhosts-qwen-sglang.service.d.bak/x.conf {SGLANG_DROPINS}/override.conf")
    facts = systemd_unit_facts(HostFile(f"/etc/systemd/system/{SGLANG}", (SHOW / "units" / SGLANG).read_text()))
    assert probe_against(tmp_path, facts, shown)[f"DropInPaths of {SGLANG}"] == f"{SGLANG_DROPINS}/override.conf"


def test_one_show_per_unit_however_many_facts(tmp_path):
    facts = [*systemd_unit_facts(HostFile(f"/etc/systemd/system/{SGLANG}", (SHOW / "units" / SGLANG).read_text())),
             *systemd_unit_facts(HostFile(f"/etc/systemd/system/{PERSISTENCED}",
                                          (SHOW / "units" / PERSISTENCED).read_text()))]
    probe = render_probe("fixture", facts)
    assert probe.count("$(systemd_show ") == 2 and probe.count("systemd_show() {") == 1


@pytest.mark.parametrize("setting, refused", [
    ("ExecStart=vllm serve", "not an absolute path"),
    ("ExecStart=/bin/echo %n", "specifier '%n'"),
    ("Environment=JUSTAWORD", "is not NAME=VALUE"),
    ("ExecStart=/bin/echo 'unbalanced", "unbalanced"),
])
def test_a_setting_the_probe_could_not_predict_stops_the_plan(setting, refused):
    with pytest.raises(ValueError, match=refused):
        systemd_unit_facts(HostFile("/etc/systemd/system/x.service", f"[Service]\n{setting}\n"))
