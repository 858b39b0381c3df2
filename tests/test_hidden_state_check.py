"""The hidden-state check over safetensors files written by the safetensors library (tests/fixtures/hidden_states):
non-zero states pass; all-zero states, one zero layer, or no floating-point tensor refuse; a damaged file is an
error. The same checks run through the script the node receives, with a bare python3."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpuhosts.plans.hidden_state_check import check, read_tensors
from gpuhosts.plans.training_node import CHECK_SCRIPT, plan_training_node
from conftest import FIXTURES, TRAINER_SECRETS, trainer_values
from gpuhosts.training import validate_trainer_stack

STATES = FIXTURES / "hidden_states"

CASES = [
    ("nonzero-f16.safetensors", [], 0),
    ("zero-f16.safetensors", ["hidden_states [6, 12, 64] (F16) is all zeros"], 1),
    ("one-zero-layer-f32.safetensors", ["layer_47 [12, 64] (F32) is all zeros"], 1),
    ("ids-only.safetensors", ["no floating-point tensor in it"], 1),
]


@pytest.mark.parametrize("name, words, status", CASES, ids=[c[0] for c in CASES])
def test_check(name, words, status):
    reports, problems = check([STATES / name])
    assert len(problems) == len(words)
    for word, problem in zip(words, problems):
        assert word in problem
    assert all(r.dtype in ("F16", "F32") for r in reports), "integer tensors are not judged"


def test_tensors_are_read_with_their_header():
    reports = read_tensors(STATES / "one-zero-layer-f32.safetensors")
    assert [(r.name, r.shape, r.zero) for r in reports] == [
        ("layer_17", (12, 64), False), ("layer_2", (12, 64), False), ("layer_32", (12, 64), False),
        ("layer_47", (12, 64), True)]


def test_a_cut_file_is_an_error_not_a_pass(tmp_path):
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes((STATES / "nonzero-f16.safetensors").read_bytes()[:2000])
    with pytest.raises(ValueError, match="cut short"):
        check([cut])


def test_no_file_refuses():
    assert check([])[1] == ["no hidden-state file to check"]


@pytest.mark.parametrize("name, words, status", CASES, ids=[c[0] for c in CASES])
def test_the_script_the_node_receives(tmp_path, name, words, status):
    plan = plan_training_node(validate_trainer_stack(trainer_values(), TRAINER_SECRETS))
    (script,) = [f for f in plan.graph["hidden-state-server"].files if f.path == CHECK_SCRIPT]
    assert script.content.startswith("#!/usr/bin/env python3\n# managed by gpuhosts")
    path = tmp_path / "check.py"
    path.write_text(script.content)
    result = subprocess.run([sys.executable, "-I", str(path), str(STATES / name)], capture_output=True, text=True)
    assert result.returncode == status, result.stdout + result.stderr
    assert result.stdout.rstrip().endswith("passed" if status == 0 else "FAILED")
    for word in words:
        assert word in result.stdout
