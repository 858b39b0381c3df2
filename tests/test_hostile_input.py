"""Hostile input, property-based: every string field of both kinds of stack, given shell metacharacters, `$(…)`,
backticks, `;`, quotes, newlines, here-document terminators, `%` specifiers, unicode and very long values.

Each value is refused naming its field, or rendered so that nothing it says runs: the scripts of every unit the value
reaches pass `bash -n`, and run against the simulated host (ensure, then teardown) they never create the canary
file the value asks for and never delete a sentinel outside what gpuhosts owns. The run's figures are printed at
the end of the suite: `hostile: tried=… refused=… rendered_safe=… executed=0 deleted_outside=0`.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gpuhosts.plans.proxmox_host import plan_host
from gpuhosts.plans.training_node import plan_training_node
from conftest import HOSTILE_FIGURES, KPRO5_SECRETS, TRAINER_SECRETS, kpro5_values, trainer_values
from fakehost import host_env
from gpuhosts.config import ConfigError
from gpuhosts.stacks import validate_stack
from gpuhosts.stacks import validate_trainer_stack
from trainer_node import converged_kpro5

CANARY = Path(f"/tmp/gpuhosts-hostile-canary-{os.getpid()}")
# Outside anything gpuhosts owns, on the simulated host: none may go, whatever a value says.
SENTINELS = ("etc/gpuhosts-sentinel", "srv/gpuhosts-sentinel", "data/gpuhosts-sentinel", "root/gpuhosts-sentinel",
             "var/lib/lxc/129/rootfs/etc/gpuhosts-sentinel", "var/lib/lxc/129/rootfs/srv/gpuhosts-sentinel")
FRAGMENTS = [
    f"$(touch {CANARY})", f"`touch {CANARY}`", f"; touch {CANARY}", f"&& touch {CANARY} #", f"' ; touch {CANARY}; '",
    f"\" ; touch {CANARY}; \"", f"\ntouch {CANARY}\n", f"\nGPUHOSTS_INNER\ntouch {CANARY}\n",
    f"\nGPUHOSTS_EOF\ntouch {CANARY}\n", f"$({{touch,{CANARY}}})", "%h%n%%", "\\", "${HOME}", "*", "é✓中",
    "a" * 5000, "../../..", "/", "\x1b[31m", "\t", "--help", "-rf", f"\rtouch {CANARY}",
]


def string_fields(values, path=()):
    """The path of every string in a stack's values."""
    if isinstance(values, dict):
        for key, value in values.items():
            yield from string_fields(value, path + (key,))
    elif isinstance(values, list):
        for index, value in enumerate(values):
            yield from string_fields(value, path + (index,))
    elif isinstance(values, str):
        yield path


def kpro5_base() -> dict:
    values = kpro5_values()
    sglang, vllm = values["services"]
    # Fields the stack leaves at their defaults get a value, so that they are tried too.
    sglang.update(environment={"NCCL_DEBUG": "INFO"}, extraArgs=["--max-running-requests", "8"],
                  servedModelName="qwen3.6-27b")
    sglang["model"]["localDir"] = "/srv/models/Qwen3.6-27B"
    sglang["engine"].update(gitRef="0c5e9b5a4e1f1a4b0c9f6c2d7e3a8b1f4d2c6e90", repository="https://github.com/sgl-project/sglang")
    values["containers"][0]["modelStore"] = {"hostPath": "/tank/models", "path": "/srv/store"}
    return values


def trainer_base() -> dict:
    values = trainer_values()
    training = values["training"]
    training.update(checkpoints="/data/checkpoints/drafter")
    training["hyper"]["extraArgs"] = ["--save-steps", "500"]
    training["server"]["extraArgs"] = ["--enforce-eager"]
    return values


STACKS = {
    "kpro5": (kpro5_base, validate_stack, KPRO5_SECRETS, lambda c: plan_host(c).apply_order),
    "trainer": (trainer_base, validate_trainer_stack, TRAINER_SECRETS, lambda c: plan_training_node(c).graph.apply_order),
}
FIELDS = [(stack, path) for stack, (base, *_rest) in STACKS.items() for path in string_fields(base())]


def set_at(values, path, value):
    target = values
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value


def config_path(path) -> str:
    text = f"gpuhosts:{path[0]}"
    for part in path[1:]:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    """A converged kpro5 (its host units) with sentinels where gpuhosts owns nothing."""
    root = tmp_path_factory.mktemp("hostile")
    tree = converged_kpro5(root, "kpro5")
    for sentinel in SENTINELS:
        (tree / sentinel).parent.mkdir(parents=True, exist_ok=True)
        (tree / sentinel).write_text("not gpuhosts'\n")
    counts = {"tried": 0, "refused": 0, "rendered_safe": 0, "executed": 0, "deleted_outside": 0}
    yield tree, root, counts
    HOSTILE_FIGURES.mkdir(parents=True, exist_ok=True)
    (HOSTILE_FIGURES / f"{os.getpid()}.json").write_text(json.dumps(counts))


# Units that wait for a service to answer (up to readyTimeoutS) only measure; what a value could make them run is
# in the service's own unit, which is run.
WAITING_KINDS = ("DeployGate", "HiddenStateCheck")


def reached(units, value: str) -> list:
    """The units whose scripts carry the canary's path: quoted or escaped, a value keeps that text."""
    if str(CANARY) not in value:
        return []
    return [u for u in units if u.kind not in WAITING_KINDS
            and any(str(CANARY) in text for text in (u.ensure, u.teardown, u.probe))]


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_the_unchanged_stacks_are_valid(stack):
    base, validate, secrets, _plan = STACKS[stack]
    validate(base(), secrets)


@settings(max_examples=int(os.environ.get("GPUHOSTS_HOSTILE_EXAMPLES", "300")), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(field=st.sampled_from(FIELDS), fragment=st.sampled_from(FRAGMENTS), keep=st.booleans())
def test_a_hostile_value_is_refused_or_stays_data(hosts, tmp_path_factory, field, fragment, keep):
    tree, root, counts = hosts
    stack, path = field
    base, validate, secrets, plan = STACKS[stack]
    values = base()
    original = copy.deepcopy(values)
    for part in path:
        original = original[part]
    value = (original + fragment) if keep else fragment
    set_at(values, path, value)
    counts["tried"] += 1
    try:
        config = validate(values, secrets)
    except ConfigError as error:
        counts["refused"] += 1
        named = [p.path for p in error.problems]
        # The refusal names the field (or the entry it is in when the value broke that one's shape); a value that
        # is fine alone but disagrees with another entry (a renamed service others name in sharesWith, a repo in a
        # directory another service downloads into) is named at that entry, in the same section.
        field = config_path(path)
        section = config_path(path[:1])
        assert any(field.startswith(p) or p.startswith(field) for p in named) or (
            isinstance(path[1], int) and all(p.startswith(section) for p in named)), (named, path)
        return
    units = plan(config)
    for unit in units:
        for name in ("ensure", "teardown", "probe"):
            syntax = subprocess.run(["bash", "-n"], input=getattr(unit, name), capture_output=True, text=True)
            assert syntax.returncode == 0, f"{unit.key} {name}: {syntax.stderr}"
    CANARY.unlink(missing_ok=True)
    work = tmp_path_factory.mktemp("run") / "host"
    shutil.copytree(tree, work, symlinks=True)
    for unit in reached(units, value):
        for operation in ("ensure", "teardown"):
            try:
                subprocess.run(["bash", "-c", getattr(unit, operation)], input="stand-in-secret\n",
                               capture_output=True, text=True, env=host_env(work), timeout=60)
            except subprocess.TimeoutExpired:
                pass  # a script that waits (for a server, a lock) has had its chance to run the value
    executed = CANARY.exists()
    deleted = [s for s in SENTINELS if not (work / s).exists()]
    counts["executed"] += executed
    counts["deleted_outside"] += bool(deleted)
    CANARY.unlink(missing_ok=True)
    shutil.rmtree(work.parent, ignore_errors=True)
    assert not executed, f"{config_path(path)} = {value!r} ran as code"
    assert not deleted, f"{config_path(path)} = {value!r} deleted {deleted}"
    counts["rendered_safe"] += 1
