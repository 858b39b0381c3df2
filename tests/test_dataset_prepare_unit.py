"""DatasetPrepare on a simulated training node (tests/fakehost): a stack's `dataset.mix` downloaded from the simulated
Hub's data set repos (tests/fixtures/datasets/hub), converted and mixed by gpuhosts/hostside/dataset_prepare.py, and
tokenized by the speculators environment's scripts/prepare_data.py (its stand-in checks the v0.7.0 flags); reruns,
a changed count, an interrupted tokenize, a gated source and destroy."""

from __future__ import annotations

import ast
import copy
import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import TRAINER_SECRETS
from fakehost import host_env
from fakehost.pytools import PREPARE_DATA_FLAGS, prepare_data_parser
from fakehost.util import configure
from gpuhosts.plans.training_node import plan_training_node
from gpuhosts.protocol import parse_facts, parse_result
from gpuhosts.stacks import validate_trainer_stack
from gpuhosts.training import TrainerStack
from trainer_node import StateServer, node_values, prepare_node

HF_TOKEN = "hf_DatasetPrepareToken9e1f"
KEY = "dataset-qwen36-mix-913k"
DATA = "/data/data/qwen36-mix-913k"
REVISION = "5e1b8c0d9a7f6e4c3b2a19087f6e5d4c3b2a1908"
CHAT = {"repo": "gpuhosts-test/chat-sharegpt", "revision": REVISION, "split": "train", "count": 5,
        "converter": "sharegpt"}
GATED = {"repo": "gpuhosts-test/gated-alpaca", "revision": REVISION, "split": "train", "count": 4,
         "converter": "alpaca", "gated": True}
SPECULATORS_MIRROR = Path("/work/.mirror/vllm-project+speculators/repo")


def mix_stack(values: dict, sources: list[dict], seed: int = 7, delete: bool = False) -> TrainerStack:
    """The node's stack with `dataset.mix` in place of the pre-made `source`."""
    values = copy.deepcopy(values)
    dataset = values["training"]["dataset"]
    for premade in ("source", "manifestSha256", "sizeGb"):
        dataset.pop(premade, None)
    dataset.update(mix=sources, seed=seed, deleteOnDestroy=delete, samples=sum(s["count"] for s in sources))
    return validate_trainer_stack(values, TRAINER_SECRETS)


@dataclasses.dataclass
class Node:
    tree: Path
    values: dict

    def graph(self, stack: TrainerStack):
        return plan_training_node(stack).graph

    def run(self, unit, operation="ensure", token=HF_TOKEN):
        stdin = token + "\n" if unit.stdin_secret and operation == "ensure" and token else ""
        return subprocess.run(["bash", "-c", getattr(unit, operation)], input=stdin, capture_output=True, text=True,
                              env=host_env(self.tree), timeout=180)

    def apply(self, unit, operation="ensure", token=HF_TOKEN) -> str:
        result = self.run(unit, operation, token)
        assert result.returncode == 0, f"{unit.key} {operation}:\n{result.stdout}\n{result.stderr}"
        parse_result(result.stdout)
        return result.stdout + result.stderr

    def before(self, stack: TrainerStack, key: str = KEY) -> None:
        """Everything the unit waits for, applied."""
        graph = self.graph(stack)
        wanted, todo = set(), list(graph[key].needs)
        while todo:
            need = todo.pop()
            if need not in wanted:
                wanted.add(need)
                todo.extend(graph[need].needs)
        for unit in graph:
            if unit.key in wanted:
                self.apply(unit)

    def probe(self, unit) -> dict:
        result = subprocess.run(["bash", "-c", unit.probe], capture_output=True, text=True, env=host_env(self.tree))
        assert result.returncode == 0, result.stderr
        return parse_facts(result.stdout)

    def path(self, path: str) -> Path:
        return self.tree / path.lstrip("/")

    def log(self, name: str) -> list[str]:
        log = self.tree / f"var/log/fakehost/{name}.log"
        return log.read_text().splitlines() if log.exists() else []

    def downloads(self) -> list[str]:
        return [line for line in self.log("hf") if "type=dataset" in line]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("prepare")
    return root, prepare_node(root)


@pytest.fixture
def node(prepared, tmp_path) -> Node:
    root, template = prepared
    shutil.copytree(template, tmp_path / "node", symlinks=True)
    return Node(tmp_path / "node", node_values(root))


def test_the_stack_with_a_mix_plans_dataset_prepare_and_the_training_reads_its_output(node):
    graph = node.graph(mix_stack(node.values, [CHAT]))
    unit = graph[KEY]
    assert unit.kind == "DatasetPrepare" and unit.stdin_secret is None
    assert set(unit.needs) == {"preflight", "env-speculators", "model-qwen3-6-27b"}
    assert KEY in graph["dflash-training"].needs
    (script,) = [f for f in graph["dflash-training"].files if f.path.endswith(".sh")]
    assert f"{DATA}/tokenized" in script.content
    # A pre-made source stays DatasetStage.
    premade = copy.deepcopy(node.values)
    for key in ("mix", "seed"):
        premade["training"]["dataset"].pop(key, None)
    premade["training"]["dataset"].setdefault("manifestSha256", "0" * 64)
    premade["training"]["dataset"].setdefault("source", "https://datasets.example.internal/qwen36-mix-913k/")
    assert plan_training_node(validate_trainer_stack(premade, TRAINER_SECRETS)).graph[KEY].kind == "DatasetStage"


def test_first_run_prepares_and_a_second_changes_nothing(node):
    stack = mix_stack(node.values, [CHAT])
    node.before(stack)
    unit = node.graph(stack)[KEY]
    assert node.probe(unit) != unit.desired
    first = node.apply(unit)
    assert parse_result(first).changed
    assert "downloaded" in first and "converted with sharegpt" in first and "tokenized the mix" in first
    manifest = json.loads(node.path(f"{DATA}/mix/manifest.json").read_text())
    assert manifest["seed"] == 7 and manifest["total"] == 5
    assert manifest["sources"][0]["name"] == f"gpuhosts-test/chat-sharegpt@{REVISION}:train"
    tokenized = node.path(f"{DATA}/tokenized")
    assert {p.name for p in tokenized.iterdir()} >= {"data-00000-of-00001.arrow", "dataset_info.json", "state.json",
                                                    "token_freq.pt"}
    assert len((tokenized / "data-00000-of-00001.arrow").read_text().splitlines()) == 5
    # Only the train split was converted (the repo's test split is not).
    assert len(node.path(f"{DATA}/sources").glob("*/converted.jsonl").__next__().read_text().splitlines()) == 8
    assert node.probe(unit) == unit.desired
    downloads = node.downloads()
    second = node.apply(unit)
    assert not parse_result(second).changed, second
    assert node.downloads() == downloads and len(node.log("prepare_data")) == 1


def test_a_changed_count_remixes_and_retokenizes_without_downloading_or_converting(node):
    stack = mix_stack(node.values, [CHAT])
    node.before(stack)
    node.apply(node.graph(stack)[KEY])
    downloads = node.downloads()
    for changed in (mix_stack(node.values, [{**CHAT, "count": 3}]), mix_stack(node.values, [{**CHAT, "count": 3}], 8)):
        unit = node.graph(changed)[KEY]
        drift = {k for k, v in node.probe(unit).items() if unit.desired.get(k) != v}
        assert drift == {f"prepared {DATA}/tokenized"}
        output = node.apply(unit)
        assert "mixed:" in output and "tokenized the mix" in output
        assert "downloaded" not in output and "converted with" not in output
        assert node.probe(unit) == unit.desired
    assert json.loads(node.path(f"{DATA}/mix/manifest.json").read_text())["seed"] == 8
    assert node.downloads() == downloads


def test_an_interrupted_tokenize_resumes_and_reuses_the_rest(node):
    stack = mix_stack(node.values, [CHAT])
    node.before(stack)
    unit = node.graph(stack)[KEY]
    configure(node.tree, prepare_data_fail_once=True)
    result = node.run(unit)
    assert result.returncode == 1 and "tokenizing stopped" in result.stderr
    assert not node.path(f"{DATA}/tokenized").exists() and node.path(f"{DATA}/tokenized.part").exists()
    assert node.probe(unit) != unit.desired
    downloads = node.downloads()
    output = node.apply(unit)
    assert "download complete" in output and "conversion up to date" in output and "the mix is up to date" in output
    assert "tokenized the mix" in output and not node.path(f"{DATA}/tokenized.part").exists()
    assert node.downloads() == downloads and node.probe(unit) == unit.desired


def test_a_gated_source_needs_the_token_which_never_shows(node):
    stack = mix_stack(node.values, [CHAT, GATED])
    node.before(stack)
    unit = node.graph(stack)[KEY]
    assert unit.stdin_secret == "hfToken"
    refused = node.run(unit, token="")
    assert refused.returncode == 1 and "gpuhosts:hfToken" in refused.stderr
    assert "gpuhosts-test/gated-alpaca is gated" in refused.stderr
    output = node.apply(unit)
    assert json.loads(node.path(f"{DATA}/mix/manifest.json").read_text())["total"] == 9
    gated = [line for line in node.downloads() if "gated-alpaca" in line]
    assert gated[-1].endswith("token=yes rc=0 type=dataset")
    assert [line for line in node.downloads() if "chat-sharegpt" in line][-1].count("token=no") == 1
    assert HF_TOKEN not in unit.ensure + output + refused.stdout + refused.stderr
    leaked = [p for p in node.tree.rglob("*") if p.is_file() and not p.is_symlink()
              and HF_TOKEN.encode() in p.read_bytes()]
    assert leaked == []


def test_teardown_keeps_the_data_and_delete_on_destroy_removes_only_what_it_wrote(node):
    stack = mix_stack(node.values, [CHAT])
    node.before(stack)
    node.apply(node.graph(stack)[KEY])
    node.path(f"{DATA}/notes.txt").write_text("mine\n")
    kept = node.apply(node.graph(stack)[KEY], "teardown")
    assert "keeping" in kept and node.path(f"{DATA}/tokenized/state.json").exists()
    assert not node.path("/usr/local/lib/gpuhosts/dataset-prepare.py").exists()
    deleting = node.graph(mix_stack(node.values, [CHAT], delete=True))[KEY]
    output = node.apply(deleting, "teardown")
    assert parse_result(output).changed
    assert sorted(p.name for p in node.path(DATA).iterdir()) == ["notes.txt"]


def test_the_tokenize_argv_parses_with_prepare_data_flags(node):
    invocation = plan_training_node(mix_stack(node.values, [CHAT])).prepared.invocation
    args = prepare_data_parser().parse_args(list(invocation.argv))
    assert args.model == "/data/models/Qwen/Qwen3.6-27B" and args.data == [f"{DATA}/mix/mix.jsonl"]
    assert args.output == f"{DATA}/tokenized.part" and args.seq_length == 8192 and args.seed == 7
    assert invocation.command[1] == "/opt/gpuhosts/speculators/src/scripts/prepare_data.py"


def release_flags(source: str) -> dict:
    """The add_argument calls of prepare_data.py's parse_args, read with ast: {flag: (kind, required, default)}."""
    found = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            words = {k.arg: k.value for k in node.keywords}
            action = ast.literal_eval(words["action"]) if "action" in words else None
            kind = ("flag" if action == "store_true" else "append" if action == "append" else
                    {"int": int, "str": str}[words["type"].id])
            required = ast.literal_eval(words["required"]) if "required" in words else False
            default = ast.literal_eval(words["default"]) if "default" in words else (False if kind == "flag" else None)
            found[ast.literal_eval(node.args[0])] = (kind, required, default)
    return found


@pytest.mark.skipif(not SPECULATORS_MIRROR.is_dir(), reason="no speculators repository to read v0.7.0 from")
def test_the_stand_in_flags_are_the_v0_7_0_parser():
    """speculators v0.7.0 scripts/prepare_data.py lines 79-182 (parse_args), read from the release's own file."""
    source = subprocess.run(["git", f"--git-dir={SPECULATORS_MIRROR}", "show", "v0.7.0:scripts/prepare_data.py"],
                            capture_output=True, text=True, check=True).stdout
    assert release_flags(source) == PREPARE_DATA_FLAGS


@pytest.mark.parametrize("source, rows, refusal", [
    # the split's files only: data/train-* (8 rows), not data/test-*
    ({}, 8, None),
    ({"split": "test"}, 1, None),
    # dataFiles replace the split's files (and only they are downloaded)
    ({"dataFiles": ["data/test-*.jsonl"]}, 1, None),
    ({"split": "validation"}, None, "the download has no file of split 'validation'"),
])
def test_a_source_converts_the_files_its_split_or_data_files_name(node, source, rows, refusal):
    stack = mix_stack(node.values, [{**CHAT, "count": 1, **source}])
    node.before(stack)
    result = node.run(node.graph(stack)[KEY])
    if refusal:
        assert result.returncode == 1 and refusal in result.stderr, result.stderr
        return
    assert result.returncode == 0, result.stderr
    (converted,) = node.path(f"{DATA}/sources").glob("*/converted.jsonl")
    assert len(converted.read_text().splitlines()) == rows
    downloaded = {p.name for p in converted.parent.glob("download/**/*") if p.is_file() and ".cache" not in p.parts}
    assert ("README.md" in downloaded) == ("dataFiles" not in source)


# The trainer stack's own sources at their pinned commits, as the Hub lays them out (tests/fixtures/hub): Glaive's one
# JSON file is train by the Hub's rule, and Magicoder's rows that repeat evol-codealpaca-v1's are dropped.
EVOL = {"repo": "theblackcat102/evol-codealpaca-v1", "revision": "c75242318519b5470635e84064baed7c78594020",
        "split": "train", "count": 6, "converter": "alpaca"}
MAGICODER = {"repo": "ise-uiuc/Magicoder-Evol-Instruct-110K", "revision": "b0079beaa0361d82412520b873715bee59cc7dd4",
             "split": "train", "count": 2, "converter": "alpaca"}
GLAIVE = {"repo": "glaiveai/glaive-function-calling-v2", "revision": "e7f4b6456019f5d8bcb991ef0dd67d8ff23221ac",
          "split": "train", "count": 3, "converter": "glaive-function-calling"}


def test_the_stack_sources_as_the_hub_lays_them_out_mix_to_distinct_samples(node):
    stack = mix_stack(node.values, [EVOL, MAGICODER, GLAIVE])
    node.before(stack)
    output = node.apply(node.graph(stack)[KEY])
    assert "converted with glaive-function-calling" in output
    manifest = json.loads(node.path(f"{DATA}/mix/manifest.json").read_text())
    kept = {s["name"].split("@")[0]: (s["kept"], s["dropped"]) for s in manifest["sources"]}
    # Magicoder's file has 5 rows, 3 of them evol's in other case and spacing: its 2 distinct ones are kept.
    assert kept == {EVOL["repo"]: (6, 0), MAGICODER["repo"]: (2, 3), GLAIVE["repo"]: (3, 0)}
    assert manifest["total"] == 11 and manifest["dropped"] == 3
    assert len(list(node.path(f"{DATA}/sources").glob("*/converted.jsonl"))) == 3


def test_a_split_the_hub_does_not_have_is_refused_naming_its_splits(node):
    stack = mix_stack(node.values, [{**GLAIVE, "count": 1}])
    node.before(stack)
    # The plan checks the split against the known listing; the node checks the download the same way.
    unit = node.graph(stack)[KEY]
    node.apply(unit)
    download = next(node.path(f"{DATA}/sources").glob("*/download"))
    script = node.path("/usr/local/lib/gpuhosts/dataset-prepare.py")
    result = subprocess.run(["python3", str(script), "files", "--split", "test", str(download)],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert "no file of split 'test' by the Hub's rule (its splits: train)" in result.stderr
    done = subprocess.run(["python3", str(script), "files", "--split", "train", str(download)],
                          capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["glaive-function-calling-v2.json"]


def test_a_smoke_run_trains_its_few_samples_first_once_into_its_own_directory(node):
    """training.smoke: DatasetPrepare tokenizes the few samples beside the full set (prepare_data.py --max-samples),
    and the launch script trains them first, into <checkpoints>-smoke, once per smoke value; the full run then
    starts from the converted drafter, not from the smoke run's checkpoints."""
    values = copy.deepcopy(node.values)
    values["training"]["smoke"] = {"samples": 2, "epochs": 1}
    stack = mix_stack(values, [CHAT])
    server = StateServer(node.path("/data/hidden_states"), values["training"]["server"]["port"])
    try:
        node.before(stack, "dflash-training")  # DatasetPrepare among them
        graph = node.graph(stack)
        smoke_rows = node.path(f"{DATA}/tokenized-smoke/data-00000-of-00001.arrow").read_text().splitlines()
        assert len(smoke_rows) == 2
        assert "--max-samples 2" in node.log("prepare_data")[-1]
        assert node.probe(graph[KEY]) == graph[KEY].desired
        (content,) = [f.content for f in graph["dflash-training"].files if f.path.endswith(".sh")]
        script = node.tree / "train.sh"
        script.write_text(content)
        node.path("/data/checkpoints/Qwen3.6-27B-DFlash").mkdir(parents=True)  # the unit's ensure makes it
        runs = [subprocess.run(["bash", str(script)], capture_output=True, text=True, env=host_env(node.tree),
                               timeout=120)]
        # What the smoke run saved is no checkpoint of the full run's: a restart does not resume from it.
        (node.path("/data/checkpoints/Qwen3.6-27B-DFlash-smoke/epoch_0")).mkdir()
        (node.path("/data/checkpoints/Qwen3.6-27B-DFlash-smoke/epoch_0/config.json")).write_text("{}")
        runs.append(subprocess.run(["bash", str(script)], capture_output=True, text=True, env=host_env(node.tree),
                                   timeout=120))
    finally:
        server.close()
    for run in runs:
        assert run.returncode == 0, run.stdout + run.stderr
    assert "smoke run: 2 samples, 1 epoch(s)" in runs[0].stdout and "smoke run" not in runs[1].stdout
    launches = (node.tree / "var/log/fakehost/torchrun.log").read_text().splitlines()
    smoke, full, again = launches[-3:]
    assert f"--data-path {DATA}/tokenized-smoke " in smoke and "--epochs 1 " in smoke
    assert "--save-path /data/checkpoints/Qwen3.6-27B-DFlash-smoke " in smoke
    assert f"--data-path {DATA}/tokenized " in full and "--save-path /data/checkpoints/Qwen3.6-27B-DFlash " in full
    assert full.endswith("--from-pretrained /data/models/z-lab/Qwen3.6-27B-DFlash.speculators") and again == full
    assert node.path("/data/checkpoints/Qwen3.6-27B-DFlash-smoke/.gpuhosts-smoke").is_file()
