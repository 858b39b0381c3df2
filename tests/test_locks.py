"""Host-side locks (`with_lock` of templates/common/lib.sh.j2): units that Pulumi runs at once take turns on apt/dpkg,
uv and last-one-out decisions. Synchronised on what the scripts print, never on time."""

from __future__ import annotations

import os
import subprocess

from gpuhosts.protocol import LOCK_WAIT_PREFIX, lock_waits
from gpuhosts.render import render


def script(tmp_path, unit: str, body: str) -> list[str]:
    path = tmp_path / f"{unit}.sh"
    path.write_text(render("common/lib.sh.j2", unit=unit) + body)
    return ["bash", str(path)]


def test_a_second_holder_waits_for_the_first_and_says_so(tmp_path):
    env = {**os.environ, "GPUHOSTS_HOST_ROOT": str(tmp_path / "host")}
    release = tmp_path / "release"
    first = subprocess.Popen(script(tmp_path, "first", f"""
hold() {{ echo holding; while [ ! -e {release} ]; do sleep 0.02; done; echo first-done; }}
with_lock uv hold
"""), stdout=subprocess.PIPE, text=True, env=env)
    assert first.stdout.readline().strip() == "holding"
    second = subprocess.Popen(script(tmp_path, "second", "with_lock uv echo second-ran\n"), stdout=subprocess.PIPE,
                              text=True, env=env)
    waited = second.stdout.readline()
    assert waited.startswith(LOCK_WAIT_PREFIX) and waited.split()[1:] == ["second", "uv"], waited
    release.touch()
    assert first.stdout.read().strip() == "first-done" and first.wait(10) == 0
    assert second.stdout.read().strip() == "second-ran" and second.wait(10) == 0
    assert lock_waits(waited) == 1


def test_different_locks_do_not_wait_for_each_other(tmp_path):
    env = {**os.environ, "GPUHOSTS_HOST_ROOT": str(tmp_path / "host")}
    release = tmp_path / "release"
    first = subprocess.Popen(script(tmp_path, "first", f"""
hold() {{ echo holding; while [ ! -e {release} ]; do sleep 0.02; done; }}
with_lock dpkg hold
"""), stdout=subprocess.PIPE, text=True, env=env)
    assert first.stdout.readline().strip() == "holding"
    other = subprocess.run(script(tmp_path, "other", "with_lock uv echo ran\n"), capture_output=True, text=True,
                           env=env, timeout=30)
    assert other.stdout == "ran\n"
    release.touch()
    assert first.wait(10) == 0
