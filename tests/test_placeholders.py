"""Placeholders of the committed stack files: usable beside a documentation address (the tests and the docs use
them), refused at plan time beside a real one, naming the field and the command that gives the real value."""

from __future__ import annotations

import pytest
import yaml

from conftest import KPRO5_SECRETS, PROJECT, TRAINER_SECRETS, kpro5_values, trainer_values
from gpuhosts.config import ConfigError
from gpuhosts.fields import PLACEHOLDER_DIGESTS, PLACEHOLDER_HOST_KEYS
from gpuhosts.stacks import validate_stack, validate_trainer_stack

OWN_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOwnKeyOfTheRealHostxxxxxxxxxxxxxxxxxxxxxxxx"
OWN_DIGEST = "0f" * 32


def kpro5(host: str, key: str | None = None, digest: str | None = None) -> dict:
    values = kpro5_values()
    values["host"]["ssh"]["host"] = host
    if key:
        values["host"]["ssh"]["hostKey"] = key
    if digest:
        values["nvidia"]["sha256"] = digest
    return values


CASES = [
    # (case, values, the refused field or None, words of the refusal)
    ("the committed stack, a documentation address", kpro5("192.0.2.15"), None, ""),
    ("a real address beside the committed key", kpro5("10.20.0.15", digest=OWN_DIGEST), "gpuhosts:host.ssh.hostKey",
     "ssh-keyscan -t ed25519 10.20.0.15"),
    ("a real address beside the committed digest", kpro5("10.20.0.15", key=OWN_KEY), "gpuhosts:nvidia.sha256",
     "sha256sum NVIDIA-Linux-x86_64-580.126.09.run"),
    ("a real name beside the committed key", kpro5("kpro5.lab.acme.de", digest=OWN_DIGEST),
     "gpuhosts:host.ssh.hostKey", "ssh-keyscan"),
    ("a real address, the host's own key and digest", kpro5("10.20.0.15", OWN_KEY, OWN_DIGEST), None, ""),
]


@pytest.mark.parametrize("case,values,field,words", CASES, ids=[c[0] for c in CASES])
def test_placeholders_beside_a_real_address_are_refused(case, values, field, words):
    if field is None:
        validate_stack(values, set(KPRO5_SECRETS))
        return
    with pytest.raises(ConfigError) as caught:
        validate_stack(values, set(KPRO5_SECRETS))
    paths = {problem.path: problem.message for problem in caught.value.problems}
    assert list(paths) == [field] and words in paths[field], paths


def test_a_training_node_at_a_real_address_with_the_committed_key_is_refused():
    values = trainer_values()
    values["node"]["ssh"]["host"] = "10.20.0.40"
    with pytest.raises(ConfigError) as caught:
        validate_trainer_stack(values, set(TRAINER_SECRETS))
    assert [p.path for p in caught.value.problems] == ["gpuhosts:node.ssh.hostKey"]


def test_the_placeholder_lists_are_what_the_committed_stack_files_ship():
    keys, digests = set(), set()
    for path in sorted((PROJECT / "stacks").glob("Pulumi.*.yaml")):
        config = yaml.safe_load(path.read_text())["config"]
        for section in ("gpuhosts:host", "gpuhosts:node"):
            if section in config:
                keys.add(config[section]["ssh"]["hostKey"])
        if "gpuhosts:nvidia" in config:
            digests.add(config["gpuhosts:nvidia"]["sha256"])
    assert keys == set(PLACEHOLDER_HOST_KEYS) and digests == set(PLACEHOLDER_DIGESTS)
