"""Many hosts in one stack through the real Pulumi CLI, on simulated hosts over SSH.

A converged one-host kpro5 stack moves into `gpuhosts:hosts` beside a second host: every resource of kpro5 is the
same resource (its aliases), nothing of it runs but its refresh, and only the new host's units are created. Then
the second host stops answering while kpro5 has drifted: `pulumi up --continue-on-error` repairs kpro5, fails the
unit of the other that everything of it waits for, naming that host, and dials each host once per provider process.
How a one-host stack's units keep their resources on their own is tests/realengine/test_aliases.py's.
"""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from realengine import Preview, Run, Stack
from realengine.hosts import entries
from realengine.refresh_figures import fleet_values
from sshhost.bed import Bed

pytestmark = pytest.mark.pulumi

DIAL = re.compile(r"^gpuhosts-ssh: dial \S+@127\.0\.0\.1:(?P<port>\d+) attempt \d+$")
DRIFTED = "usr/local/lib/gpuhosts/vfio-override.sh"
NEW_HOST = "kpro5-1"


def in_state(stack: Stack) -> dict[str, dict]:
    """The stack's resources by name, without the stack itself and its provider."""
    return {name: entry for name, entry in stack.resources().items() if entry.get("parent")}


def unit_names(resources: dict[str, dict]) -> set[str]:
    return {name for name, entry in resources.items() if entry["type"].startswith("pulumi-python:dynamic")}


def operator_up(stack: Stack, *extra: str) -> tuple[Run, Preview]:
    """`pulumi up --yes` as an operator types it: a preview, then the update, each refreshing first in a provider
    process of its own. With `--json` the CLI prints the preview's document, then the update's event stream."""
    run = stack.pulumi("up", "--yes", "--json", *extra, check=False)
    document, _, events = run.stdout.partition('\n{"sequence":')
    planned = json.loads(document)
    return (dataclasses.replace(run, stdout='{"sequence":' + events),
            Preview(run, planned.get("steps", []), planned.get("diagnostics", [])))


def dials_per_port(run: Run) -> dict[int, int]:
    found: dict[int, int] = {}
    for match in filter(None, map(DIAL.match, run.provider_lines)):
        found[int(match["port"])] = found.get(int(match["port"]), 0) + 1
    return found


@pytest.fixture
def moved(project, tmp_path):
    """kpro5 converged as a one-host stack, and a second host seeded beside it that accepts the stack's key."""
    one = Bed.seed(tmp_path / "one")
    other = None
    try:
        other = Bed.seed(tmp_path / "other", one.run_file, one.sha256)
        public = " ".join(one.ssh.private_key.with_suffix(".pub").read_text().split()[:2])
        (other.ssh.workdir / "authorized_keys").write_text(public + "\n")
        stack = Stack(project, "fleet", "kpro5", one.values(), one.secrets())
        stack.up()
        yield one, other, stack
    finally:
        one.close()
        if other is not None:
            other.close()


def test_a_one_host_stack_moved_into_a_list_of_hosts_keeps_its_resources_and_a_down_host_fails_alone(moved):
    one, other, stack = moved
    one_host = in_state(stack)
    converged = entries(one.tree)
    values = fleet_values(one.values(), [one.ssh, other.ssh])
    values["hosts"][0]["migratedFromHost"] = True
    assert [host["name"] for host in values["hosts"]] == ["kpro5", NEW_HOST]
    stack.set_values(values)

    planned = stack.preview().changed()
    new = {name for name in planned if name.startswith(f"{NEW_HOST}/") or name == NEW_HOST}
    assert new and {name: op for name, (op, _) in planned.items()} == {name: "create" for name in new}, planned

    up = stack.up()
    assert up.changed() == {name: "create" for name in new}, up.changed()
    after = in_state(stack)
    new_units = {name.split("/", 1)[1] for name in unit_names(after) if name.startswith(f"{NEW_HOST}/")}
    # Only the new host's units ran, each its ensure once; kpro5's host is as it was.
    assert new_units and sorted(up.host_operations) == sorted((unit, "ensure") for unit in new_units)
    assert entries(one.tree) == converged
    for name, entry in one_host.items():
        moved_name = name if name == "kpro5" else f"kpro5/{name}"
        assert moved_name in after and after[moved_name].get("id") == entry.get("id"), name
    assert stack.preview().changed() == {}

    # kpro5 drifts while the new host is down.
    other.ssh.stop()
    (one.tree / DRIFTED).unlink()
    run, preview = operator_up(stack, "--continue-on-error")
    assert run.returncode != 0
    # The down host's first unit fails (the rest of its units wait for it); kpro5 fails nothing.
    assert set(run.errors()) == {f"{NEW_HOST}/vfio-binding"}, run.errors()
    text = run.errors()[f"{NEW_HOST}/vfio-binding"]
    assert f"{NEW_HOST}/vfio-binding: ensure: could not reach" in text, text
    assert f"Only {NEW_HOST}'s units stop" in text, text
    assert run.changed() == {"kpro5/vfio-binding": "update", f"{NEW_HOST}/vfio-binding": "failed"}, run.changed()
    assert run.host_operations == [("vfio-binding", "ensure")], run.host_operations
    assert (one.tree / DRIFTED).is_file()
    # Its preview's refresh said so for each of its units, naming the host: each is an update whose every fact
    # is the host's absence.
    down_units = {name for name in unit_names(after) if name.startswith(f"{NEW_HOST}/")}
    assert {name for name, (op, _) in preview.changed().items() if op == "update"} >= down_units, preview.changed()
    for name in down_units:
        facts = preview.facts(name)
        assert facts and all(f"{NEW_HOST} (" in str(fact) and "could not be reached" in str(fact)
                             for fact in facts.values()), (name, facts)
    # One dial per host per provider process (the preview's and the update's), the refused host's included.
    assert dials_per_port(run) == {one.ssh.port: 2, other.ssh.port: 2}, dials_per_port(run)
