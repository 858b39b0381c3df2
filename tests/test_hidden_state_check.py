"""The hidden-state check over safetensors files written by the safetensors library (tests/fixtures/hidden_states):
non-zero states pass; all-zero states, one zero layer, or no floating-point tensor refuse; a damaged file is an
error. The same checks run through the script the node receives, with a bare python3."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpuhosts.hostside.hidden_state_check import check, read_tensors
from gpuhosts.plans.hidden_state_server import CHECK_SCRIPT
from gpuhosts.plans.training_node import plan_training_node
from conftest import FIXTURES, TRAINER_SECRETS, trainer_values
from gpuhosts.stacks import validate_trainer_stack

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


# --- the writer's lock (vLLM 0.26.0 ExampleHiddenStatesConnector: LOCK_EX on <file>.lock until the file is
# written) -------------------------------------------------------------------------------------------------------

import fcntl
import json as _json
import os
import shutil

from gpuhosts.hostside.hidden_state_check import check_response, hidden_states_path, sweep_locks, written


class Writer:
    """Holds the exclusive lock as vLLM's writer does; the file appears and the lock goes at `release()`."""

    def __init__(self, target, source):
        self.target, self.source = target, source
        self.fd = os.open(f"{target}.lock", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        self.pauses = 0

    def release(self, _seconds=None):
        self.pauses += 1
        shutil.copy(self.source, self.target)
        os.close(self.fd)


def test_the_check_waits_for_the_writer_then_reads_and_cleans_up(tmp_path):
    target = tmp_path / "data/hidden_states/req-1.safetensors"
    target.parent.mkdir(parents=True)
    writer = Writer(target, STATES / "nonzero-f16.safetensors")
    # The first pause is where the check would wait: the writer finishes then, as a thread of vLLM's would.
    with written(target, 60, clock=lambda: 0.0, pause=writer.release):
        assert check([target])[1] == []
    assert writer.pauses == 1


def test_a_writer_that_never_finishes_is_reported_not_waited_on(tmp_path):
    target = tmp_path / "req-1.safetensors"
    Writer(target, STATES / "nonzero-f16.safetensors")
    ticks = iter(range(0, 1000, 50))
    with pytest.raises(TimeoutError, match="still writes it after 120 s"):
        with written(target, 120, clock=lambda: next(ticks), pause=lambda s: None):
            pass


@pytest.mark.parametrize("response, error", [
    ({"choices": [{"text": "x"}]}, "no kv_transfer_params.hidden_states_path"),
    ({"kv_transfer_params": {"hidden_states_path": "/data/hidden_states/a.safetensors"}}, None),
])
def test_the_path_comes_from_the_response(response, error):
    if error:
        with pytest.raises(ValueError, match=error):
            hidden_states_path(response)
    else:
        assert hidden_states_path(response) == "/data/hidden_states/a.safetensors"


def test_check_response_reads_the_named_file_and_removes_it_and_its_lock(tmp_path):
    target = tmp_path / "data/hidden_states/req-7.safetensors"
    target.parent.mkdir(parents=True)
    shutil.copy(STATES / "nonzero-f16.safetensors", target)
    (tmp_path / "data/hidden_states/req-7.safetensors.lock").write_text("")
    response = tmp_path / "response.json"
    response.write_text(_json.dumps({"kv_transfer_params": {"hidden_states_path": "/data/hidden_states/req-7.safetensors"}}))
    reports, problems = check_response(response, str(tmp_path), 5)
    assert problems == [] and reports
    assert list(target.parent.iterdir()) == []


def test_stale_locks_are_swept_and_live_ones_kept(tmp_path):
    (tmp_path / "gone.safetensors.lock").write_text("")                      # file read and deleted: stale
    (tmp_path / "kept.safetensors").write_bytes(b"x")
    (tmp_path / "kept.safetensors.lock").write_text("")                      # its file is there: a reader may come
    held = os.open(tmp_path / "held.safetensors.lock", os.O_CREAT | os.O_WRONLY, 0o644)
    fcntl.flock(held, fcntl.LOCK_EX)                                          # a writer holds it
    try:
        assert sweep_locks(tmp_path) == 1
    finally:
        os.close(held)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["held.safetensors.lock", "kept.safetensors",
                                                           "kept.safetensors.lock"]
