"""The training node's stack over real SSH through the host-unit provider: up from a bare node to a running job, up
again runs nothing, destroy keeps models, data and checkpoints; the Hugging Face token travels only on stdin."""

from __future__ import annotations

import json

import pytest
import yaml

from engine import Engine
from sshhost import SshHost
from sshhost.bed import names, record_program, write_plan
from trainer_node import StateServer, node_values, prepare_node

TOKEN = "hf_TrainerLifecycleToken61e0"
# the trainer's own 12, and gpuhosts:monitoring's node exporter, DCGM exporter and monitoring files
UNITS = 15


@pytest.fixture
def node(tmp_path):
    tree = prepare_node(tmp_path)
    ssh = SshHost(tree, tmp_path / "ssh").start()
    yield tmp_path, tree, ssh
    ssh.stop()


def trainer_engine(root, ssh, values):
    values["node"]["ssh"].update(host=ssh.host, port=ssh.port, user=ssh.user, hostKey=ssh.host_key)
    stack_file = root / "Pulumi.trainer.yaml"
    stack_file.write_text(yaml.safe_dump({"config": {f"gpuhosts:{k}": v for k, v in values.items()}}, sort_keys=False))
    secrets = {"sshPrivateKey": ssh.private_key.read_text(), "hfToken": TOKEN}
    engine = Engine(root / "state.json", {f"gpuhosts:{k}": v for k, v in secrets.items()})
    return engine, stack_file, record_program(stack_file, "trainer", secrets)


def test_trainer_up_again_and_destroy_over_ssh(node):
    root, tree, ssh = node
    values = node_values(root)
    engine, stack_file, program = trainer_engine(root, ssh, values)
    server = StateServer(tree / "data/hidden_states", values["training"]["server"]["port"])
    try:
        plan = write_plan("trainer", stack_file, root / "plan-1")
        first = names(engine.up(program))
        again = names(engine.up(program))
    finally:
        server.close()
    assert len(first) == UNITS and first[0] == "preflight" and first[-1] == "dflash-training", first
    assert again == []
    assert "token=yes" in (tree / "var/log/fakehost/hf.log").read_text()
    for unit in ("gpuhosts-node-exporter.service", "gpuhosts-dcgm-exporter.service"):
        assert (tree / "run/fakehost/units" / unit).exists(), unit
    assert (tree / "etc/gpuhosts/monitoring/prometheus/rules/gpuhosts-trainer.rules.yml").is_file()

    (tree / "data/checkpoints/Qwen3.6-27B-DFlash/epoch_1").mkdir(parents=True)
    gone = names(engine.destroy())
    assert len(gone) == UNITS and gone[-1] == "preflight"
    left = sorted(str(p.relative_to(tree)) for p in (tree / "etc/gpuhosts").rglob("*"))
    assert not (tree / "etc/gpuhosts/monitoring").exists(), "\n".join(left)
    assert not (tree / "usr/bin/prometheus-node-exporter").exists()  # purged: gpuhosts installed it
    assert [e for e in json.loads((root / "state.json").read_text())["resources"].values()
            if "ensure" in e["inputs"]] == []
    for kept in ("data/models/Qwen/Qwen3.6-27B/config.json", "data/data/qwen36-mix-913k/SHA256SUMS",
                 "data/checkpoints/Qwen3.6-27B-DFlash/epoch_1"):
        assert (tree / kept).exists(), kept
    places = [root / "state.json", *(p for p in plan.rglob("*") if p.is_file()),
              *(p for p in tree.rglob("*") if p.is_file() and not p.is_symlink())]
    assert [str(p) for p in places if TOKEN.encode() in p.read_bytes()] == []
    assert [line for line in engine.log if TOKEN in line] == []
