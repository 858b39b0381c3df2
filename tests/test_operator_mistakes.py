"""Each operator mistake of tests/operator_mistakes.py is refused before anything is done: a ConfigError (what
`gpuhosts plan` exits 2 with and the program raises before any resource), naming the field the mistake is in, with
words that say what to write; the `mistakes:` figure counts them."""

from __future__ import annotations

import copy

import pytest

from conftest import KPRO5_SECRETS, TRAINER_SECRETS, kpro5_values, trainer_values
from gpuhosts.config import ConfigError
from gpuhosts.stacks import validate_stack, validate_trainer_stack
from operator_mistakes import DELETE, MISTAKES

# Words of a fix: what to write, set, use, give, remove, lower or put, or the form a value must take.
FIX_WORDS = ("write", "set ", "use ", "give", "remove", "lower", "put ", "must ", "is required", "one of", "name ",
             "add ", "quote", "pulumi config set", "is not 1 to", "is not a", "choose", "pin ", "declare", "raise",
             "make ", "list each")
RAW = ("Input should", "String should", "should match pattern", "valid tuple", "Value error")


def mistaken(stack: str, path: tuple, value):
    values = copy.deepcopy(kpro5_values() if stack == "kpro5" else trainer_values())
    target = values
    for part in path[:-1]:
        target = target[part]
    if value is DELETE:
        target.pop(path[-1])
    else:
        target[path[-1]] = value
    return values


def refusal(stack: str, values) -> list:
    validate, secrets = (validate_stack, KPRO5_SECRETS) if stack == "kpro5" else (validate_trainer_stack,
                                                                                  TRAINER_SECRETS)
    # A key given in the file as plain text is no secret of the stack (`pulumi config set` without --secret).
    with pytest.raises(ConfigError) as caught:
        validate(values, set(secrets) - set(values))
    return caught.value.problems


def test_there_are_at_least_a_hundred_and_each_is_one_slip():
    assert len(MISTAKES) >= 100
    assert len({(stack, path, repr(value)) for stack, path, value, _ in MISTAKES}) == len(MISTAKES)


@pytest.mark.parametrize("stack,path,value,field", MISTAKES,
                         ids=[f"{m[0]}:{'.'.join(map(str, m[1]))}={m[2]!r}"[:90] for m in MISTAKES])
def test_a_mistake_is_refused_naming_its_field_and_the_fix(stack, path, value, field):
    problems = refusal(stack, mistaken(stack, path, value))
    named = [p for p in problems if p.path == field]
    assert named, [(p.path, p.message) for p in problems]
    message = named[0].message
    assert any(word in message for word in FIX_WORDS), message
    assert not any(raw in message for raw in RAW), message
