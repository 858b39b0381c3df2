"""The training node's stack over real SSH, applied as pulumi-command would: up from a bare node to a running job,
up again runs nothing, destroy keeps models, data and checkpoints; the Hugging Face token travels only on stdin."""

from __future__ import annotations

import json

import pytest
import yaml

from sshhost import SshHost
from sshhost.executor import Executor, Target, write_plan
from trainer_node import StateServer, node_values, prepare_node

TOKEN = "hf_TrainerLifecycleToken61e0"
COMMANDS = 11


@pytest.fixture
def node(tmp_path):
    tree = prepare_node(tmp_path)
    ssh = SshHost(tree, tmp_path / "ssh").start()
    yield tmp_path, tree, ssh
    ssh.stop()


def test_trainer_up_again_and_destroy_over_ssh(node):
    root, tree, ssh = node
    values = node_values(root)
    values["node"]["ssh"].update(host=ssh.host, port=ssh.port, user=ssh.user, hostKey=ssh.host_key)
    stack_file = root / "Pulumi.trainer.yaml"
    stack_file.write_text(yaml.safe_dump({"config": {f"gpuhosts:{k}": v for k, v in values.items()}}, sort_keys=False))
    target = Target.from_stack_file(stack_file, ssh.private_key, root / "client")
    executor = Executor(target, root / "state.json", root / "commands.log", secrets={"hfToken": TOKEN})
    server = StateServer(tree / "data/hidden_states", values["training"]["server"]["port"])
    try:
        plan = write_plan("trainer", stack_file, root / "plan-1")
        first = executor.up(plan)
        again = executor.up(write_plan("trainer", stack_file, root / "plan-2"))
    finally:
        server.close()
    assert len(first) == COMMANDS and [r.name for r in first][-1] == "trainer-training-monitor"
    assert again == [], [r.name for r in again]
    assert "token=yes" in (tree / "var/log/fakehost/hf.log").read_text()

    (tree / "data/checkpoints/Qwen3.6-27B-DFlash/epoch_1").mkdir(parents=True)
    gone = executor.destroy()
    assert len(gone) == COMMANDS and json.loads((root / "state.json").read_text())["resources"] == {}
    for kept in ("data/models/Qwen/Qwen3.6-27B/config.json", "data/data/qwen36-mix-913k/SHA256SUMS",
                 "data/checkpoints/Qwen3.6-27B-DFlash/epoch_1"):
        assert (tree / kept).exists(), kept
    places = [root / "commands.log", root / "state.json", *(p for p in root.glob("plan-*/**/*") if p.is_file()),
              *(p for p in tree.rglob("*") if p.is_file() and not p.is_symlink())]
    assert [str(p) for p in places if TOKEN.encode() in p.read_bytes()] == []
