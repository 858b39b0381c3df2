"""Faults while the kpro5 stack is applied over SSH: dropped connections, commands failing half-way; the next `up`.

A fresh `up` is cut at each of its commands in turn. To keep this quick, the `up` that is cut starts from a copy of
the host and state that a clean `up` had reached just before that command (the same thing a fresh `up` would
have done up to there), so only the cut command and the ones after it run (tests/sshhost/ladder.py).
"""

from __future__ import annotations

import pytest

from sshhost.executor import ApplyError, CommandFailed, ConnectionLost
from sshhost.ladder import DROPS, HALF_WAY, ORDER, Ladder, bed_before, build_ladder, converges, drop


@pytest.fixture(scope="module")
def ladder(tmp_path_factory) -> Ladder:
    built = build_ladder(tmp_path_factory.mktemp("ladder"))
    yield built
    built.bed.close()


@pytest.mark.parametrize("how", DROPS)
@pytest.mark.parametrize("index", range(len(ORDER)), ids=ORDER)
def test_a_connection_dropped_mid_command_is_converged_by_the_next_up(ladder, tmp_path, index, how):
    """`host`: the host's side of the connection dies with its command; `client`: the client's end is killed,
    and the command runs on at the host until it next writes to the closed connection (or to its end)."""
    bed = bed_before(ladder, index, tmp_path / "bed")
    try:
        name = ORDER[index]
        fault = drop(bed, how, ladder.seconds[index])
        with pytest.raises(ConnectionLost) as caught:
            bed.up(plan=ladder.plan, fault=fault)
        assert fault.fired and [r.name for r in caught.value.runs] == [name]
        assert name not in {s["name"] for s in bed.executor.state().values()}
        assert bed.ssh.wait_idle(), "the dropped command still runs on the host"
        converges(bed, ladder.plan, name)
    finally:
        bed.close()


@pytest.mark.parametrize("command, when, skip, message, unit", HALF_WAY,
                         ids=["initramfs-in-vfio-binding", "second-pct-set-in-ct129-gpu-devices"])
def test_a_command_failing_half_way_is_repaired_by_the_next_up(ladder, tmp_path, command, when, skip, message, unit):
    index = ORDER.index(unit)
    bed = bed_before(ladder, index, tmp_path / "bed")
    try:
        bed.ssh.fail_once(command, message, when=when, skip=skip)
        with pytest.raises(CommandFailed) as caught:
            bed.up(plan=ladder.plan)
        assert message in str(caught.value) and "changed:" in caught.value.runs[-1].stdout, "not half-way"
        converges(bed, ladder.plan, unit)
        assert bed.digest() == ladder.converged
    finally:
        bed.close()


def test_a_drop_right_after_apt_get_still_lets_destroy_restore_the_start(ladder, tmp_path):
    index = ORDER.index("kpro5-nvidia-driver")
    bed = bed_before(ladder, index, tmp_path / "bed")
    try:
        bed.ssh.drop_after("apt-get", "install *")
        with pytest.raises(ApplyError):
            bed.up(plan=ladder.plan)
        converges(bed, ladder.plan, "kpro5-nvidia-driver")
        bed.destroy()
        installed = (bed.tree / "var/lib/fakehost/dpkg-installed").read_text().split()
        assert "dkms" not in installed, "destroy left the packages the driver installed"
        assert bed.digest() == ladder.start
    finally:
        bed.close()
