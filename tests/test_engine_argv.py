"""Each service's rendered engine command line against the flag tables of the engine's own parser, captured from the
real packages by `make verify-engines` (tests/verify_engines/, tests/fixtures/engines/<engine>-<version>.json):
every flag one the release knows, a value after each flag that takes one and none after one that does not, every
value within the parser's choices, every engine variable one the release reads — at the pinned release and at the
newest one of compat-rules.yaml, the typed service with only engine.version changed (what a bump is)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import FIXTURES, KPRO5_SECRETS, kpro5_values
from gpuhosts.compat import load_rules
from gpuhosts.stacks import validate_stack
from gpuhosts.plans.inference_service import engine_args, engine_environment

STACK = validate_stack(kpro5_values(), KPRO5_SECRETS)
NEWEST = load_rules().newest
# Variables an engine reads by its own prefix; CUDA_* (the CUDA runtime's), HF_* (huggingface_hub's) and the rest
# (PATH, …) are not the engine's settings and are not in its tables.
ENGINE_PREFIXES = {"sglang": ("SGLANG_", "SGL_"), "vllm": ("VLLM_",)}


def fixture(engine: str, version: str) -> dict:
    path = FIXTURES / "engines" / f"{engine}-{version}.json"
    assert path.is_file(), f"no flag table for {engine} {version}: run `make verify-engines` and commit {path.name}"
    return json.loads(path.read_text())


def bumped(service, version: str):
    return service.model_copy(update={"engine": service.engine.model_copy(update={"version": version})})


def flag_words(engine: str, argv: list[str]) -> list[str]:
    """The words the engine's parser reads: after the launcher (SGLang), after `serve` and the model (vLLM)."""
    if engine == "sglang":
        return argv[2:]
    assert argv[1] == "serve", argv[:3]
    return argv[3:]


def argv_problems(words: list[str], table: dict, engine: str = "sglang") -> list[str]:
    """What the parser would refuse, read off its flag table. vLLM's FlexibleArgumentParser reads `--max_model_len`
    as `--max-model-len` (vllm/utils/argparse_utils.py), so its flags are compared with dashes."""
    problems, index = [], 0
    while index < len(words):
        word = words[index]
        flag, inline = (word.split("=", 1) + [None])[:2] if word.startswith("--") else (word, None)
        if engine == "vllm" and flag.startswith("--"):
            flag = "--" + flag[2:].replace("_", "-")
        row = table.get(flag)
        if row is None:
            problems.append(f"unknown flag {flag}" if flag.startswith("-") else f"stray word {word!r}")
            index += 1
            continue
        if not row["value"]:
            if inline is not None:
                problems.append(f"{flag} takes no value")
            index += 1
            continue
        value = inline
        if value is None:
            if index + 1 >= len(words) or (words[index + 1].startswith("--") and words[index + 1] in table):
                problems.append(f"{flag} needs a value")
                index += 1
                continue
            value = words[index + 1]
            index += 1
        if row["choices"] is not None and value not in row["choices"]:
            problems.append(f"{flag} {value!r} is not one of {row['choices']}")
        index += 1
    return problems


def cases():
    for service in STACK.services:
        engine = service.engine.name
        yield pytest.param(service, id=f"{service.name}-{service.engine.version}")
        yield pytest.param(bumped(service, NEWEST[engine]), id=f"{service.name}-{NEWEST[engine]}")


@pytest.mark.parametrize("service", list(cases()))
def test_every_rendered_flag_is_one_the_release_parses(service):
    engine, version = service.engine.name, service.engine.version
    table = fixture(engine, version)
    argv = engine_args(service)
    assert argv_problems(flag_words(engine, argv), table["flags"], engine) == [], f"{engine} {version}: {argv}"


@pytest.mark.parametrize("service", list(cases()))
def test_every_engine_variable_the_unit_sets_is_one_the_release_reads(service):
    engine, version = service.engine.name, service.engine.version
    known = set(fixture(engine, version)["environment"])
    ours = [k for k in engine_environment(service, STACK) if k.startswith(ENGINE_PREFIXES[engine])]
    assert [k for k in ours if k not in known] == []


def test_the_trainer_hidden_state_server_flags_are_ones_its_vllm_parses():
    from conftest import TRAINER_SECRETS, trainer_values
    from gpuhosts.plans import training_node
    from gpuhosts.stacks import validate_trainer_stack

    if not hasattr(training_node, "engine_invocations"):
        pytest.skip("the training node plan does not list its invocations")
    trainer = validate_trainer_stack(trainer_values(), TRAINER_SECRETS)
    served = [i for i in training_node.engine_invocations(trainer) if i["package"] == "vllm"]
    assert served
    for invocation in served:
        table = fixture("vllm", invocation["version"])["flags"]
        words = invocation["argv"][1:] if invocation["program"].endswith("serve") else flag_words("vllm", invocation["argv"])
        assert argv_problems(words, table, "vllm") == [], invocation["name"]


@pytest.mark.parametrize("engine, version, words, problem", [
    # sglang 0.5.23 renamed the flag without an alias (compat-rules.yaml flagRenames): each release knows one.
    ("sglang", "0.5.11", ["--mamba-radix-cache-strategy", "extra_buffer"], "unknown flag --mamba-radix-cache-strategy"),
    ("sglang", "0.5.23", ["--mamba-scheduler-strategy", "extra_buffer"], "unknown flag --mamba-scheduler-strategy"),
    ("sglang", "0.5.11", ["--mamba-scheduler-strategy", "bigger_buffer"], "'bigger_buffer' is not one of"),
    ("sglang", "0.5.11", ["--tp-size"], "--tp-size needs a value"),
    ("sglang", "0.5.11", ["--enable-metrics=yes"], "--enable-metrics takes no value"),
    ("vllm", "0.26.0", ["--dtype", "float99"], "'float99' is not one of"),
    ("vllm", "0.26.0", ["--max_model_len", "4096", "--enable-prefix-caching=1"], "takes no value"),
    ("vllm", "0.26.0", ["--gpu-memory-utilisation", "0.9"], "unknown flag --gpu-memory-utilisation"),
])
def test_the_tables_catch_what_the_parsers_refuse(engine, version, words, problem):
    found = argv_problems(words, fixture(engine, version)["flags"], engine)
    assert found and problem in found[0], found


@pytest.mark.parametrize("path", sorted((FIXTURES / "engines").glob("*.json")), ids=lambda p: p.name)
def test_a_flag_table_names_its_source(path: Path):
    table = json.loads(path.read_text())
    assert table["source"].startswith(f"{table['package']} {table['version']} ")
    assert path.name == f"{table['package']}-{table['version']}.json"
