"""Locked environments (gpuhosts/locks.py): every environment of every committed stack has its committed lock, the
plan refuses one without, and an environment unit installs exactly its lock — on the simulated node, whose `uv`
does what uv does with `pip sync --require-hashes` and `pip install --no-deps`."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import PROJECT
from fakehost import host_env
from fakehost.pytools import packages as installed_packages
from fakehost.tree import seed_kpro5
from gpuhosts.config import ConfigError
from gpuhosts.lock_tool import needed_locks, newest_locks, select_hashes, stack_files, stack_locks
from gpuhosts.locks import (LOCKS_DIR, LockError, LockSpec, header_problem, lock_digest, lock_spec, lock_text,
                            locked_pins, parse_header)
from gpuhosts.plan import load_stack, read_stack_file, stand_in_secrets
from gpuhosts.envspec import EnvSpec, env_lock
from gpuhosts.plans.python_env import MAX_INNER_SCRIPT, in_container, plan_env
from gpuhosts.protocol import parse_facts, parse_result

STACKS = {path.name: path for path in stack_files(PROJECT)}


# --- the committed locks ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("stack", sorted(STACKS))
def test_every_environment_of_every_committed_stack_has_its_current_lock(stack):
    specs = stack_locks(STACKS[stack])
    assert specs, f"{stack} plans no environment?"
    for spec in specs:
        path = spec.path()
        assert path.is_file(), f"{stack}: {spec.requirement} (Python {spec.python}) has no {path.name}: `make locks`"
        problem = header_problem(spec, path.read_text())
        assert problem is None, f"{path.name}: {problem} — `make locks` after changing the compatibility data"


def test_the_newest_releases_are_locked_too():
    newest = newest_locks(needed_locks(PROJECT)[:0] + [s for p in STACKS.values() for s in stack_locks(p)])
    assert {s.package for s in newest} >= {"sglang", "vllm", "speculators"}
    for spec in newest:
        assert header_problem(spec, spec.path().read_text()) is None, spec.path().name


def test_locks_holds_nothing_the_stacks_and_newest_releases_do_not_need():
    wanted = {spec.path().name for spec in needed_locks(PROJECT)}
    assert sorted(p.name for p in LOCKS_DIR.glob("*.txt")) == sorted(wanted)


@pytest.mark.parametrize("requirement, constraints", [
    ("sglang[all]==0.5.11", ("kernels>=0.14.1,<0.15",)),   # compat-rules.yaml: sglang <0.5.23 leaves kernels open
    ("sglang[all]==0.5.23", ()),
    ("vllm==0.26.0", ()),
])
def test_constraints_come_from_the_compatibility_data_and_are_resolved(requirement, constraints):
    spec = lock_spec(requirement, "3.12")
    assert spec.constraints == constraints
    text = lock_text(spec)
    assert parse_header(text)["constraints"] == (", ".join(constraints) or "none")
    pins = dict(re.findall(r"^([a-z0-9-]+)==(\S+)", text, re.M))
    assert pins[spec.package] == spec.version
    if constraints:
        assert pins["kernels"].startswith("0.14.")


@pytest.mark.parametrize("name", sorted(p.name for p in LOCKS_DIR.glob("*.txt")))
def test_a_committed_lock_pins_every_distribution_with_a_hash(name):
    text = (LOCKS_DIR / name).read_text()
    assert text.startswith("# managed by gpuhosts")
    joined = re.sub(r"\\\n", " ", text)
    requirements = [line.split(" #")[0] for line in joined.splitlines() if line and not line.lstrip().startswith("#")]
    for line in requirements:
        assert re.match(r"^[A-Za-z0-9._-]+==\S+ ", line) and "--hash=sha256:" in line, line[:80]
    # Within what `pct exec -- bash -c` takes in one argument, with room for the unit's script around it.
    assert len(text.encode()) < MAX_INNER_SCRIPT // 2


# --- resolving -------------------------------------------------------------------------------------------------

REQUIREMENTS = """\
a==1.0 \\
    --hash=sha256:aaa1 \\
    --hash=sha256:aaa2 \\
    --hash=sha256:aaa3
    # via -r requirements.in
b==2.0 ; python_version >= "3" \\
    --hash=sha256:bbb1 \\
    --hash=sha256:bbb2
    # via a
"""
PYLOCK = """\
[[packages]]
name = "a"
version = "1.0"
wheels = [{ url = "https://x/a-1.0-cp312-manylinux_2_28_x86_64.whl", hashes = { sha256 = "aaa2" } }]

[[packages]]
name = "B"
version = "2.0"
sdist = { url = "https://x/b-2.0.tar.gz", hashes = { sha256 = "bbb1" } }
wheels = [{ url = "https://x/b-2.0-py3-none-any.whl", hashes = { sha256 = "bbb2" } }]
"""


def test_a_lock_keeps_the_hashes_of_the_distributions_uv_selects_for_the_platform():
    assert select_hashes(REQUIREMENTS, PYLOCK) == (
        "a==1.0 \\\n    --hash=sha256:aaa2\n    # via -r requirements.in\n"
        'b==2.0 ; python_version >= "3" \\\n    --hash=sha256:bbb1 \\\n    --hash=sha256:bbb2\n    # via a\n')


@pytest.mark.parametrize("pylock, says", [
    (PYLOCK.replace('version = "2.0"', 'version = "2.1"'), "pins b==2.0"),
    (PYLOCK + '\n[[packages]]\nname = "c"\nversion = "3"\nwheels = []\n', "differ"),
])
def test_two_resolutions_that_disagree_are_refused(pylock, says):
    with pytest.raises(LockError, match=says):
        select_hashes(REQUIREMENTS, pylock)


def test_a_lock_with_another_header_is_stale(tmp_path):
    spec = lock_spec("sglang[all]==0.5.11", "3.12")
    stale = LockSpec(spec.requirement, spec.python, ())  # before the kernels constraint was added
    (tmp_path / spec.path().name).write_text(stale.header() + "sglang==0.5.11 \\\n    --hash=sha256:00\n")
    with pytest.raises(LockError, match=r"stale: its header says constraints 'none' instead of 'kernels"):
        lock_text(spec, tmp_path)


# --- the plan refuses an environment without a lock ------------------------------------------------------------

def _set(values: dict, path: str, value) -> None:
    keys = [int(k) if k.isdigit() else k for k in re.findall(r"[^.\[\]]+", path)]
    target = values
    for key in keys[:-1]:
        target = target[key]
    target[keys[-1]] = value


@pytest.mark.parametrize("stack, field, value, path, says", [
    ("Pulumi.kpro5.yaml", "services[0].engine.version", "0.5.12", "gpuhosts:services[0].engine.version",
     "no lock for sglang[all]==0.5.12 on Python 3.12"),
    ("Pulumi.kpro5.yaml", "services[1].engine.version", "0.27.0", "gpuhosts:services[1].engine.version",
     "no lock for vllm==0.27.0"),
    ("Pulumi.kpro5.yaml", "services[0].python", "3.11", "gpuhosts:services[0].python",
     "locked for: sglang-all-0.5.11-py3.12.txt"),
    ("Pulumi.trainer.yaml", "training.speculators.version", "0.8.0", "gpuhosts:training.speculators.version",
     "no lock for speculators==0.8.0"),
    ("Pulumi.trainer.yaml", "training.vllm.version", "0.27.0", "gpuhosts:training.vllm.version",
     "no lock for vllm==0.27.0"),
    ("Pulumi.trainer.yaml", "training.python", "3.11", "gpuhosts:training.python", "on Python 3.11"),
])
def test_the_plan_refuses_an_environment_without_a_lock_naming_the_field(stack, field, value, path, says):
    other: list[str] = []
    values, secure, _ = stand_in_secrets(*read_stack_file(STACKS[stack], other))
    values = json.loads(json.dumps(values))
    _set(values, field, value)
    with pytest.raises(ConfigError) as refused:
        load_stack(values, secure, other)
    problems = [p for p in refused.value.problems if p.path == path]
    assert problems and says in problems[0].message and "make locks" in problems[0].message, str(refused.value)


def test_a_git_ref_build_installs_the_locked_closure_of_its_base_release():
    env = EnvSpec(name="e", requirement="sglang[all] @ git+https://github.com/sgl-project/sglang@refs/pull/1/head",
                  package="sglang", release="0.5.11", from_git=True, python="3.12")
    assert env_lock(env) == lock_spec("sglang[all]==0.5.11", "3.12")


def test_a_container_script_larger_than_one_exec_argument_is_refused():
    with pytest.raises(ValueError, match="MAX_ARG_STRLEN"):
        in_container("ct129-env-x", 129, "#" * (MAX_INNER_SCRIPT + 1))


# --- the unit installs exactly its lock (simulated node) ---------------------------------------------------------

UV = "0.13.9"


def _lock_dir(tmp_path: Path, name: str, body: str) -> Path:
    spec = lock_spec(f"{name}==1.0", "3.12")
    folder = tmp_path / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    spec.path(folder).write_text(spec.header() + body)
    return folder


def _pins(text: str) -> dict:
    return {re.sub(r"[-_.]+", "-", n).lower(): v for n, v in re.findall(r"^([A-Za-z0-9._-]+)==(\S+)", text, re.M)}


@pytest.fixture
def node(tmp_path):
    """A plain machine with a python3 (the simulated host, given its container's python3, as tests/trainer_node.py
    makes a training node)."""
    tree = seed_kpro5(tmp_path / "node")
    shutil.copy(tree / "var/lib/lxc/129/rootfs/usr/bin/python3", tree / "usr/bin/python3")
    return tree


def _ensure(node: Path, env: EnvSpec, monkeypatch, locks: Path | None = None):
    if locks is not None:
        monkeypatch.setattr("gpuhosts.locks.LOCKS_DIR", locks)
    unit = plan_env("env-x", env, None, ())
    result = subprocess.run(["bash", "-c", unit.ensure], capture_output=True, text=True, env=host_env(node),
                            timeout=120)
    return unit, result


def _probe(node: Path, unit) -> dict:
    result = subprocess.run(["bash", "-c", unit.probe], capture_output=True, text=True, env=host_env(node), timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    return parse_facts(result.stdout)


def _on_node(node: Path, command: str) -> None:
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=host_env(node), timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def _installed(node: Path, env: EnvSpec) -> dict:
    return {name: entry["version"] for name, entry in installed_packages(node / env.venv.lstrip("/")).items()}


def test_an_environment_installs_exactly_its_lock_then_changes_nothing(node, monkeypatch):
    env = EnvSpec(name="monitor", requirement="flask==3.1.3", package="flask", release="3.1.3", from_git=False,
                  python="3.12", needs_hf=False)
    unit, first = _ensure(node, env, monkeypatch)
    assert first.returncode == 0, first.stdout + first.stderr
    assert parse_result(first.stdout).changed
    assert _installed(node, env) == _pins(lock_text(env_lock(env)))
    assert (node / env.lock_path.lstrip("/")).read_text() == lock_text(env_lock(env))
    marker = (node / env.venv.lstrip("/") / ".gpuhosts-requirement").read_text().strip()
    assert marker == f"flask==3.1.3 lock:{lock_digest(lock_text(env_lock(env)))}"
    # The probe reads the venv's dist-info, not the marker: what is installed is what the lock pins.
    pins = locked_pins(lock_text(env_lock(env)))
    assert unit.desired[f"distributions in {env.venv}"] == f"{len(pins)} distributions sha256:" + \
        hashlib.sha256("".join(pin + "\n" for pin in pins).encode()).hexdigest()[:16]
    assert unit.desired[f"flask in {env.venv}"] == "flask 3.1.3"
    assert _probe(node, unit) == unit.desired
    _, second = _ensure(node, env, monkeypatch)
    assert second.returncode == 0 and not parse_result(second.stdout).changed, second.stdout + second.stderr


UV_PIP = 'R="$GPUHOSTS_HOST_ROOT"; "$R/opt/gpuhosts/.uv/bin/uv" pip install -q --python "$R{venv}/bin/python" '


@pytest.mark.parametrize("by_hand, held, difference, package", [
    # The seed's pitfall: another engine release installed over the lock's; the marker still names the lock's.
    ("tool==0.9", ["tool==0.9"], "tool==0.9 (lock: 1.0)", "tool 0.9"),
    # A dependency added beside the lock: the engine is the lock's, the environment is not.
    ("stray==9", ["stray==9", "tool==1.0"], "stray==9 (not in the lock)", "tool 1.0"),
])
def test_a_distribution_installed_by_hand_is_drift_the_ensure_puts_back(node, monkeypatch, tmp_path, by_hand, held,
                                                                        difference, package):
    env = EnvSpec(name="tool", requirement="tool==1.0", package="tool", release="1.0", from_git=False,
                  python="3.12", needs_hf=False)
    locks = _lock_dir(tmp_path, "tool", "tool==1.0 \\\n    --hash=sha256:11\n")
    unit, first = _ensure(node, env, monkeypatch, locks)
    assert first.returncode == 0, first.stdout + first.stderr
    _on_node(node, UV_PIP.format(venv=env.venv) + by_hand)
    facts = _probe(node, unit)
    digest = hashlib.sha256("".join(pin + "\n" for pin in held).encode()).hexdigest()[:16]
    assert facts[f"distributions in {env.venv}"] == f"{len(held)} distributions sha256:{digest}; not the lock's: " \
        + difference
    assert facts[f"tool in {env.venv}"] == package
    _, repair = _ensure(node, env, monkeypatch, locks)
    assert repair.returncode == 0 and parse_result(repair.stdout).changed, repair.stdout + repair.stderr
    assert _probe(node, unit) == unit.desired
    assert _installed(node, env) == {"tool": "1.0"}


def test_the_probe_names_the_first_three_differences_and_counts_the_rest(node, monkeypatch, tmp_path):
    env = EnvSpec(name="tool", requirement="tool==1.0", package="tool", release="1.0", from_git=False,
                  python="3.12", needs_hf=False)
    lock = "".join(f"{name}==1.0 \\\n    --hash=sha256:11\n" for name in ("a", "b", "c", "d", "tool"))
    unit, first = _ensure(node, env, monkeypatch, _lock_dir(tmp_path, "tool", lock))
    assert first.returncode == 0, first.stdout + first.stderr
    site = node / env.venv.lstrip("/") / "lib/python3.12/site-packages"
    for name in ("a", "b", "d"):
        shutil.rmtree(site / f"{name}-1.0.dist-info")
    # A METADATA spells the name as its project does; the probe compares normalised names (PEP 503).
    (site / "Zed_Extra-2.0.dist-info").mkdir()
    (site / "Zed_Extra-2.0.dist-info/METADATA").write_text("Metadata-Version: 2.1\nName: Zed_Extra\nVersion: 2.0\n"
                                                           "\nName: not-a-header\n")
    value = _probe(node, unit)[f"distributions in {env.venv}"]
    assert value.split("; ", 1)[1] == ("not the lock's: a==1.0 missing, b==1.0 missing, d==1.0 missing (+1 more)"), value
    assert value.startswith("3 distributions sha256:")


def test_a_changed_lock_reinstalls_and_drops_what_it_no_longer_lists(node, monkeypatch, tmp_path):
    env = EnvSpec(name="tool", requirement="tool==1.0", package="tool", release="1.0", from_git=False,
                  python="3.12", needs_hf=False)
    first = _lock_dir(tmp_path / "a", "tool", "tool==1.0 \\\n    --hash=sha256:11\nold-dep==2.0 \\\n    --hash=sha256:22\n")
    assert _ensure(node, env, monkeypatch, first)[1].returncode == 0
    assert _installed(node, env) == {"tool": "1.0", "old-dep": "2.0"}
    second = _lock_dir(tmp_path / "b", "tool", "tool==1.0 \\\n    --hash=sha256:11\nnew-dep==3.0 \\\n    --hash=sha256:33\n")
    _, result = _ensure(node, env, monkeypatch, second)
    assert result.returncode == 0 and parse_result(result.stdout).changed, result.stdout + result.stderr
    assert _installed(node, env) == {"tool": "1.0", "new-dep": "3.0"}


def test_a_git_ref_build_replaces_only_the_package_over_its_locked_closure(node, monkeypatch, tmp_path):
    env = EnvSpec(name="tool", requirement="tool @ git+https://example.org/tool@refs/pull/7/head", package="tool",
                  release="1.0", from_git=True, python="3.12", needs_hf=False)
    locks = _lock_dir(tmp_path, "tool", "tool==1.0 \\\n    --hash=sha256:11\ndep==2.0 \\\n    --hash=sha256:22\n")
    _, result = _ensure(node, env, monkeypatch, locks)
    assert result.returncode == 0, result.stdout + result.stderr
    installed = _installed(node, env)
    assert installed["dep"] == "2.0" and installed["tool"].startswith("0.0.0+g")
    # The build's version is its own: the lock's digest leaves the package out, and the package's fact is the URL
    # its direct_url.json records (PEP 610).
    unit = plan_env("env-x", env, None, ())
    assert unit.desired[f"tool in {env.venv}"] == "tool from git+https://example.org/tool@refs/pull/7/head"
    assert _probe(node, unit) == unit.desired
    _on_node(node, UV_PIP.format(venv=env.venv) + "tool==1.0")
    assert _probe(node, unit)[f"tool in {env.venv}"] == "tool 1.0"
    _, repair = _ensure(node, env, monkeypatch, locks)
    assert repair.returncode == 0 and parse_result(repair.stdout).changed, repair.stdout + repair.stderr
    assert _probe(node, unit) == unit.desired


# --- the uv stand-in: what uv does with these flags ------------------------------------------------------------

@pytest.mark.parametrize("lock, flags, status, says, installed", [
    ("a==1.0 \\\n    --hash=sha256:11\nb==2.0 \\\n    --hash=sha256:22\n", "--require-hashes", 0, "", {"a": "1.0", "b": "2.0"}),
    ("a==1.0\n", "--require-hashes", 2,
     "In `--require-hashes` mode, all requirements must have a hash, but none were provided for: a==1.0", {}),
    ("a>=1.0 \\\n    --hash=sha256:11\n", "--require-hashes", 2,
     "all requirements must have their versions pinned with `==`, but found: a>=1.0", {}),
    ("a==1.0\n", "", 0, "", {"a": "1.0"}),
    ("# nothing\n", "", 2, "Requirements file is empty", {}),
])
def test_uv_pip_sync_stand_in(node, tmp_path, lock, flags, status, says, installed):
    # uv docs (pip sync, --require-hashes): every requirement pinned with == and hashed, else refused before
    # anything is fetched; sync installs exactly the listed distributions and removes the rest.
    (node / "req.txt").write_text(lock)
    script = (f'set -e; R=$GPUHOSTS_HOST_ROOT; "$R/usr/bin/python3" -m venv "$R/uv" && "$R/uv/bin/python" -m pip '
              f'install -q uv=={UV} && "$R/uv/bin/uv" venv -q --python 3.12 "$R/v" && '
              f'"$R/uv/bin/python" -m pip --version >/dev/null && "$R/v/bin/python" -c pass; '
              f'"$R/uv/bin/uv" pip install -q --python "$R/v/bin/python" stray==9; '
              f'"$R/uv/bin/uv" pip sync --python "$R/v/bin/python" {flags} "$R/req.txt"')
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=host_env(node), timeout=60)
    assert result.returncode == status, result.stdout + result.stderr
    assert says in result.stderr
    found = installed_packages(node / "v")
    assert {n: e["version"] for n, e in found.items()} == (installed or {"stray": "9"})
