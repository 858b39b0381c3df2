"""Each finding of the security review, the attack reproduced first, then refused (docs/operations.md, "What gpuhosts
trusts").

The scripts run with the simulated host's root folder (GPUHOSTS_HOST_ROOT) as the test's own user, as root runs
them on a host: what a user other than root may plant, the test plants.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from fakehost import host_env
from gpuhosts.config import ConfigError
from gpuhosts.render import render
from gpuhosts.stacks import validate_stack
from conftest import KPRO5_SECRETS, kpro5_values


def run(tree: Path, script: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], env=host_env(tree), capture_output=True, text=True, timeout=60)


def locked(tree: Path, name: str = "apt") -> subprocess.CompletedProcess:
    return run(tree, render("common/lib.sh.j2", unit="locker") + f'with_lock {name} echo "held {name}"\n')


# --- a lock path another user steers ------------------------------------------------------------------------------

def test_the_lock_folder_is_root_only(tmp_path):
    done = locked(tmp_path)
    assert done.returncode == 0 and "held apt" in done.stdout, done.stderr
    folder = tmp_path / "run/gpuhosts-locks"
    assert oct(folder.stat().st_mode & 0o777) == "0o700" and not folder.is_symlink()
    # the former world-writable place is not used at all
    assert not (tmp_path / "run/lock").exists()


def test_a_link_planted_for_the_lock_folder_is_refused_and_not_followed(tmp_path):
    victim = tmp_path / "etc/shadow"
    victim.parent.mkdir(parents=True)
    victim.write_text("root:x:secret\n")
    elsewhere = tmp_path / "attacker"
    elsewhere.mkdir()
    (tmp_path / "run").mkdir()
    (tmp_path / "run/gpuhosts-locks").symlink_to(elsewhere)
    (elsewhere / "apt.lock").symlink_to(victim)
    done = locked(tmp_path)
    assert done.returncode == 1 and "is a symbolic link" in done.stderr, done.stderr
    assert victim.read_text() == "root:x:secret\n"


def test_a_lock_folder_others_may_enter_is_refused(tmp_path):
    folder = tmp_path / "run/gpuhosts-locks"
    folder.mkdir(parents=True)
    os.chmod(folder, 0o777)
    done = locked(tmp_path)
    assert done.returncode == 1 and "is not a 0700 folder" in done.stderr and "remove it" in done.stderr, done.stderr


def test_a_lock_held_for_ever_fails_the_unit_instead_of_hanging(tmp_path):
    script = render("common/lib.sh.j2", unit="locker").replace("flock -w 1800", "flock -w 1")
    assert locked(tmp_path).returncode == 0
    holder = subprocess.Popen(["flock", str(tmp_path / "run/gpuhosts-locks/apt.lock"), "sleep", "30"])
    try:
        done = run(tmp_path, script + "with_lock apt echo never\n")
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 1 and "was held by another gpuhosts operation" in done.stderr, done.stderr
    assert "never" not in done.stdout


# --- an engine beyond loopback without a key ----------------------------------------------------------------------

@pytest.mark.parametrize("bind", ["0.0.0.0", "::", "10.20.0.129"])
def test_a_service_beyond_loopback_needs_an_api_key(bind):
    values = kpro5_values()
    service = values["services"][0]
    service.update(bind=bind)
    service.pop("apiKeySecret", None)
    with pytest.raises(ConfigError) as caught:
        validate_stack(values, KPRO5_SECRETS)
    assert "apiKeySecret: is required" in str(caught.value) and "bind 127.0.0.1" in str(caught.value)


def test_a_service_on_loopback_needs_no_key():
    values = kpro5_values()
    service = values["services"][0]
    service.update(bind="127.0.0.1")
    service.pop("apiKeySecret", None)
    validate_stack(values, KPRO5_SECRETS)
