"""The scale files of the trainer's GPU runs (tests/gpu/): each changes only sizes, the step count and the GPUs of
the committed trainer stack, and the eight-GPU one keeps the node's split as the stack declares it, which the plan
renders as the hidden-state server on GPUs 0-3 at tensor parallel 4 and four torchrun ranks on GPUs 4-7."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpu.trainer_bundle import STACK, scaled_stack

GPU = Path(__file__).resolve().parent / "gpu"
PROJECT = GPU.parents[1]
SCALES = ("trainer-scale.yaml", "trainer-scale-gpu8.yaml")
# What a scale file may change: the sizes and steps of a run, and the GPUs of the machine it runs on. The server's
# entry is replaced whole (its maxModelLen is a size); its GPUs and parallelism are held below where they must stay.
SCALABLE = ("node.gpus", "node.driverVersion", "training.server", "training.trainingGpus", "training.hyper.epochs",
            "training.hyper.maxSeqLen", "training.dataset.samples", "training.dataset.mix.", "training.smoke")


def scale(name: str) -> dict:
    return yaml.safe_load((GPU / name).read_text())


@pytest.mark.parametrize("name", SCALES)
def test_a_scale_changes_only_sizes_steps_and_gpus(name):
    assert [key for key in scale(name) if not key.startswith(SCALABLE)] == []
    # Every path is in the committed stack (scaled_stack refuses one that is not).
    scaled_stack(yaml.safe_load(STACK.read_text()), scale(name))


def test_the_eight_gpu_scale_keeps_the_split_and_plans_four_ranks_on_gpus_4_to_7(tmp_path):
    committed = yaml.safe_load(STACK.read_text())["config"]["gpuhosts:training"]
    stack = scaled_stack(yaml.safe_load(STACK.read_text()), scale("trainer-scale-gpu8.yaml"))
    training = stack["config"]["gpuhosts:training"]
    for path in (("server", "gpus"), ("server", "tensorParallelSize"), ("trainingGpus",)):
        here, there = training, committed
        for key in path:
            here, there = here[key], there[key]
        assert here == there, path
    stack_file = tmp_path / "Pulumi.trainer.yaml"
    stack_file.write_text(yaml.safe_dump(stack, sort_keys=False))
    planned = subprocess.run([sys.executable, "-m", "gpuhosts.cli", "plan", "trainer", "--stack-file", str(stack_file),
                              "--out", str(tmp_path / "plan")], cwd=PROJECT, capture_output=True, text=True)
    assert planned.returncode == 0, planned.stderr
    summary = json.loads((tmp_path / "plan" / "summary.json").read_text())["hosts"]["trainer"]["training"]
    assert summary["gpus"] == {"count": 8, "model": "H100", "server": [0, 1, 2, 3], "training": [4, 5, 6, 7]}
    server = summary["server"]
    assert server["environment"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert server["argv"][server["argv"].index("--tensor-parallel-size") + 1] == "4"
    launch = (tmp_path / "plan/hosts/trainer/opt/gpuhosts/training/train_dflash_qwen36.sh").read_text()
    assert "--nproc_per_node 4" in launch and "export CUDA_VISIBLE_DEVICES=4,5,6,7" in launch
