"""Pulumi.yaml as the real CLI reads it, for every stack in stacks/.

The CLI refuses a stack before the program runs when Pulumi.yaml declares a config key without a `default` that the
stack does not set ("Stack 'trainer' is missing configuration values …": pulumi/pulumi pkg/workspace, the
stack-config validation against the project's `config:` block). Secrets are set at deploy time with
`pulumi config set --secret`, so a declared secret without a default counts as set by the operator, as the README
instructs for gpuhosts:sshPrivateKey.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import PROJECT

STACKS = sorted((PROJECT / "stacks").glob("Pulumi.*.yaml"))


def project() -> dict:
    return yaml.safe_load((PROJECT / "Pulumi.yaml").read_text())


def missing(project_config: dict, stack_config: dict) -> list[str]:
    """The CLI's rule: declared, without a default, not set by the stack (deploy-time secrets aside)."""
    found = []
    for key, declaration in (project_config or {}).items():
        declaration = declaration if isinstance(declaration, dict) else {"default": declaration}
        if "default" in declaration or key in stack_config:
            continue
        if declaration.get("secret") and key.endswith(":sshPrivateKey"):
            continue
        found.append(key)
    return found


@pytest.mark.parametrize("stack", STACKS, ids=lambda p: p.stem)
def test_the_cli_accepts_every_stack(stack: Path):
    document = yaml.safe_load(stack.read_text())
    assert missing(project()["config"], document["config"]) == []


def test_the_rule_refuses_a_declared_key_a_stack_lacks():
    declared = {"gpuhosts:host": {"description": "a Proxmox host only"}, "gpuhosts:x": {"default": 1}}
    assert missing(declared, {"gpuhosts:node": {}}) == ["gpuhosts:host"]


def test_the_readme_tells_how_to_set_the_declared_secret():
    readme = (PROJECT / "README.md").read_text()
    for key, declaration in project()["config"].items():
        if declaration.get("secret"):
            assert f"pulumi config set --secret {key}" in readme, key
