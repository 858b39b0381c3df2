"""What an ensure does to a systemd unit changed beside its unit file (templates/common/systemd-repair.sh.j2), and
what a teardown leaves, on the simulated host's systemctl (tests/fakehost/systemd.py).

A drop-in named for the unit is moved aside, never deleted, to a name systemd does not read; a mask is lifted;
anything else under /etc/systemd/system stays as it was. A teardown removes the unit's own files only.
"""

from __future__ import annotations

import subprocess

import pytest

from fakehost import host_env
from gpuhosts.render import render

UNIT = "gpuhosts-serve.service"
UNITS = "etc/systemd/system"
UNIT_FILE = "[Service]\nType=simple\nExecStart=/usr/local/bin/serve\n\n[Install]\nWantedBy=multi-user.target\n"


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "host"
    (root / UNITS).mkdir(parents=True)
    (root / UNITS / UNIT).write_text(UNIT_FILE)
    program = root / "usr/local/bin/serve"
    program.parent.mkdir(parents=True)
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    return root


def run(tree, script: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], env=host_env(tree), capture_output=True, text=True, timeout=60)


def repair(tree) -> subprocess.CompletedProcess:
    script = (render("common/lib.sh.j2", unit="repair") + render("common/systemd-repair.sh.j2")
              + f'systemd_repair {UNIT}\necho "repaired=$systemd_repaired"\n')
    result = run(tree, script)
    assert result.returncode == 0, result.stderr
    return result


def write(tree, path: str, text: str = "[Service]\nEnvironment=X=1\n") -> None:
    (tree / path).parent.mkdir(parents=True, exist_ok=True)
    (tree / path).write_text(text)


def test_a_drop_in_is_moved_aside_and_said_so(tree):
    write(tree, f"{UNITS}/{UNIT}.d/override.conf")
    write(tree, f"run/systemd/system/{UNIT}.d/50-runtime.conf")
    out = repair(tree).stdout
    assert "repaired=1" in out
    for path in (f"/{UNITS}/{UNIT}.d/override.conf", f"/run/systemd/system/{UNIT}.d/50-runtime.conf"):
        assert f"moved the drop-in {path} aside to {path}.gpuhosts-disabled" in out
        assert not (tree / path.lstrip("/")).exists()
        assert (tree / f"{path.lstrip('/')}.gpuhosts-disabled").read_text() == "[Service]\nEnvironment=X=1\n"
    shown = run(tree, f"systemctl show -p DropInPaths,Environment {UNIT}").stdout
    assert shown == "Environment=\nDropInPaths=\n"


def test_a_drop_in_moved_aside_before_keeps_its_copy(tree):
    write(tree, f"{UNITS}/{UNIT}.d/override.conf.gpuhosts-disabled", "[Service]\nUser=first\n")
    write(tree, f"{UNITS}/{UNIT}.d/override.conf", "[Service]\nUser=second\n")
    out = repair(tree).stdout
    assert f"aside to /{UNITS}/{UNIT}.d/override.conf.gpuhosts-disabled.2" in out
    assert (tree / UNITS / f"{UNIT}.d/override.conf.gpuhosts-disabled").read_text() == "[Service]\nUser=first\n"
    assert (tree / UNITS / f"{UNIT}.d/override.conf.gpuhosts-disabled.2").read_text() == "[Service]\nUser=second\n"


def test_a_mask_is_lifted(tree):
    assert run(tree, f"systemctl enable -q {UNIT} && rm $GPUHOSTS_HOST_ROOT/{UNITS}/{UNIT} && "
                     f"systemctl mask -q {UNIT}").returncode == 0
    out = repair(tree).stdout
    assert f"changed: unmasked {UNIT}" in out and "repaired=1" in out
    assert not (tree / UNITS / UNIT).is_symlink()


def test_a_unit_as_installed_is_left_alone(tree):
    write(tree, f"{UNITS}/{UNIT}.d/notes.txt", "not a drop-in: systemd reads only *.conf\n")
    write(tree, f"{UNITS}/other.service.d/override.conf")
    out = repair(tree).stdout
    assert "repaired=0" in out and "changed:" not in out
    assert (tree / UNITS / f"{UNIT}.d/notes.txt").exists() and (tree / UNITS / "other.service.d/override.conf").exists()


def test_a_teardown_leaves_the_drop_ins_it_did_not_write(tree):
    write(tree, f"{UNITS}/{UNIT}.d/override.conf")
    teardown = render("common/node-unit-teardown.sh.j2", unit="serve", unit_name=UNIT, keeps="nothing else.",
                      remove=[f"/{UNITS}/{UNIT}"], delete_dirs=[])
    assert run(tree, f"systemctl enable -q --now {UNIT}").returncode == 0
    result = run(tree, teardown)
    assert result.returncode == 0, result.stderr
    assert not (tree / UNITS / UNIT).exists()
    assert (tree / UNITS / f"{UNIT}.d/override.conf").read_text() == "[Service]\nEnvironment=X=1\n"
