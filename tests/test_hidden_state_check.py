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
    reports, problems = check_response(response, str(tmp_path), 5, states_dir="/data/hidden_states")
    assert problems == [] and reports
    assert list(target.parent.iterdir()) == []


@pytest.mark.parametrize("named", [
    "/etc/shadow",                                       # whoever answers on the port names a file root removes
    "/data/hidden_states/../../etc/shadow.safetensors",  # climbing out
    "/data/hidden_states/planted.safetensors",           # a link inside the folder to a file outside it
    "/data/hidden_states/notes.txt",                     # not the server's kind of file
])
def test_a_response_naming_a_file_outside_the_servers_folder_removes_nothing(tmp_path, named):
    """The attack first: before the check was confined, each of these names was read and then deleted as root."""
    victim = tmp_path / "etc/shadow"
    victim.parent.mkdir(parents=True)
    victim.write_text("root:x:secret\n")
    (tmp_path / "etc/shadow.safetensors").write_text("x")
    states = tmp_path / "data/hidden_states"
    states.mkdir(parents=True)
    (states / "planted.safetensors").symlink_to(victim)
    (states / "notes.txt").write_text("keep\n")
    response = tmp_path / "response.json"
    response.write_text(_json.dumps({"kv_transfer_params": {"hidden_states_path": named}}))
    with pytest.raises(ValueError, match="not a .safetensors file inside the server's"):
        check_response(response, str(tmp_path), 1, states_dir="/data/hidden_states")
    assert victim.read_text() == "root:x:secret\n"
    assert (tmp_path / "etc/shadow.safetensors").exists() and (states / "notes.txt").exists()


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


# --- layer by layer: the file vLLM's connector writes, [num_tokens, num_hidden_states, hidden_size] (vLLM 0.26.0
# example_hidden_states_connector.py extract_from_kv_cache), built here for each case ----------------------------

import math
import struct

from trainer_node import safetensors_bytes

LAYERS = (2, 17, 32, 47, 62, 64)  # the trainer stack's: the trainer's ids and the last layer (tests/test_trainer_argv.py)
TOKENS, HIDDEN = 3, 8


def _encode(dtype: str, values: list[float]) -> bytes:
    if dtype == "BF16":  # the upper half of the float32
        return b"".join(struct.pack("<f", v)[2:] for v in values)
    if dtype == "F8_E4M3":  # only what the cases need: 1.0, 0.0 and NaN (S.1111.111)
        return bytes({1.0: 0x38, 0.0: 0x00}.get(v, 0x7F) if not math.isnan(v) else 0x7F for v in values)
    return struct.pack(f"<{len(values)}{ {'F64': 'd', 'F32': 'f', 'F16': 'e'}[dtype] }", *values)


def _states(dtype: str, layer_value, shape=(TOKENS, len(LAYERS), HIDDEN)) -> bytes:
    """`hidden_states` with layer j's slice filled by layer_value(j, token, index); token_ids beside it."""
    tokens, layers, hidden = shape
    values = [layer_value(j, t, h) for t in range(tokens) for j in range(layers) for h in range(hidden)]
    return safetensors_bytes({"hidden_states": (dtype, list(shape), _encode(dtype, values)),
                              "token_ids": ("I64", [tokens], struct.pack(f"<{tokens}q", *range(tokens)))})


def _normal(j, t, h):
    return 1.0 if (j + t + h) % 3 else 0.0  # zeros among them, as real states have


def _zero_layer(layer):
    return lambda j, t, h: 0.0 if LAYERS[j] == layer else _normal(j, t, h)


def _special_at(layer, value, token=1):
    return lambda j, t, h: value if (LAYERS[j], t, h) == (layer, token, 5) else _normal(j, t, h)


LAYER_CASES = [
    ("every layer non-zero, F16", "F16", _normal, []),
    ("every layer non-zero, BF16", "BF16", _normal, []),
    ("every layer non-zero, F32", "F32", _normal, []),
    ("one Gated DeltaNet layer zeroed", "BF16", _zero_layer(17), ["layer 17 is all zeros"]),
    ("the last layer zeroed", "F16", _zero_layer(64), ["layer 64 is all zeros"]),
    ("the GDN layers zeroed, full attention kept", "BF16",
     lambda j, t, h: 0.0 if LAYERS[j] in (2, 17, 32, 62) else _normal(j, t, h),
     [f"layer {n} is all zeros" for n in (2, 17, 32, 62)]),
    ("negative zero is zero", "F32", lambda j, t, h: -0.0 if LAYERS[j] == 47 else _normal(j, t, h),
     ["layer 47 is all zeros"]),
    ("a NaN in one layer", "F16", _special_at(32, math.nan), ["inf or NaN in layer(s) 32"]),
    ("an inf in one layer", "BF16", _special_at(2, math.inf), ["inf or NaN in layer(s) 2"]),
    ("an inf in F64", "F64", _special_at(62, -math.inf), ["inf or NaN in layer(s) 62"]),
    ("a NaN in F8_E4M3", "F8_E4M3", _special_at(47, math.nan), ["inf or NaN in layer(s) 47"]),
    ("all zero", "F16", lambda j, t, h: 0.0, ["hidden_states [3, 6, 8] (F16) is all zeros"]),
]


@pytest.mark.parametrize("dtype, value, words", [c[1:] for c in LAYER_CASES], ids=[c[0] for c in LAYER_CASES])
def test_each_layer_the_drafter_reads_is_checked(tmp_path, dtype, value, words):
    path = tmp_path / "req.safetensors"
    path.write_bytes(_states(dtype, value))
    _, problems = check([path], LAYERS)
    assert len(problems) == len(words), problems
    for word, problem in zip(words, problems):
        assert word in problem, problem


def test_the_whole_tensor_check_misses_a_zeroed_layer_the_layer_check_names(tmp_path):
    path = tmp_path / "req.safetensors"
    path.write_bytes(_states("BF16", _zero_layer(17)))
    assert check([path])[1] == []
    assert "layer 17 is all zeros" in check([path], LAYERS)[1][0]


@pytest.mark.parametrize("shape", [(TOKENS, 5, HIDDEN), (len(LAYERS), TOKENS, HIDDEN)], ids=["5 layers", "layers first"])
def test_a_layout_that_is_not_one_slice_per_extracted_layer_is_an_error(tmp_path, shape):
    path = tmp_path / "req.safetensors"
    path.write_bytes(_states("F16", lambda j, t, h: 1.0, shape))
    with pytest.raises(ValueError, match=r"not \[tokens, 6 layers, hidden\]"):
        check([path], LAYERS)


def test_the_node_script_names_the_zero_layer(tmp_path):
    plan = plan_training_node(validate_trainer_stack(trainer_values(), TRAINER_SECRETS))
    (script,) = [f for f in plan.graph["hidden-state-server"].files if f.path == CHECK_SCRIPT]
    (tmp_path / "check.py").write_text(script.content)
    path = tmp_path / "req.safetensors"
    path.write_bytes(_states("BF16", _zero_layer(47)))
    layers = ",".join(map(str, plan.ids.server))
    assert layers == ",".join(map(str, LAYERS))
    result = subprocess.run([sys.executable, "-I", str(tmp_path / "check.py"), "--layers", layers, str(path)],
                            capture_output=True, text=True)
    assert result.returncode == 1 and "layer 47 is all zeros" in result.stdout, result.stdout + result.stderr
    bad = subprocess.run([sys.executable, "-I", str(tmp_path / "check.py"), "--layers", "2,x", str(path)],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "comma-separated layer ids" in bad.stderr
