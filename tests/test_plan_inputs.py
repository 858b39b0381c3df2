"""`gpuhosts plan` on mistaken input: every problem named (file, line, field), nothing written, nothing deleted."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from conftest import PROJECT

KPRO5 = PROJECT / "stacks" / "Pulumi.kpro5.yaml"


def plan(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuhosts.cli", "plan", *argv], capture_output=True, text=True,
                          cwd=PROJECT, timeout=120)


def test_out_onto_a_folder_no_plan_wrote_is_refused_and_left_alone(tmp_path):
    kept = tmp_path / "mine.txt"
    kept.write_text("mine\n")
    result = plan("kpro5", "--out", str(tmp_path))
    assert result.returncode == 1 and "holds files that no gpuhosts plan wrote" in result.stderr, result.stderr
    assert kept.read_text() == "mine\n" and sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]


def test_a_plan_folder_is_replaced_by_the_next_plan(tmp_path):
    out = tmp_path / "plan"
    assert plan("kpro5", "--out", str(out)).returncode == 0
    (out / "stale").write_text("from an older plan\n")
    assert plan("kpro5", "--out", str(out)).returncode == 0
    assert not (out / "stale").exists() and (out / ".gpuhosts-plan").is_file()


@pytest.mark.parametrize("name", ["../..", "..", ".", "a/b", "kpro5;id", ""])
def test_a_stack_name_that_is_not_one_is_refused(name, tmp_path):
    result = plan(name, "--stack-file", str(KPRO5), "--out", str(tmp_path / "out"))
    assert result.returncode == 2 and "is not a stack name" in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("content, words", [
    (b"config: [\n", ":2:1: not valid YAML"),
    (b"config:\n  gpuhosts:host: {name: kpro5\n", ":3:1: not valid YAML"),
    (b"- just\n- a list\n", ": a stack file is a mapping with a `config:` mapping"),
    (b"config: [1, 2]\n", ": a stack file is a mapping with a `config:` mapping"),
    (b"config:\n  gpuhosts:host: \xff\xfe\n", ": is not UTF-8 text"),
    (b"config:\n  gpuhosts:kind: proxmox\n  gpuhosts:gpus: []\n  gpuhosts:kind: trainer\n",
     ":4:3: not valid YAML: key 'gpuhosts:kind' is given twice (first on line 2)"),
    (b"config:\n  gpuhosts:host:\n    name: kpro5\n    ssh: {host: a, port: 22, port: 2222}\n",
     ":4:30: not valid YAML: key 'port' is given twice (first on line 4)"),
    (b"gpuhosts:kind: proxmox\ngpuhosts:host: {name: kpro5}\n",
     ": gpuhosts:kind: is at the top level of the stack file, where Pulumi hands nothing to the program; every key "
     "sits under `config:`"),
    (b"config:\n  gpuhosts:kind: proxmox\ngpuhosts:services: []\n", ": gpuhosts:services: is at the top level"),
    (b"config:\n  gpuhosts:kind: proxmox\n  host: {name: kpro5}\n",
     ": config.host: has no namespace; every key under `config:` is NAMESPACE:NAME, so write gpuhosts:host"),
    (b"config:\n  kind: trainer\n", ": config.kind: has no namespace; every key under `config:` is NAMESPACE:NAME, "
     "so write gpuhosts:kind"),
], ids=["unclosed list", "unclosed mapping", "a list", "config a list", "latin-1 bytes", "a key twice under config",
        "a key twice in a section", "no config wrapper", "a section beside config", "a section without namespace",
        "the kind without namespace"])
def test_a_broken_stack_file_is_an_invalid_stack_named_without_a_traceback(tmp_path, content, words):
    """Exit 2, as for any other invalid stack: the file (and its line where YAML has one) and the key, and the fix."""
    stack = tmp_path / "Pulumi.kpro5.yaml"
    stack.write_bytes(content)
    result = plan("kpro5", "--stack-file", str(stack), "--out", str(tmp_path / "out"))
    assert result.returncode == 2 and f"{stack}{words}" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_merge_key_is_not_a_duplicate(tmp_path):
    from gpuhosts.plan import read_stack_file

    stack = tmp_path / "Pulumi.x.yaml"
    stack.write_text("base: &ssh {host: a, port: 22}\nconfig:\n  gpuhosts:node: {ssh: {<<: *ssh, port: 2222}}\n")
    with pytest.raises(Exception, match="base: is at the top level"):
        read_stack_file(stack)
    stack.write_text("config:\n  gpuhosts:a: &ssh {host: a, port: 22}\n  gpuhosts:node: {ssh: {<<: *ssh, port: 2222}}\n")
    values, _secure = read_stack_file(stack)
    assert values["node"] == {"ssh": {"host": "a", "port": 2222}}


def test_a_misspelt_namespace_is_an_error_naming_the_intended_key(tmp_path):
    document = yaml.safe_load(KPRO5.read_text())
    document["config"]["gpuhost:services"] = document["config"].pop("gpuhosts:services")
    stack = tmp_path / "Pulumi.kpro5.yaml"
    stack.write_text(yaml.safe_dump(document))
    result = plan("kpro5", "--stack-file", str(stack), "--out", str(tmp_path / "out"))
    assert result.returncode == 2, result.stderr
    assert "gpuhost:services: namespace 'gpuhost' is not 'gpuhosts'; did you mean gpuhosts:services?" in result.stderr
    assert not (tmp_path / "out").exists()


def test_each_warning_is_printed_once(tmp_path):
    """The program logs the stack's warnings too, as `pulumi preview` shows them; under the plan they come once."""
    result = plan("kpro5", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.strip()]
    assert warnings and all(line.startswith("warning: ") for line in warnings), result.stderr
    assert len(warnings) == len(set(warnings)) and sum("192.0.2.15 is a placeholder" in w for w in warnings) == 1


def test_placeholders_are_named_in_the_warnings(tmp_path):
    result = plan("trainer", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert "gpuhosts:node.ssh.host 192.0.2.40 is a placeholder" in result.stderr
    assert "training.dataset.mix[1] theblackcat102/evol-codealpaca-v1 and mix[2]" in result.stderr
