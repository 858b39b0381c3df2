"""The training node's steps run against a simulated node (tests/fakehost: the converged kpro5 tree stands in for a
machine whose driver is installed, with its two RTX A6000 as the node's GPUs): pre-flight facts and refusals, the
environments (uv stand-in; speculators' scripts from a local git repository), downloads, the data set from a
file:// source with its manifest, the hidden-state server and the check against a server stand-in that writes real
safetensors files, the training job (torchrun stand-in) and destroy, which keeps models, data and checkpoints."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from components.training_node import plan_training_node
from conftest import FIXTURES, TRAINER_SECRETS, trainer_values
from fakehost import host_env
from fakehost.tree import tree_listing
from gpuhosts.render import Step
from gpuhosts.training import validate_trainer_stack
from trainer_node import StateServer, node_values, prepare_node

HF_TOKEN = "hf_TrainerTestToken3c4d"


@dataclass
class Node:
    tree: Path
    values: dict

    def steps(self, values: dict | None = None) -> list[Step]:
        return plan_training_node(validate_trainer_stack(values or self.values, TRAINER_SECRETS)).steps

    def step(self, suffix: str) -> Step:
        (found,) = [s for s in self.steps() if s.name.endswith(suffix)]
        return found

    def run(self, step: Step, operation: str = "create") -> subprocess.CompletedProcess:
        stdin = HF_TOKEN + "\n" if step.stdin_secret and operation == "create" else ""
        return subprocess.run(["bash", "-c", getattr(step, operation)], input=stdin, capture_output=True, text=True,
                              env=host_env(self.tree), timeout=180)

    def apply(self, step: Step, operation: str = "create") -> str:
        result = self.run(step, operation)
        assert result.returncode == 0, f"{step.name} {operation} failed:\n{result.stdout}\n{result.stderr}"
        return result.stdout + result.stderr

    def path(self, path: str) -> Path:
        return self.tree / path.lstrip("/")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("trainer")
    return root, prepare_node(root)


@pytest.fixture
def node(prepared, tmp_path) -> Node:
    root, template = prepared
    tree = tmp_path / "node"
    shutil.copytree(template, tree, symlinks=True)
    return Node(tree, node_values(root))


def test_preflight_reports_the_node_and_refuses_another(node):
    assert "2 × RTX A6000, driver 580.126.09" in node.apply(node.step("-preflight"))
    other = json.loads(json.dumps(node.values))
    other["node"]["gpus"] = {"count": 2, "model": "RTX PRO 6000"}
    result = node.run([s for s in node.steps(other) if s.name.endswith("-preflight")][0])
    assert result.returncode == 1 and "is 'NVIDIA RTX A6000', not a RTX PRO 6000" in result.stderr
    other["node"]["gpus"] = {"count": 8, "model": "RTX A6000"}
    other["training"]["trainingGpus"] = [4]
    result = node.run([s for s in node.steps(other) if s.name.endswith("-preflight")][0])
    assert result.returncode == 1 and "the node has 2 GPU(s), the stack needs 8" in result.stderr
    big = json.loads(json.dumps(node.values))
    big["training"]["checkpointsReserveGb"] = 10 ** 7
    result = node.run([s for s in node.steps(big) if s.name.endswith("-preflight")][0])
    assert result.returncode == 1 and "lower training.checkpointsReserveGb" in result.stderr


def test_up_to_a_running_job_then_nothing_changes_and_destroy_keeps_the_results(node):
    steps = node.steps()
    server = StateServer(node.path("/data/hidden_states"), node.values["training"]["server"]["port"])
    try:
        first = {s.name: node.apply(s) for s in steps}
        listing = tree_listing(node.tree)
        second = {s.name: node.apply(s) for s in steps}
    finally:
        server.close()
    assert "staged qwen36-mix-913k: 4 file(s) fetched" in first["trainer-dataset-qwen36-mix-913k"]
    assert "checked out file://" in first["trainer-env-speculators"]
    assert node.path("/opt/gpuhosts/speculators/src/scripts/train.py").exists()
    assert "hidden_states [6, 8] F32: non-zero" in first["trainer-hidden-state-check"]
    assert "agrees with the plan" in first["trainer-model-qwen3-6-27b-dflash"]
    for name, output in second.items():
        if not name.endswith(("-hidden-state-check", "-preflight")):
            assert "done: no change" in output, f"{name}:\n{output}"
    changed = {k: v for k, v in tree_listing(node.tree).items() if listing.get(k) != v}
    assert all(k.startswith("data/hidden_states/") for k in changed), changed

    checkpoint = node.path("/data/checkpoints/Qwen3.6-27B-DFlash/epoch_1")
    checkpoint.mkdir(parents=True)
    (checkpoint / "config.json").write_text("{}")
    for step in reversed(steps):
        node.apply(step, "delete")
    for kept in ("/data/models/Qwen/Qwen3.6-27B/config.json", "/data/models/z-lab/Qwen3.6-27B-DFlash/config.json",
                 "/data/data/qwen36-mix-913k/SHA256SUMS", "/data/checkpoints/Qwen3.6-27B-DFlash/epoch_1/config.json"):
        assert node.path(kept).exists(), kept
    assert not node.path("/etc/systemd/system/gpuhosts-dflash-training.service").exists()
    assert not node.path("/opt/gpuhosts").exists() or not any(node.path("/opt/gpuhosts").iterdir())


def test_the_hidden_state_check_refuses_all_zero_states(node):
    steps = node.steps()
    server = StateServer(node.path("/data/hidden_states"), node.values["training"]["server"]["port"], zeros=True)
    try:
        for step in steps[:steps.index(node.step("-hidden-state-check"))]:
            node.apply(step)
        result = node.run(node.step("-hidden-state-check"))
    finally:
        server.close()
    assert result.returncode == 1
    assert "hidden_states [6, 8] (F32) is all zeros" in result.stdout
    assert "training is not started" in result.stderr


def test_the_launch_script_resumes_from_the_newest_checkpoint(node):
    server = StateServer(node.path("/data/hidden_states"), node.values["training"]["server"]["port"])
    try:
        steps = node.steps()
        for step in steps[:steps.index(node.step("-dflash-training"))]:
            node.apply(step)
        script = node.path("/opt/gpuhosts/training/train_dflash_qwen36.sh")
        script.parent.mkdir(parents=True, exist_ok=True)
        (content,) = [f.content for f in node.step("-dflash-training").files if f.path.endswith(".sh")]
        script.write_text(content)
        save = node.path("/data/checkpoints/Qwen3.6-27B-DFlash")
        for name in ("epoch_1", "epoch_2"):
            (save / name).mkdir(parents=True)
            (save / name / "config.json").write_text("{}")
        subprocess.run(["touch", "-d", "2026-01-02", str(save / "epoch_1")], check=True)
        subprocess.run(["touch", "-d", "2026-01-03", str(save / "epoch_2")], check=True)
        result = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=host_env(node.tree), timeout=120)
    finally:
        server.close()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "resuming from" in result.stdout
    launch = (node.tree / "var/log/fakehost/torchrun.log").read_text().splitlines()[-1]
    assert launch.startswith("--standalone --nproc_per_node 1 ")
    assert "--target-layer-ids 2 17 32 47 62 " in launch and "--from-pretrained /data/checkpoints/Qwen3.6-27B-DFlash/epoch_2" in launch


@pytest.mark.parametrize("model, driver, says", [
    ("H200", "580.159.04", "the node has 1 GPU(s), the stack needs 2 (H200)"),
    ("RTX PRO 6000", "580.159.04", "GPU 0 is 'NVIDIA H200', not a RTX PRO 6000"),
    ("H200", "580.126.09", "GPU 0 runs driver 580.159.04, the stack expects 580.126.09"),
])
def test_preflight_reads_real_nvidia_smi_output(tmp_path, model, driver, says):
    """nvidia-smi's answer to the pre-flight query as a one-GPU H200 machine with driver 580.159.04 gave it: each
    refusal shows the name, driver and count were read from it."""
    captured = FIXTURES / "facts/h200-open-580.159.04/nvidia-smi/query-gpu-preflight.csv"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\ncat {captured}\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    values = trainer_values()
    values["node"].update(gpus={"count": 2, "model": model}, driverVersion=driver, storage=str(tmp_path / "data"))
    values["training"]["server"].update(gpus=[0], tensorParallelSize=1)
    values["training"]["trainingGpus"] = [1]
    step = plan_training_node(validate_trainer_stack(values, TRAINER_SECRETS)).preflight
    env = {**host_env(tmp_path), "PATH": f"{bin_dir}:/usr/bin:/bin", "GPUHOSTS_HOST_ROOT": ""}
    result = subprocess.run(["bash", "-c", step.create], capture_output=True, text=True, env=env)
    assert result.returncode == 1 and says in result.stderr, result.stdout + result.stderr


def test_destroy_deletes_data_and_checkpoints_only_when_the_config_says_so(node):
    values = json.loads(json.dumps(node.values))
    values["training"]["dataset"]["deleteOnDestroy"] = True
    values["training"]["deleteCheckpointsOnDestroy"] = True
    steps = node.steps(values)
    server = StateServer(node.path("/data/hidden_states"), values["training"]["server"]["port"])
    try:
        for step in steps:
            node.apply(step)
    finally:
        server.close()
    (node.path("/data/checkpoints/Qwen3.6-27B-DFlash/epoch_1")).mkdir(parents=True)
    outputs = {s.name: node.apply(s, "delete") for s in reversed(steps)}
    assert not node.path("/data/data/qwen36-mix-913k").exists()
    assert not node.path("/data/checkpoints/Qwen3.6-27B-DFlash").exists()
    assert "deleted /data/checkpoints/Qwen3.6-27B-DFlash (the config says to)" in outputs["trainer-dflash-training"]
    assert node.path("/data/models/Qwen/Qwen3.6-27B/config.json").exists()
