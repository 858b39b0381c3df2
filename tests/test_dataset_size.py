"""The data set's size and its over-long samples, from what speculators' prepare_data.py measured
(gpuhosts/measured/, written by `make verify-prepare-data`): what the measurement holds, how the plan extrapolates
it to the mix, the refusals, and the pre-flight's disk figure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import TRAINER_SECRETS, trainer_values
from gpuhosts.config import ConfigError
from gpuhosts.dataset_size import estimate, measurement, measurement_path, share_over, stored_tokens, whole_tokens
from gpuhosts.hostside.dataset_prepare import CONVERTERS
from gpuhosts.plans.node_preflight import disk_needed_gb
from gpuhosts.plans.training_node import plan_training_node
from gpuhosts.stacks import validate_trainer_stack

ROOT = Path(__file__).resolve().parents[1]
MEASURED = json.loads(measurement_path("0.7.0").read_text())
AGENTIC = "thoughtworks/agentic-coding-trajectories"


def test_the_measurement_says_what_produced_it():
    assert MEASURED["speculators"] == "0.7.0" and "scripts/prepare_data.py" in MEASURED["producedBy"]
    assert "locks/speculators-0.7.0-py3.12.txt" in MEASURED["producedBy"]
    assert MEASURED["versions"]["speculators"] == "0.7.0"
    assert MEASURED["verifier"]["kind"] == "Qwen3VLProcessor"


# What prepare_data.py stores, column by column, as the run found it: datasets' writer narrows `input_ids` to int32
# (datasets 5.0.0 src/datasets/arrow_writer.py OptimizedTypedSequence), the regex loss mask is bool, and a processor
# verifier adds the conversation itself (speculators v0.7.0 preprocessing.py `_preprocess_batch`, results["messages"]).
COLUMNS = [("input_ids", "list<item: int32>"), ("loss_mask", "list<item: bool>"), ("seq_len", "int64"),
           ("messages", "list<item: struct<role: string, content: string>>")]


@pytest.mark.parametrize("column, arrow_type", COLUMNS, ids=[c for c, _ in COLUMNS])
def test_each_stored_column_is_of_the_measured_type(column, arrow_type):
    assert MEASURED["stored"]["arrowTypes"][column] == arrow_type
    assert MEASURED["stored"]["columnBytes"][column] > 0


def test_bytes_per_token_are_the_arrow_files_bytes_over_the_tokens_they_hold():
    stored = MEASURED["stored"]
    arrow = sum(size for name, size in stored["files"].items() if name.endswith(".arrow"))
    assert arrow == stored["arrowBytes"]
    assert MEASURED["bytesPerToken"] == pytest.approx(arrow / stored["tokens"], abs=1e-3)
    messages = stored["columnBytes"]["messages"]
    assert MEASURED["messageBytesPerToken"] == pytest.approx(messages / stored["tokens"], abs=1e-3)
    assert MEASURED["tokenBytesPerToken"] == pytest.approx((arrow - messages) / stored["tokens"], abs=1e-3)
    # The token ids alone take 4 bytes each: what is stored beyond them is the mask, the lengths and the messages.
    assert 4 < MEASURED["bytesPerToken"] < 4 + 8
    assert stored["samples"] == stored["repeat"] * sum(c["rows"] for c in MEASURED["converters"].values())


def expected_rows(converter: str) -> int:
    lines = (ROOT / "tests" / "fixtures" / "datasets" / converter / "expected.jsonl").read_text().splitlines()
    return sum(1 for line in lines if json.loads(line) is not None)


@pytest.mark.parametrize("converter", CONVERTERS)
def test_every_converter_s_usable_fixture_rows_were_tokenized(converter):
    entry = MEASURED["converters"][converter]
    assert entry["rows"] == expected_rows(converter) == len(entry["tokens"])
    assert all(n > 0 for n in entry["tokens"]) and entry["tokens"] == sorted(entry["tokens"])


# (ranges, limit, share longer than the limit, mean tokens stored when cut at it)
SHAPES = [
    (((100, 100, 0.5), (300, 300, 0.5)), 200, 0.5, 150.0),
    (((100, 100, 0.5), (300, 300, 0.5)), 300, 0.0, 200.0),
    (((0, 8192, 0.25), (8192, 16384, 0.75)), 8192, 0.75, 0.25 * 4096 + 0.75 * 8192),
    (((0, 1000, 1.0),), 500, 0.5, 0.5 * 250 + 0.5 * 500),
    (((0, 1000, 1.0),), 4000, 0.0, 500.0),
]


@pytest.mark.parametrize("ranges, whole", [(((100, 100, 0.5), (300, 300, 0.5)), 200.0),
                                           (((0, 8192, 0.25), (8192, 16384, 0.75)), 0.25 * 4096 + 0.75 * 12288)])
def test_mean_length_uncut(ranges, whole):
    assert whole_tokens(ranges) == pytest.approx(whole)


@pytest.mark.parametrize("ranges, limit, over, stored", SHAPES)
def test_share_over_and_tokens_stored_of_a_length_distribution(ranges, limit, over, stored):
    assert share_over(ranges, limit) == pytest.approx(over)
    assert stored_tokens(ranges, limit) == pytest.approx(stored)


def trainer():
    return validate_trainer_stack(trainer_values(), TRAINER_SECRETS)


def test_the_stack_s_estimate_uses_the_published_lengths_or_the_measured_rows():
    found = estimate(trainer().training)
    bases = {s.repo: s.basis.split(":")[0] for s in found.sources}
    assert bases[AGENTIC] == "published (cl100k_base tokens)"
    assert {b for r, b in bases.items() if r != AGENTIC} == {"measured"}
    agentic = next(s for s in found.sources if s.repo == AGENTIC)
    # The card: 7 % of the sessions up to 8K (its shares add up to 101 %).
    assert agentic.over == pytest.approx(0.94 / 1.01)
    assert found.samples == 913786
    assert found.over == pytest.approx(sum(s.count * s.over for s in found.sources) / 913786)
    # The token columns per stored token; the messages, which prepare_data.py keeps whole, per token uncut.
    assert agentic.whole > 8192 > agentic.stored
    assert found.size_gb == pytest.approx(sum(
        s.count * (s.stored * MEASURED["tokenBytesPerToken"] + s.whole * MEASURED["messageBytesPerToken"])
        for s in found.sources) / 1e9)


def test_the_plan_reports_size_and_over_long_samples_and_the_preflight_uses_that_size():
    stack = trainer()
    summary = plan_training_node(stack).summary["dataset"]
    found = estimate(stack.training)
    assert summary["sizeGb"] == round(found.size_gb, 1)
    assert (summary["bytesPerStoredToken"], summary["messageBytesPerToken"]) == (
        MEASURED["tokenBytesPerToken"], MEASURED["messageBytesPerToken"])
    longer = summary["longerThanMaxSeqLen"]
    assert (longer["maxSeqLen"], longer["policy"], longer["share"]) == (8192, "cut", round(found.over, 4))
    assert [s["repo"] for s in longer["sources"]] == [s.repo for s in stack.training.dataset.mix]
    assert disk_needed_gb(stack) == int(55 + 4 + found.size_gb + 200 + 0.999)
    assert any(f"mix[3] {AGENTIC}: about 93% of its 15,000 samples are longer than hyper.maxSeqLen 8192" in w
               for w in stack.warnings)


def test_a_longer_sequence_cuts_fewer_samples_and_stores_more_tokens():
    values = trainer_values()
    short = estimate(validate_trainer_stack(values, TRAINER_SECRETS).training)
    values["training"]["hyper"]["maxSeqLen"] = 32768
    values["training"]["server"]["maxModelLen"] = 32768
    long = estimate(validate_trainer_stack(values, TRAINER_SECRETS).training)
    assert long.over < short.over and long.tokens > short.tokens and long.size_gb > short.size_gb


def dataset(values):
    return values["training"]["dataset"]


BAD = [
    ("sizeGb given for a mix", lambda v: dataset(v).update(sizeGb=1.3), "gpuhosts:training.dataset",
     "sizeGb is derived for a mix"),
    ("a policy that does not exist", lambda v: dataset(v).update(longSamples="trim"),
     "gpuhosts:training.dataset.longSamples", "cut"),
    ("a share above one", lambda v: dataset(v).update(maxCutShare=1.5), "gpuhosts:training.dataset.maxCutShare",
     "1"),
    ("more cut than allowed", lambda v: dataset(v).update(maxCutShare=0.001), "gpuhosts:training.hyper.maxSeqLen",
     f"mix[3] {AGENTIC} 93% of 15,000"),
    ("a pre-made set without its size", lambda v: v["training"].update(dataset={
        "name": "premade", "source": "https://data.example/set/", "manifestSha256": "a" * 64, "samples": 10}),
     "gpuhosts:training.dataset", "sizeGb is required with source"),
]


@pytest.mark.parametrize("case, mutate, path, words", BAD, ids=[case for case, *_ in BAD])
def test_bad_size_or_length_settings_are_refused_naming_the_field(case, mutate, path, words):
    values = trainer_values()
    mutate(values)
    if case == "a pre-made set without its size":
        values["training"].pop("smoke")
    with pytest.raises(ConfigError) as caught:
        validate_trainer_stack(values, TRAINER_SECRETS)
    matching = [p for p in caught.value.problems if p.path == path]
    assert matching and any(words in p.message for p in matching), str(caught.value)


def test_the_pinned_release_s_measurement_is_the_committed_one():
    found = measurement("0.7.0")
    assert found.version == "0.7.0" and found.bytes_per_token == MEASURED["bytesPerToken"]
    assert set(found.lengths) == set(CONVERTERS)
