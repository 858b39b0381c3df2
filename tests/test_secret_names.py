"""A secret key name with a slip in it is refused at plan time, naming the field and the key it likely means, where
the stack is validated by the program (the keys set with `pulumi config set --secret` are known) and by the offline
plan (a key is declared by being named)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from conftest import KPRO5_SECRETS, PROJECT, kpro5_values
from gpuhosts.config import ConfigError
from gpuhosts.stacks import validate_stack


def test_the_program_names_the_set_secret_a_slip_likely_means():
    values = kpro5_values()
    values["services"][0]["apiKeySecret"] = "llmApiKy"
    with pytest.raises(ConfigError) as caught:
        validate_stack(values, set(KPRO5_SECRETS))
    (problem,) = caught.value.problems
    assert problem.path == "gpuhosts:services[0].apiKeySecret"
    assert "gpuhosts:llmApiKey is: write llmApiKey here" in problem.message


def test_a_name_nothing_resembles_is_only_asked_for():
    values = kpro5_values()
    values["services"][0]["apiKeySecret"] = "sglangClientsKey"
    values["services"][1]["apiKeySecret"] = "sglangClientsKey"
    with pytest.raises(ConfigError) as caught:
        validate_stack(values, set(KPRO5_SECRETS))
    messages = [p.message for p in caught.value.problems]
    assert len(messages) == 2 and all(m == "gpuhosts:sglangClientsKey is not a secret of this stack; "
                                          "`pulumi config set --secret gpuhosts:sglangClientsKey`" for m in messages)


def test_the_offline_plan_refuses_two_names_a_slip_apart(tmp_path):
    document = yaml.safe_load((PROJECT / "stacks" / "Pulumi.kpro5.yaml").read_text())
    document["config"]["gpuhosts:services"][0]["apiKeySecret"] = "llmApiKy"
    stack = tmp_path / "Pulumi.kpro5.yaml"
    stack.write_text(yaml.safe_dump(document))
    result = subprocess.run([sys.executable, "-m", "gpuhosts.cli", "plan", "kpro5", "--stack-file", str(stack),
                             "--out", str(tmp_path / "plan")], capture_output=True, text=True, cwd=PROJECT)
    assert result.returncode == 2, result.stderr
    assert "services[0].apiKeySecret" in result.stderr and "services[1].apiKeySecret" in result.stderr
    assert "llmApiKey and llmApiKy, which differ by a slip" in result.stderr or \
        "llmApiKy and llmApiKey, which differ by a slip" in result.stderr
    assert not (tmp_path / "plan").exists()
