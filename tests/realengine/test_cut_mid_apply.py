"""Faults while the real CLI applies the kpro5 stack over SSH: dropped connections, commands failing half-way; the
next `pulumi up`.

A fresh `up` is cut in each of its units in turn, at a marker the unit prints (its first change), never after a
measured delay. To keep this quick, the `up` that is cut starts from a copy of the host and state that a clean
`up` had reached just before that unit (tests/realengine/ladder.py). An `up` interrupted by the operator, and the
backend's lock, are tests/realengine/test_faults.py's.
"""

from __future__ import annotations

import pytest

from realengine.ladder import (DROPS, HALF_WAY, ORDER, Ladder, build_ladder, check_cut, converges, cut_left,
                               differs_from_start, host_before, marker, stored_units)

pytestmark = pytest.mark.pulumi


@pytest.fixture(scope="module")
def ladder(project, tmp_path_factory) -> Ladder:
    built = build_ladder(project, tmp_path_factory.mktemp("ladder"))
    yield built
    built.close()


@pytest.mark.parametrize("how", DROPS)
@pytest.mark.parametrize("index", range(len(ORDER)), ids=ORDER)
def test_a_connection_dropped_mid_command_is_converged_by_the_next_up(ladder, tmp_path, index, how):
    host = host_before(ladder, index, tmp_path / "host")
    try:
        name = ORDER[index]
        fired = host.bed.ssh.drop_on_output(marker(name), how)
        run = host.up(check=False)
        assert fired.exists(), "the marker never came"
        error = run.errors().get(name, "")
        assert "the connection dropped mid-command" in error, run.error_text() or run.stderr[-4000:]
        # One SSH connection per host: killing its sshd fails every command in flight on it.
        check_cut(name, run, shared=how == "client")
        assert name not in stored_units(host)
        assert host.bed.ssh.wait_idle(), "the dropped command still runs on the host"
        converges(host, cut_left(name, run))
    finally:
        host.close()


@pytest.mark.parametrize("command, when, skip, message, unit", HALF_WAY,
                         ids=["initramfs-in-vfio-binding", "second-pct-set-in-ct129-gpu-devices"])
def test_a_command_failing_half_way_is_repaired_by_the_next_up(ladder, tmp_path, command, when, skip, message, unit):
    host = host_before(ladder, ORDER.index(unit), tmp_path / "host")
    try:
        host.bed.ssh.fail_once(command, message, when=when, skip=skip)
        run = host.up(check=False)
        error = run.errors().get(unit, "")
        assert message in error and f"{unit}: changed:" in error, f"not half-way: {run.error_text()}"
        check_cut(unit, run)
        converges(host, cut_left(unit, run))
        assert host.digest() == ladder.converged
    finally:
        host.close()


def test_a_drop_right_after_apt_get_still_lets_destroy_restore_the_start(ladder, tmp_path):
    host = host_before(ladder, ORDER.index("nvidia-driver"), tmp_path / "host")
    try:
        host.bed.ssh.drop_after("apt-get", "install *dkms*")  # the driver's install, not an exporter's beside it
        run = host.up(check=False)
        check_cut("nvidia-driver", run)
        converges(host, cut_left("nvidia-driver", run))
        destroy = host.destroy()
        assert sorted(unit for unit, script in destroy.host_operations if script == "teardown") == sorted(ORDER)
        assert stored_units(host) == set()
        installed = (host.bed.tree / "var/lib/fakehost/dpkg-installed").read_text().split()
        assert "dkms" not in installed, "destroy left the packages the driver installed"
        assert host.digest() == ladder.start, differs_from_start(ladder, host)
    finally:
        host.close()
