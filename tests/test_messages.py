"""Refusals a person can act on: each names its field (a config path) and says what to write, in the words of a
stack file, never the validator's own text or a bare regular expression."""

from __future__ import annotations

import copy
import inspect
import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from pydantic import BaseModel

import gpuhosts.benchmarks
import gpuhosts.config
import gpuhosts.metrics
import gpuhosts.services
import gpuhosts.training
from conftest import KPRO5_SECRETS, TRAINER_SECRETS, kpro5_values, trainer_values
from gpuhosts.config import PATTERN_WORDS, ConfigError
from gpuhosts.stacks import validate_stack, validate_trainer_stack

# The validator's own phrases (pydantic 2's messages): none may reach an operator.
RAW = ("Input should", "String should", "should match pattern", "valid tuple", "valid list", "valid dictionary",
       "Value error", "type=", "pydantic")


def patterns(value) -> set[str]:
    found = set()
    if isinstance(value, dict):
        if isinstance(value.get("pattern"), str):
            found.add(value["pattern"])
        for item in value.values():
            found |= patterns(item)
    elif isinstance(value, list):
        for item in value:
            found |= patterns(item)
    return found


def test_every_pattern_of_the_typed_models_has_words():
    used = set()
    for module in (gpuhosts.config, gpuhosts.services, gpuhosts.training, gpuhosts.benchmarks, gpuhosts.metrics):
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseModel) and cls.__module__ == module.__name__:
                used |= patterns(cls.model_json_schema())
    assert used and used <= set(PATTERN_WORDS), sorted(used - set(PATTERN_WORDS))


MISTAKES = [
    # (case, kind, change of the committed values, the field named, words of the fix)
    ("kernelArgs as one string", "kpro5", lambda v: v["host"].update(kernelArgs="iommu=pt"), "gpuhosts:host.kernelArgs",
     "must be a list, e.g. [a, b]"),
    ("user@host as the host", "kpro5", lambda v: v["host"]["ssh"].update(host="root@10.20.0.15"),
     "gpuhosts:host.ssh.host", "user: root"),
    ("a data set name with a blank", "trainer", lambda v: v["training"]["dataset"].update(name="Qwen Mix!"),
     "gpuhosts:training.dataset.name", "lower-case letters, digits"),
    ("a port beyond 65535", "kpro5", lambda v: v["services"][0].update(port=70000), "gpuhosts:services[0].port",
     "must be at most 65535"),
    ("a Python version as a number", "kpro5", lambda v: v["services"][0].update(python="3.1x"),
     "gpuhosts:services[0].python", 'a Python 3 release, quoted, e.g. "3.12"'),
    ("gpus as a mapping", "kpro5", lambda v: v.update(gpus={"address": "0000:01:00.0"}), "gpuhosts:gpus",
     "must be a list"),
    ("a boolean as a word", "kpro5", lambda v: v["host"].update(allowReboot="perhaps"), "gpuhosts:host.allowReboot",
     "must be true or false"),
]


def refusal(kind: str, values: dict) -> ConfigError:
    validate, secrets = (validate_stack, KPRO5_SECRETS) if kind == "kpro5" else (validate_trainer_stack,
                                                                                 TRAINER_SECRETS)
    with pytest.raises(ConfigError) as caught:
        validate(values, set(secrets))
    return caught.value


@pytest.mark.parametrize("case,kind,change,field,words", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_a_mistake_is_refused_naming_the_field_and_the_fix(case, kind, change, field, words):
    values = kpro5_values() if kind == "kpro5" else trainer_values()
    change(values)
    problems = {p.path: p.message for p in refusal(kind, values).problems}
    assert field in problems and words in problems[field], problems
    assert not [m for m in problems.values() if any(raw in m for raw in RAW)], problems


def leaves(value, path=()):
    """Every scalar of a stack's values with its path."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from leaves(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from leaves(item, (*path, index))
    else:
        yield path


KPRO5_LEAVES = [p for p in leaves(kpro5_values()) if p and p[0] != "kind"]
WRONG = st.one_of(st.just([1, 2]), st.just({"a": 1}), st.just(-1), st.just(3.5), st.just(True),
                  st.text(min_size=1, max_size=8))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(KPRO5_LEAVES), wrong=WRONG)
def test_any_refusal_names_a_field_and_speaks_no_validator_text(path, wrong):
    values = copy.deepcopy(kpro5_values())
    target = values
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = wrong
    try:
        validate_stack(values, set(KPRO5_SECRETS))
    except ConfigError as error:
        for problem in error.problems:
            assert problem.path.startswith("gpuhosts:"), problem
            assert not any(raw in problem.message for raw in RAW), (path, json.dumps(wrong), problem.message)
