"""Which files of a dataset repository are a split's: the Hub's rule (huggingface/datasets 5.0.0
src/datasets/data_files.py, its examples in get_data_patterns' docstring and the Hub's "File names and splits" page),
the listings of the trainer stack's sources (tests/fixtures/hub) and the plan's copy of them, and the plan refusing
a source that resolves to no file."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from conftest import TRAINER_SECRETS, trainer_values
from gpuhosts.compat_data import load_rule_file
from gpuhosts.config import ConfigError
from gpuhosts.hostside.dataset_prepare import split_files, split_patterns
from gpuhosts.plans.training_node import plan_training_node
from gpuhosts.stacks import validate_trainer_stack
from gpuhosts.training import source_files

LISTINGS = Path(__file__).parent / "fixtures" / "hub"

# (files of the repository, split, the split's files). The first rows are the examples of datasets 5.0.0
# get_data_patterns' docstring and of the Hub's page; the others its patterns' edges.
SPLITS = [
    ("one file, no split named", ["README.md", "dataset.csv"], "train", ["dataset.csv"]),
    ("train and test files", ["README.md", "train.csv", "test.csv"], "test", ["test.csv"]),
    ("the same in data/", ["README.md", "data/train.csv", "data/test.csv"], "train", ["data/train.csv"]),
    ("numbered shards", ["README.md", "train_0.csv", "train_1.csv", "test_0.csv"], "train", ["train_0.csv", "train_1.csv"]),
    ("split folders", ["README.md", "data/train/shard_0.csv", "data/train/shard_1.csv", "data/test/shard_0.csv"],
     "test", ["data/test/shard_0.csv"]),
    ("sharded data/<split>-NNNNN-of-NNNNN", ["data/train-00000-of-00002.csv", "data/train-00001-of-00002.csv",
                                            "data/test-00000-of-00001.csv", "data/random-00000-of-00001.csv"],
     "random", ["data/random-00000-of-00001.csv"]),
    ("the page's names: my_train_file, train1", ["my_train_file.csv", "train1.csv", "my_validation_file.csv"],
     "train", ["my_train_file.csv", "train1.csv"]),
    ("a split name delimited only by letters is none", ["testfile.csv", "data.csv"], "train", ["data.csv", "testfile.csv"]),
    ("synonyms: training, dev, eval", ["training.jsonl", "dev.jsonl", "eval.jsonl"], "validation", ["dev.jsonl"]),
    ("eval is test", ["training.jsonl", "dev.jsonl", "eval.jsonl"], "test", ["eval.jsonl"]),
    ("valid and val are validation", ["train.json", "valid.json", "my-val.json"], "validation", ["my-val.json", "valid.json"]),
    ("evaluation and testing are test", ["x-evaluation.json", "testing.json", "train.json"], "test",
     ["testing.json", "x-evaluation.json"]),
    ("folders win over file names", ["train.jsonl", "data/dev/x.jsonl"], "train", []),
    ("a file named train.* is no folder", ["train.jsonl", "other/test.jsonl"], "test", ["other/test.jsonl"]),
    ("a suffix of a known format counts", ["train.jsonl", "train.jsonl.md"], "train", ["train.jsonl", "train.jsonl.md"]),
    ("README, hidden and __ folders are not data", ["README.md", ".hidden.jsonl", ".cache/a.jsonl", "__pycache__/b.jsonl",
                                                    "c.jsonl"], "train", ["c.jsonl"]),
    ("the most common format wins", ["a.parquet", "b.parquet", "notes.txt", "logo.png"], "train", ["a.parquet", "b.parquet"]),
    ("a draw goes to parquet", ["a.parquet", "b.jsonl"], "train", ["a.parquet"]),
    ("compressed files keep their format", ["train.jsonl.gz", "test.jsonl.gz"], "train", ["train.jsonl.gz"]),
    ("no file at all", ["README.md", ".gitattributes"], "train", []),
    ("OpenOrca: named after no split, both parquet files are train",
     [".gitattributes", "1M-GPT4-Augmented.parquet", "3_5M-GPT3_5-Augmented.parquet", "OpenOrcaLogo.png", "README.md"],
     "train", ["1M-GPT4-Augmented.parquet", "3_5M-GPT3_5-Augmented.parquet"]),
    ("Glaive: one JSON file, train", [".gitattributes", "README.md", "glaive-function-calling-v2.json"], "train",
     ["glaive-function-calling-v2.json"]),
]


@pytest.mark.parametrize("files, split, expected", [c[1:] for c in SPLITS], ids=[c[0] for c in SPLITS])
def test_a_split_is_the_files_the_hub_assigns_it(files, split, expected):
    assert split_files(files, split) == expected


def test_data_files_and_subset():
    files = ["README.md", "en/train.jsonl", "en/test.jsonl", "ko/train.jsonl", "extra/more.jsonl"]
    assert split_files(files, "train", subset="ko") == ["ko/train.jsonl"]
    assert split_files(files, "train", data_files=["extra/*.jsonl"]) == ["extra/more.jsonl"]
    assert split_files(files, "train", data_files=["*/train.jsonl"]) == ["en/train.jsonl", "ko/train.jsonl"]
    assert list(split_patterns(["en/train.jsonl", "en/test.jsonl"])) == ["train", "test"]


def _listings() -> dict[tuple[str, str], list[str]]:
    found = {}
    for path in sorted(LISTINGS.glob("*@*.json")):
        slug, revision = path.stem.rsplit("@", 1)
        items = json.loads(path.read_text())
        assert all(set(i) >= {"type", "oid", "size", "path"} for i in items), path.name
        found[(slug.replace("+", "/", 1), revision)] = sorted(i["path"] for i in items if i["type"] == "file")
    return found


def test_the_plan_knows_the_files_the_fixtures_list():
    known = {(row.repo, row.revision): sorted(row.files) for row in load_rule_file().dataset_files}
    assert known == _listings()


def test_every_source_of_the_trainer_stack_has_a_listing_and_resolves_to_files():
    stack = validate_trainer_stack(trainer_values(), TRAINER_SECRETS)
    resolved = {s.repo: source_files(s) for s in stack.training.dataset.mix}
    assert resolved == {
        "Open-Orca/OpenOrca": ["1M-GPT4-Augmented.parquet", "3_5M-GPT3_5-Augmented.parquet"],
        "theblackcat102/evol-codealpaca-v1": ["train.jsonl"],
        "ise-uiuc/Magicoder-Evol-Instruct-110K": ["data-evol_instruct-decontaminated.jsonl"],
        "thoughtworks/agentic-coding-trajectories": ["sessions.parquet"],
        "glaiveai/glaive-function-calling-v2": ["glaive-function-calling-v2.json"]}
    summary = plan_training_node(stack).summary["dataset"]
    assert [m["files"] for m in summary["mix"]] == list(resolved.values())
    assert summary["overlaps"] == [{"sources": [1, 2], "share": 0.99, "duplicatesDropped": 108900,
                                    "distinctLeft": 2100}]


def test_the_rule_the_seed_lacked_refused_openorca_and_glaive():
    """The split_files of the node before the Hub's rule (`train.*`, `train-*` or `*/train/*` only) found no file of
    either source without dataFiles: 621,786 of the 913,786 samples refused after OpenOrca's download."""
    with_data_files = {s["repo"] for s in trainer_values()["training"]["dataset"]["mix"] if s.get("dataFiles")}
    legacy = {repo: [f for f in files if f.split("/")[-1].startswith(("train.", "train-")) or "/train/" in f"/{f}"]
              for (repo, _), files in _listings().items() if repo not in with_data_files}
    assert [repo for repo, files in legacy.items() if not files] == [
        "Open-Orca/OpenOrca", "glaiveai/glaive-function-calling-v2"]


def _values(edit) -> dict:
    values = trainer_values()
    edit(values["training"]["dataset"])
    return values


def _problems(values) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        validate_trainer_stack(values, TRAINER_SECRETS)
    return {p.path: p.message for p in caught.value.problems}


def _source(index, **fields):
    def edit(dataset):
        dataset["mix"][index].update(fields)
    return edit


REFUSED = [
    ("a split the repository does not have", _source(4, split="validation"), "gpuhosts:training.dataset.mix[4].split",
     ["glaiveai/glaive-function-calling-v2@e7f4b64", "'validation'", "its splits: train",
      "glaive-function-calling-v2.json", "dataFiles"]),
    ("dataFiles that match no file", _source(2, dataFiles=["data/*.jsonl"]), "gpuhosts:training.dataset.mix[2].dataFiles",
     ["data/*.jsonl", "data-evol_instruct-decontaminated.jsonl"]),
    ("a file the converter cannot read", _source(0, dataFiles=["OpenOrcaLogo.png"]),
     "gpuhosts:training.dataset.mix[0].dataFiles", ["OpenOrcaLogo.png", ".parquet"]),
    ("the code pair counted twice, as the seed did", lambda d: (d["mix"][2].update(count=110000),
                                                               d["mix"][0].update(count=568786)),
     "gpuhosts:training.dataset.mix[2].count", ["110,000 distinct", "about 108,900", "mix[1]", "at most 2100"]),
]


@pytest.mark.parametrize("edit, path, words", [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_a_source_the_listing_refutes_is_refused_at_plan_time(edit, path, words):
    problems = _problems(_values(edit))
    assert path in problems, problems
    for word in words:
        assert word in problems[path], problems[path]


def test_an_unknown_revision_is_not_checked_against_a_listing():
    values = _values(_source(4, revision="1" * 40, split="anything"))
    stack = validate_trainer_stack(values, TRAINER_SECRETS)
    assert source_files(stack.training.dataset.mix[4]) is None


def test_the_figure(capsys):
    """The trainer stack's data set as the fixtures let it be computed: every source's listing resolved, the
    declared samples distinct, the duplicates the known overlaps drop."""
    stack = validate_trainer_stack(copy.deepcopy(trainer_values()), TRAINER_SECRETS)
    mix = stack.training.dataset.mix
    summary = plan_training_node(stack).summary["dataset"]
    resolved = sum(bool(m["files"]) for m in summary["mix"])
    dropped = sum(o["duplicatesDropped"] for o in summary["overlaps"])
    line = (f"dataset: sources={len(mix)} files_resolved={resolved}/{len(mix)} distinct={summary['expectedTotal']} "
            f"dropped_dupes~{dropped}")
    print(line)
    assert resolved == len(mix) and summary["expectedTotal"] == 913_786
