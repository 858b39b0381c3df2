"""Many hosts in one `up`, on simulated hosts over SSH through the real provider.

A converged one-host kpro5 stack moves into `gpuhosts:hosts` beside a second host: every resource of kpro5 is the
same resource (its aliases), nothing of it runs but its refresh, and only the new host's units are created. Then
the second host stops answering while kpro5 has drifted: `pulumi up --continue-on-error` repairs kpro5, fails each
unit of the other naming that host, and dials each host once per provider process.
"""

from __future__ import annotations

import re

import pytest

from engine import ApplyError
from sshhost.bed import STACK, Bed
from sshhost.fleet import Fleet

DIAL = re.compile(r"^gpuhosts-ssh: dial \S+@127\.0\.0\.1:(?P<port>\d+) attempt \d+$")
DRIFTED = "usr/local/lib/gpuhosts/vfio-override.sh"


@pytest.fixture
def moved(tmp_path):
    bed = Bed.seed(tmp_path / "one")
    fleet = None
    try:
        bed.up()
        fleet = Fleet.adopting(tmp_path / "fleet", bed.tree, bed.ssh, bed.engine.state_file, bed.run_file,
                               bed.sha256, 2)
        yield bed, fleet
    finally:
        (fleet or bed).close()


def commands(ops):
    return [op for op in ops if op.operation != "read"]


def dials_per_port(log: list[str]) -> dict[int, int]:
    found: dict[int, int] = {}
    for line in log:
        match = DIAL.match(line)
        if match:
            found[int(match["port"])] = found.get(int(match["port"]), 0) + 1
    return found


def test_a_one_host_stack_moved_into_a_list_of_hosts_keeps_its_resources_and_a_down_host_fails_alone(moved):
    bed, fleet = moved
    one_host = {entry["name"]: entry for entry in bed.engine.state().values()}
    program = fleet.program(stack=STACK)
    new = {r["name"] for r in program if r["name"].startswith("kpro5-1")}
    assert new and all(r["name"].startswith(("kpro5/", "kpro5-1")) or r["name"] == "kpro5" for r in program)

    preview = fleet.preview(program=program)
    assert {name: change.operation for name, change in preview.changed().items()} == {name: "create" for name in new}

    ops = fleet.up(program=program)
    ran = [(op.name, op.operation) for op in commands(ops)]
    assert sorted(ran) == sorted((name, "create") for name in new if name.count("/") and
                                 any(r["name"] == name and "ensure" in r["inputs"] for r in program)), ran
    after = fleet.engine.state()
    for name, entry in one_host.items():
        moved_entry = [e for e in after.values() if e["name"] == f"kpro5/{name}" or (name == "kpro5" == e["name"])]
        assert len(moved_entry) == 1 and moved_entry[0]["id"] == entry["id"], name
    assert fleet.preview(program=program).changed() == {}

    # kpro5 drifts while kpro5-1 is down.
    down = fleet.hosts[1]
    down.ssh.stop()
    (fleet.hosts[0].tree / DRIFTED).unlink()
    fleet.engine.log.clear()
    with pytest.raises(ApplyError) as error:
        fleet.up(program=program, continue_on_error=True)
    text = str(error.value)
    failed = sorted(op.name for op in error.value.ops if op.outcome == "failed")
    # The down host's first unit fails (the rest of its units wait for it); kpro5 fails nothing.
    assert failed == ["kpro5-1/vfio-binding"], text
    assert "kpro5-1/vfio-binding: update: kpro5-1/vfio-binding: ensure: could not reach" in text
    assert "Only kpro5-1's units stop" in text
    repaired = [op.name for op in commands(error.value.ops) if op.outcome == "ok"]
    assert repaired == ["kpro5/vfio-binding"], repaired
    assert (fleet.hosts[0].tree / DRIFTED).is_file()
    # Its preview's refresh said so for each of its units, naming the host.
    reads = [op for op in error.value.ops if op.operation == "read" and op.name.startswith("kpro5-1/")]
    assert reads and all(op.outcome == "ok" for op in reads)
    # One dial per host per provider process (the preview's and the update's), the refused host's included.
    assert dials_per_port(fleet.engine.log) == {fleet.hosts[0].ssh.port: 2, down.ssh.port: 2}
