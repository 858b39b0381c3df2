"""The training node through the real Pulumi CLI: the committed trainer stack aimed at a simulated node over SSH,
`preview --diff`, `up` to a running job, `up` again with nothing to do, `refresh`, and `destroy` back to the start,
keeping the models, the data set and the checkpoints."""

from __future__ import annotations

import json

import pytest

from realengine import Stack
from realengine.hosts import differences, entries
from sshhost import SshHost
from trainer_node import StateServer, node_values, prepare_node

pytestmark = pytest.mark.pulumi
TOKEN = "hf_TrainerRealEngineToken5d71"
# User data a destroy keeps (the trainer's models, data set and checkpoints) and the stand-ins' own logs.
KEPT = ("data/models/", "data/data/", "data/checkpoints/", "data/hidden_states/", "var/log/fakehost/")


@pytest.fixture
def node(tmp_path):
    tree = prepare_node(tmp_path)
    ssh = SshHost(tree, tmp_path / "ssh").start()
    values = node_values(tmp_path)
    values["node"]["ssh"].update(host=ssh.host, port=ssh.port, user=ssh.user, hostKey=ssh.host_key)
    server = StateServer(tree / "data/hidden_states", values["training"]["server"]["port"])
    yield tree, ssh, values
    server.close()
    ssh.stop()


def test_trainer_preview_up_again_refresh_and_destroy(project, node, figures):
    tree, ssh, values = node
    start = entries(tree)
    stack = Stack(project, "trainer", "trainer", values,
                  {"sshPrivateKey": ssh.private_key.read_text(), "hfToken": TOKEN})
    preview = stack.preview()
    planned = preview.changed()
    assert {"preflight", "dflash-training", "node-exporter"} <= set(planned), planned
    assert {op for op, _ in planned.values()} == {"create"}
    assert entries(tree) == start, "a preview changed the node"

    up = stack.up()
    assert set(up.changed()) == set(planned) and set(up.changed().values()) == {"create"}
    ran = [unit for unit, _ in up.host_operations]
    assert ran[0] == "preflight" and ran[-1] == "dflash-training", ran
    assert (tree / "run/fakehost/units/gpuhosts-node-exporter.service").exists()
    assert "token=yes" in (tree / "var/log/fakehost/hf.log").read_text()
    converged = entries(tree)

    again = stack.up()
    assert again.changed() == {} and again.host_operations == [], (again.changed(), again.host_operations)
    assert entries(tree) == converged
    refresh = stack.refresh()
    assert refresh.changed() == {} and refresh.host_operations == []

    state = stack.export()
    assert TOKEN not in json.dumps(state) and TOKEN not in stack.file.read_text()
    (tree / "data/checkpoints/Qwen3.6-27B-DFlash/epoch_1").mkdir(parents=True)
    gone = stack.destroy()
    assert set(gone.changed()) == set(planned) and set(gone.changed().values()) == {"delete"}
    assert differences(start, entries(tree), KEPT) == []
    for kept in ("data/models/Qwen/Qwen3.6-27B/config.json", "data/data/qwen36-mix-913k/SHA256SUMS",
                 "data/checkpoints/Qwen3.6-27B-DFlash/epoch_1"):
        assert (tree / kept).exists(), kept
    assert TOKEN.encode() not in project.provider_log.read_bytes()
    assert [str(p) for p in tree.rglob("*") if p.is_file() and not p.is_symlink() and TOKEN.encode() in p.read_bytes()] \
        == []
    figures.add("trainer", preview_s=preview.run.seconds, up_s=up.seconds, noop_up_s=again.seconds,
                refresh_s=refresh.seconds, destroy_s=gone.seconds, host_restored="yes",
                state_kb=round(len(json.dumps(state)) / 1024))
