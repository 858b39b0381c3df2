"""Drift through the real Pulumi CLI: each hand change of tests/realengine/drifts.py, made over SSH on a host the CLI
converged, is named by `pulumi preview` (unit and field, from its refresh), repaired by `pulumi up` through the
ensure of exactly the units it names, and a second `preview` shows no change. Drift that ensure must not repair is
shown, refused by `up`, and the host is left as it was.

One converged host per stack kind; before each case the host's tree is put back to how the converge left it, so
every case starts in sync (the state still describes it: a refresh reads it before every preview and up).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuhosts.check import EXIT_DRIFT
from realengine.drifts import DRIFTS, Drift, deep_check
from realengine import CliFailed, Stack
from realengine.hosts import entries
from sshhost import SshHost, free_port
from sshhost.bed import Bed
from trainer_node import StateServer, node_values, prepare_node

pytestmark = pytest.mark.pulumi
TRAINER_TOKEN = "hf_TrainerDriftToken0b7e52"


class Converged:
    """A host the real CLI converged, the stack that did it, and a copy of its tree to put it back."""

    def __init__(self, host, stack: Stack, values: dict):
        self.host, self.stack, self.values = host, stack, values
        self.snapshot = Path(str(host.tree) + ".converged")
        shutil.copytree(host.tree, self.snapshot, symlinks=True)

    def put_back(self) -> None:
        shutil.rmtree(self.host.tree)
        shutil.copytree(self.snapshot, self.host.tree, symlinks=True)


class Node:
    """The simulated training node as the drift cases reach it: `on_host`, `root`, `tree`."""

    def __init__(self, root: Path):
        self.root = root
        self.tree = prepare_node(root)
        self.ssh = SshHost(self.tree, root / "ssh").start()

    def on_host(self, command: str) -> subprocess.CompletedProcess:
        return subprocess.run(self.ssh.ssh_argv(command), capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def kpro5(project, sglang, tmp_path_factory):
    bed = Bed.seed(tmp_path_factory.mktemp("drift-kpro5") / "host")
    values = bed.services_values(sglang.port, free_port())
    stack = Stack(project, "kpro5", "kpro5", values, bed.secrets())
    stack.up()
    yield Converged(bed, stack, values)
    bed.close()


@pytest.fixture(scope="module")
def trainer(project, tmp_path_factory):
    node = Node(tmp_path_factory.mktemp("drift-trainer"))
    values = node_values(node.root)
    values["node"]["ssh"].update(host=node.ssh.host, port=node.ssh.port, user=node.ssh.user,
                                 hostKey=node.ssh.host_key)
    server = StateServer(node.tree / "data/hidden_states", values["training"]["server"]["port"])
    stack = Stack(project, "trainer", "trainer", values,
                  {"sshPrivateKey": node.ssh.private_key.read_text(), "hfToken": TRAINER_TOKEN})
    stack.up()
    yield Converged(node, stack, values)
    server.close()
    node.ssh.stop()


@pytest.fixture(scope="module")
def outcomes():
    """How each case ended (repaired or refused), written as the tier's drift figure once the module is done."""
    found: dict[str, str] = {}
    yield found
    if found:
        from realengine.conftest import Figures

        Figures().add("drift", line="pulumi-drift", cases=len(DRIFTS), shown=len(found),
                      repaired=sum(v == "repaired" for v in found.values()),
                      refused=sum(v == "refused" for v in found.values()), clean=len(found))


def check_drift(converged: Converged, drift: Drift, outcomes: dict[str, str]) -> None:
    converged.put_back()
    host, stack = converged.host, converged.stack
    drift.tamper(host)
    if drift.deep:
        assert stack.preview().changed() == {}, "the refresh's samples were meant to miss this"
        code, report = deep_check(host, converged.values)
        drifted = {u["unit"]: [d["field"] for d in u["drift"]] for u in report["units"] if u["status"] == "drifted"}
        assert code == EXIT_DRIFT and drifted == {unit: [field] for unit, field in drift.deep.items()}, report
        drift.fix(host)
    preview = stack.preview()
    changed = preview.changed()
    assert set(changed) == set(drift.shown), changed
    for unit, path in drift.shown.items():
        operation, paths = changed[unit]
        assert operation == "update" and path in paths, (unit, operation, paths)
    for unit, words in drift.names.items():
        value = preview.facts(unit)[re.fullmatch(r'facts\["(.+)"\]', drift.shown[unit])[1]]
        assert words in value, (unit, value)
    if drift.refuse:
        before = entries(host.tree)
        with pytest.raises(CliFailed) as caught:
            stack.up()
        output = caught.value.run.stdout + caught.value.run.stderr
        assert "refused:" in output and drift.refuse in output, output[-3000:]
        assert entries(host.tree) == before, "the host changed while refusing"
        assert set(stack.preview().changed()) == set(drift.shown), "the drift is no longer shown"
        outcomes[drift.name] = "refused"
        return
    up = stack.up()
    assert sorted(unit for unit, script in up.host_operations) == sorted(drift.repairs), up.host_operations
    assert {script for _, script in up.host_operations} == {"ensure"}
    assert set(up.changed()) == set(drift.repairs) and set(up.changed().values()) == {"update"}, up.changed()
    assert stack.preview().changed() == {}, "not clean after the repair"
    outcomes[drift.name] = "repaired"


@pytest.mark.parametrize("drift", [d for d in DRIFTS if d.stack == "kpro5"], ids=lambda d: d.name)
def test_kpro5_drift_is_shown_and_repaired_by_the_real_engine(kpro5, drift, outcomes):
    check_drift(kpro5, drift, outcomes)


@pytest.mark.parametrize("drift", [d for d in DRIFTS if d.stack == "trainer"], ids=lambda d: d.name)
def test_trainer_drift_is_shown_and_repaired_by_the_real_engine(trainer, drift, outcomes):
    check_drift(trainer, drift, outcomes)
