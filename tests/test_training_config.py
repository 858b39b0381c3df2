"""The training node stack: it validates, every bad setting is refused naming its field, the rules fire, and the
three spellings of the layer ids agree for every verifier depth."""

from __future__ import annotations

import pytest

from gpuhosts.hostside.drafter_config import target_layer_ids
from gpuhosts.plans.training_node import plan_training_node
from conftest import TRAINER_SECRETS, trainer_values
from gpuhosts.config import ConfigError
from gpuhosts.training import layer_ids
from gpuhosts.stacks import validate_trainer_stack


def training(values: dict) -> dict:
    return values["training"]


def test_the_trainer_stack_declares_the_seed_node():
    stack = validate_trainer_stack(trainer_values(), TRAINER_SECRETS)
    assert (stack.node.gpus.count, stack.node.gpus.model, stack.node.driver_version) == (8, "RTX PRO 6000", "580.126.09")
    t = stack.training
    assert t.server.gpus == (0, 1, 2, 3) and t.training_gpus == (4, 5, 6, 7)
    assert (t.speculators.version, t.vllm.version) == ("0.7.0", "0.26.0")
    assert t.drafter.repo == "z-lab/Qwen3.6-27B-DFlash" and t.drafter.gated
    assert (t.hyper.block_size, t.hyper.num_layers, t.dataset.samples) == (16, 5, 913786)
    assert stack.checkpoints == "/data/checkpoints/Qwen3.6-27B-DFlash"
    assert (t.smoke.samples, t.smoke.epochs) == (100, 1)
    # The committed stack's warnings, each named: the node's placeholder address, the two code sets that share
    # samples (every data set source is pinned: a placeholder commit is refused), and the agentic sessions longer
    # than the training's sequence.
    assert [w.split(" is ")[0].split(" share ")[0].split(": about")[0] for w in stack.warnings] == [
        "gpuhosts:node.ssh.host 192.0.2.40",
        "gpuhosts:training.dataset.mix[1] theblackcat102/evol-codealpaca-v1 and mix[2] "
        "ise-uiuc/Magicoder-Evol-Instruct-110K",
        "gpuhosts:training.dataset.mix[3] thoughtworks/agentic-coding-trajectories"]


BAD = [
    ("GPU sets overlap", lambda v: training(v).update(trainingGpus=[3, 4, 5, 6]), "gpuhosts:training.trainingGpus",
     "GPU(s) [3] are also the server's"),
    ("GPU beyond the node", lambda v: training(v).update(trainingGpus=[4, 5, 6, 8]), "gpuhosts:training.trainingGpus",
     "do not exist on a node of 8 GPUs"),
    ("server GPU beyond the node", lambda v: v["node"]["gpus"].update(count=4), "gpuhosts:training.trainingGpus",
     "do not exist on a node of 4 GPUs"),
    ("parallelism differs from the GPUs", lambda v: training(v)["server"].update(tensorParallelSize=2),
     "gpuhosts:training.server.tensorParallelSize", "tensor × data parallel = 2, but the server has 4"),
    ("a GPU twice", lambda v: training(v).update(trainingGpus=[4, 4, 5, 6]), "gpuhosts:training.trainingGpus",
     "lists a GPU twice"),
    ("vLLM that extracts zeros from hybrid verifiers", lambda v: training(v)["vllm"].update(version="0.20.1"),
     "gpuhosts:training.vllm.version", "rule training-vllm-hybrid-hidden-states"),
    ("speculators without DFlash", lambda v: training(v)["speculators"].update(version="0.4.1"),
     "gpuhosts:training.speculators.version", "rule training-speculators-dflash"),
    ("monitor on the network without a token", lambda v: training(v)["monitor"].update(bind="0.0.0.0"),
     "gpuhosts:training.monitor.tokenSecret", "is required when the monitor binds 0.0.0.0"),
    ("monitor token not a secret", lambda v: training(v)["monitor"].update(tokenSecret="monitorToken"),
     "gpuhosts:training.monitor.tokenSecret", "pulumi config set --secret gpuhosts:monitorToken"),
    ("server beyond the verifier's context", lambda v: training(v)["server"].update(maxModelLen=1048576),
     "gpuhosts:training.server.maxModelLen", "beyond Qwen/Qwen3.6-27B's max_position_embeddings 262144"),
    ("server shorter than a sample", lambda v: training(v)["server"].update(maxModelLen=4096),
     "gpuhosts:training.server.maxModelLen", "shorter than hyper.maxSeqLen"),
    ("drafter layers disagree", lambda v: training(v)["drafter"].update(numLayers=4), "gpuhosts:training",
     "differs from hyper.numLayers"),
    ("dataset without a pinned manifest", lambda v: training(v)["dataset"].update(manifestSha256="latest"),
     "gpuhosts:training.dataset.manifestSha256", "64 lower-case hex"),
    ("dataset from an unpinned place", lambda v: training(v)["dataset"].update(source="rsync://host/data"),
     "gpuhosts:training.dataset.source", "https:// or file:///"),
    ("unquoted driver version", lambda v: v["node"].update(driverVersion=580.126), "gpuhosts:node.driverVersion",
     "quote it"),
    ("storage root", lambda v: v["node"].update(storage="/"), "gpuhosts:node.storage", "is a system directory"),
    ("a Proxmox key in a node stack", lambda v: v.update(gpus=[]), "gpuhosts:gpus",
     "is not a setting of a training node stack"),
    ("a plain-text token", lambda v: v.update(hfToken="hf_plainTrainerToken"), "gpuhosts:hfToken",
     "holds a secret as plain text"),
    # Without a pinned key SSH would trust whatever key the node shows.
    ("no host key", lambda v: v["node"]["ssh"].pop("hostKey"), "gpuhosts:node.ssh.hostKey",
     "is required: pin the host key (`ssh-keyscan -t ed25519 HOST`), or set insecureIgnoreHostKey: true"),
    ("a host key and its check skipped", lambda v: v["node"]["ssh"].update(insecureIgnoreHostKey=True),
     "gpuhosts:node.ssh.insecureIgnoreHostKey", "mutually exclusive"),
]


@pytest.mark.parametrize("case,mutate,path,words", BAD, ids=[case for case, *_ in BAD])
def test_bad_training_setting_is_refused_naming_the_field(trainer, case, mutate, path, words):
    mutate(trainer)
    secrets = TRAINER_SECRETS - {"hfToken"} if case == "a plain-text token" else TRAINER_SECRETS
    with pytest.raises(ConfigError) as caught:
        validate_trainer_stack(trainer, secrets)
    matching = [p for p in caught.value.problems if p.path == path]
    assert matching, f"no problem at {path}: {caught.value}"
    assert any(words in p.message for p in matching), str(caught.value)
    assert "hf_plainTrainerToken" not in str(caught.value)


def test_a_gated_drafter_needs_the_token(trainer):
    with pytest.raises(ConfigError, match=r"gpuhosts:training\.drafter\.gated: z-lab/Qwen3\.6-27B-DFlash is gated"):
        validate_trainer_stack(trainer, TRAINER_SECRETS - {"hfToken"})


def test_a_vllm_build_with_the_fix_passes_the_rule(trainer):
    training(trainer)["vllm"].update(version="0.20.1", gitRef="0c5e9b5a4e1f1a4b0c9f6c2d7e3a8b1f4d2c6e90", includesPrs=[46301])
    assert validate_trainer_stack(trainer, TRAINER_SECRETS).training.vllm.version == "0.20.1"


@pytest.mark.parametrize("verifier_layers, drafter_layers", [(64, 5), (48, 5), (36, 4), (28, 3), (80, 8), (64, 1)])
def test_the_three_layer_id_lists_agree(verifier_layers, drafter_layers):
    ids = layer_ids(verifier_layers, drafter_layers)
    assert list(ids.drafter) == target_layer_ids(verifier_layers, drafter_layers)
    assert len(ids.drafter) == drafter_layers and list(ids.drafter) == sorted(set(ids.drafter))
    assert all(1 <= i <= verifier_layers - 3 for i in ids.drafter) or drafter_layers == 1
    assert ids.trainer == tuple(i + 1 for i in ids.drafter)
    # launch_vllm.py appends the last layer itself: the server extracts it, train.py must not be given it.
    assert ids.server == ids.trainer + (verifier_layers,) and verifier_layers not in ids.trainer


def test_the_plan_passes_each_list_where_it_belongs():
    plan = plan_training_node(validate_trainer_stack(trainer_values(), TRAINER_SECRETS))
    assert plan.ids.drafter == (1, 16, 31, 46, 61)
    server = plan.summary["server"]["argv"]
    at = server.index("--target-layer-ids")
    assert server[at + 1:server.index("--")] == ["2", "17", "32", "47", "62"]
    assert "--target-layer-ids 2 17 32 47 62" in plan.summary["training"]["args"]
    assert plan.summary["layerIds"] == {"drafterConfig": [1, 16, 31, 46, 61], "trainer": [2, 17, 32, 47, 62],
                                        "serverExtracts": [2, 17, 32, 47, 62, 64]}
    # The starting drafter's own config.json must agree with the derived list after its download.
    assert '"target_layer_ids": [1, 16, 31, 46, 61]' in plan.graph["model-qwen3-6-27b-dflash"].ensure
    assert plan.summary["gpus"] == {"count": 8, "model": "RTX PRO 6000", "server": [0, 1, 2, 3], "training": [4, 5, 6, 7]}
