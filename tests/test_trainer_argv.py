"""The trainer stack's speculators command lines against the flag tables of speculators' own parsers, captured by
tests/verify_engines/check_speculators.py from the real packages (tests/fixtures/engines/speculators-*.json):
every flag is one the program knows, every value within its choices, every required flag present — for the pinned
release and for 0.9.0, the stack rendered with only speculators.version changed."""

from __future__ import annotations

import dataclasses
import json

import pytest

from conftest import FIXTURES, TRAINER_SECRETS, trainer_values
from gpuhosts.plans.training_node import engine_invocations, plan_training_node
from gpuhosts.stacks import validate_trainer_stack

PINNED = validate_trainer_stack(trainer_values(), TRAINER_SECRETS)


def stack_at(version: str):
    training = PINNED.training
    return dataclasses.replace(PINNED, training=training.model_copy(
        update={"speculators": training.speculators.model_copy(update={"version": version})}))


def fixture(version: str) -> dict:
    return json.loads((FIXTURES / "engines" / f"speculators-{version}.json").read_text())


def words_of(argv: list[str], flags: dict) -> list[tuple[str, list[str]]]:
    """(flag, its values) in order; positional words before the first flag, and everything after `--`, left out."""
    found, current = [], None
    for word in argv:
        if word == "--":
            break
        if word in flags or (word.startswith("--") and len(word) > 2):
            current = (word, [])
            found.append(current)
        elif current is not None:
            current[1].append(word)
    return found


VERSIONS = [PINNED.training.speculators.version, "0.9.0"]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_flag_is_known_with_a_value_it_accepts(version):
    table = fixture(version)
    assert table["version"] == version and all(table["flags"].values()), "a parser's table is missing"
    invocations = [i for i in engine_invocations(stack_at(version)) if i["package"] == "speculators"]
    assert {i["version"] for i in invocations} == {version}
    assert {i["program"] for i in invocations} == set(table["flags"])
    for invocation in invocations:
        flags = table["flags"][invocation["program"]]
        if invocation["program"] == "speculators.convert.convert_model":
            assert len(invocation["argv"]) == 4 and invocation["argv"][2] in flags["algorithm"]["choices"]
            continue
        used = words_of(invocation["argv"], flags)
        for flag, values in used:
            assert flag in flags, f"{invocation['name']}: {flag} is not a flag of {invocation['program']} {version}"
            spec = flags[flag]
            assert bool(values) == spec["takesValue"], f"{flag} {values}"
            if spec["choices"] is not None:
                assert all(v in spec["choices"] for v in values), f"{flag} {values} not in {spec['choices']}"
        required = {f for f, spec in flags.items() if spec.get("required")}
        assert required <= {f for f, _ in used}, f"{invocation['name']} lacks {required - {f for f, _ in used}}"


@pytest.mark.parametrize("version", VERSIONS)
def test_the_trainer_gets_the_layout_from_the_converted_drafter(version):
    (train,) = [i for i in engine_invocations(stack_at(version)) if i["name"] == "speculators-train"]
    argv = train["argv"]
    # --from-pretrained refuses the decoder-shaping flags beside it; the converted config carries [S,S,S,S,F].
    assert not {"--num-layers", "--sliding-window", "--full-attention-indices"} & set(argv)
    assert argv[-2:] == ["--from-pretrained", "/data/models/z-lab/Qwen3.6-27B-DFlash.speculators"]
    endpoint = argv[argv.index("--vllm-endpoint") + 1]
    assert endpoint == "http://127.0.0.1:8000/v1"  # the OpenAI client's base URL
    assert argv[argv.index("--total-seq-len") + 1] == str(PINNED.training.hyper.max_seq_len)


def test_a_bump_to_0_9_0_keeps_every_training_setting_and_moves_the_data_step_to_the_server():
    pinned, bumped = engine_invocations(PINNED), engine_invocations(stack_at("0.9.0"))
    programs = {i["name"]: i["program"] for i in bumped}
    assert programs["speculators-convert"] == "speculators convert"
    assert programs["speculators-train"] == "speculators.train"
    # The trainer's flags are the same words, the defaults 0.9 moved among them (loss kl_div → ce, anchors
    # 3072 → 512): only how the programs are started differs.
    train = {i["name"]: i for i in pinned}["speculators-train"]
    argv = {i["name"]: i for i in bumped}["speculators-train"]["argv"]
    assert argv == train["argv"]
    assert argv[argv.index("--loss-fn") + 1] == "kl_div" and argv[argv.index("--max-anchors") + 1] == "3072"
    # 0.9's data step has the verifier's vLLM server render each conversation: the hidden-state server is that
    # server, so the data waits for its check.
    prepare = {i["name"]: i for i in bumped}["speculators-prepare-data"]
    assert prepare["program"] == "speculators prepare-data"
    assert prepare["argv"][prepare["argv"].index("--render-endpoint") + 1] == "http://127.0.0.1:8000"
    assert "speculators-prepare-data" not in {i["name"] for i in pinned}
    graph = plan_training_node(stack_at("0.9.0")).graph
    (data,) = [u for u in graph.apply_order if u.kind == "DatasetPrepare"]
    assert "hidden-state-check" in data.needs
    (pinned_data,) = [u for u in plan_training_node(PINNED).graph.apply_order if u.kind == "DatasetPrepare"]
    assert "hidden-state-check" not in pinned_data.needs


def test_a_release_without_a_row_is_refused():
    with pytest.raises(ValueError, match="speculators 0.5.0 is in no checked row"):
        engine_invocations(stack_at("0.5.0"))


def test_the_hidden_state_servers_vllm_flags_are_the_vllm_drivers():
    from gpuhosts.engines import DRIVERS

    training = PINNED.training
    server = training.server.model_copy(update={"data_parallel_size": 2, "extra_args": ("--enforce-eager",)})
    words = DRIVERS["vllm"].hidden_state_server_args(training.vllm, server)
    assert words == ["--host", "127.0.0.1", "--port", "8000", "--tensor-parallel-size", "4", "--data-parallel-size",
                     "2", "--gpu-memory-utilization", "0.85", "--max-model-len", "8192", "--enforce-eager"]
    (launch,) = [i for i in engine_invocations(PINNED) if i["name"] == "speculators-launch-vllm"]
    assert launch["argv"][launch["argv"].index("--") + 1:] == DRIVERS["vllm"].hidden_state_server_args(
        training.vllm, training.server)


def test_the_trainers_arguments_are_typed_and_spelled_by_the_release():
    from gpuhosts.engines import speculators

    args = speculators.TrainArgs(verifier="/v", data="/d", endpoint="http://127.0.0.1:8000/v1", save="/s", epochs=3,
                                 lr=3e-4, block_size=16, target_layer_ids=(2, 17), total_seq_len=8192,
                                 loss_fn="kl_div", max_anchors=3072, per_position_loss_weight="fixed-exp-decay")
    _invocation, groups = speculators.train("0.7.0", "/venv", "/src", 4, args, ("--x",), "/start", {})
    assert groups == [["--verifier-name-or-path", "/v"], ["--data-path", "/d"],
                      ["--vllm-endpoint", "http://127.0.0.1:8000/v1"], ["--save-path", "/s"], ["--epochs", "3"],
                      ["--lr", "0.0003"], ["--speculator-type", "dflash"], ["--block-size", "16"],
                      ["--target-layer-ids", "2", "17"], ["--total-seq-len", "8192"], ["--loss-fn", "kl_div"],
                      ["--max-anchors", "3072"], ["--per-position-loss-weight", "fixed-exp-decay"], ["--x"]]
    with pytest.raises(TypeError):
        speculators.TrainArgs(verifier="/v", seq_len=8192)  # a misspelt meaning is an error, not a dropped flag
