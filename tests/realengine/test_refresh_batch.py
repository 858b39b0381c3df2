"""A refresh through the real engine reads each host in one SSH command (gpuhosts/probe_batch.py), and stores for
every unit what its probe alone stores: on a converged host and on one changed by hand."""

from __future__ import annotations

import json
import re

import pytest

from realengine import Stack
from sshhost.bed import Bed
from sshhost.fleet import Fleet

pytestmark = pytest.mark.pulumi
COUNTERS = re.compile(r"^gpuhosts-provider: ssh_commands=(\d+) cpu_s=([\d.]+)$")
SWITCH = "GPUHOSTS_REFRESH_BATCH"


def refreshed(stack: Stack, batch: bool) -> tuple[list[str], dict[str, dict]]:
    """`pulumi refresh`: the provider's log lines of the run, and each unit's facts and observations after it."""
    log = stack.project.provider_log
    offset = log.stat().st_size if log.exists() else 0
    stack.project.env[SWITCH] = "1" if batch else "0"
    try:
        stack.refresh()
    finally:
        stack.project.env.pop(SWITCH)
    with log.open(encoding="utf-8") as lines:
        lines.seek(offset)
        read = lines.read().splitlines()
    units = {name: {"facts": entry["outputs"].get("facts"), "observed": entry["outputs"].get("observed")}
             for name, entry in stack.resources().items() if entry["type"].startswith("pulumi-python:dynamic/")}
    return read, units


def commands_sent(lines: list[str]) -> int:
    return max(int(m[1]) for m in map(COUNTERS.match, lines) if m)


def test_a_refresh_reads_the_host_in_one_command_and_stores_what_each_probe_alone_stores(project, tmp_path):
    bed = Bed.seed(tmp_path / "host")
    try:
        stack = Stack(project, "batch", "kpro5", bed.values(), bed.secrets())
        stack.up()
        units = [name for name, entry in stack.resources().items()
                 if entry["type"].startswith("pulumi-python:dynamic/")]

        lines, together = refreshed(stack, batch=True)
        assert commands_sent(lines) == 1, [line for line in lines if "gpuhosts-batch" in line]
        batched = [line for line in lines if line.startswith("gpuhosts-unit: ") and line.endswith(" batched")]
        assert len(batched) == len(units), lines
        _, apart = refreshed(stack, batch=False)
        assert together == apart
        assert stack.preview().changed() == {}

        # A host changed by hand: the A6000s' passthrough taken out of CT 129's config, a module option dropped.
        config = bed.tree / "etc/pve/lxc/129.conf"
        config.write_text("".join(line for line in config.read_text().splitlines(keepends=True)
                                  if not line.startswith("dev")))
        lines, together = refreshed(stack, batch=True)
        assert commands_sent(lines) == 1
        _, apart = refreshed(stack, batch=False)
        assert together == apart
        drifted = {name for name, (op, _) in stack.preview().changed().items()}
        assert drifted and all(name.startswith("ct129") for name in drifted), drifted
    finally:
        bed.close()


def test_a_refresh_of_two_hosts_sends_one_command_to_each(project, tmp_path):
    fleet = Fleet.seed(tmp_path / "fleet", 2)
    try:
        stack = Stack(project, "batch-fleet", "kpro5", fleet.values(migrated=False), fleet.secrets())
        stack.up()
        lines, _ = refreshed(stack, batch=True)
        assert commands_sent(lines) == 2
        batches = sorted(line.split()[1] for line in lines if line.startswith("gpuhosts-batch: "))
        assert batches == sorted(f"{host.ssh.user}@{host.ssh.host}:{host.ssh.port}" for host in fleet.hosts), lines
        assert stack.preview().changed() == {}
    finally:
        fleet.close()


def test_a_config_edited_in_the_state_runs_none_of_the_probes_it_plans(project, tmp_path):
    """Whoever may write the state could change the config a refresh plans its one command from: the host holds the
    attestation of the probes its last `up` planned, so the edited plan runs nothing and each unit is read alone,
    from its signed probe."""
    bed = Bed.seed(tmp_path / "host")
    try:
        stack = Stack(project, "batch-edited", "kpro5", bed.values(), bed.secrets())
        stack.up()
        _, before = refreshed(stack, batch=True)
        document = stack.export()
        (provider,) = [r for r in document["deployment"]["resources"] if r["type"] == "pulumi:providers:pulumi-python"]
        provider["inputs"]["gpuhosts:monitoring"] = json.dumps({"filesDir": "/srv/elsewhere"})
        edited = tmp_path / "edited.json"
        edited.write_text(json.dumps(document))
        stack.pulumi("stack", "import", "--file", str(edited))
        lines, after = refreshed(stack, batch=True)
        assert [line for line in lines if "not attested" in line or "no attestation" in line], lines
        assert not [line for line in lines if line.endswith(" batched")]
        assert after == before
        assert not (bed.tree / "srv/elsewhere").exists()
    finally:
        bed.close()

