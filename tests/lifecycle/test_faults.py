"""Faults while the kpro5 stack is applied over SSH: dropped connections, commands failing half-way; the next `up`.

A fresh `up` is cut in each of its units in turn, at a marker the unit prints (its first change), never after a
measured delay. To keep this quick, the `up` that is cut starts from a copy of the host and state that a clean
`up` had reached just before that unit (tests/sshhost/ladder.py).
"""

from __future__ import annotations

import pytest

from engine import ApplyError
from sshhost.ladder import (DROPS, HALF_WAY, ORDER, Ladder, bed_before, build_ladder, check_cut, converges, cut_left,
                            differs_from_start, marker)


@pytest.fixture(scope="module")
def ladder(tmp_path_factory) -> Ladder:
    built = build_ladder(tmp_path_factory.mktemp("ladder"))
    yield built
    built.bed.close()


def stored_units(bed) -> set[str]:
    return {entry["name"] for entry in bed.engine.state().values() if "ensure" in entry["inputs"]}


@pytest.mark.parametrize("how", DROPS)
@pytest.mark.parametrize("index", range(len(ORDER)), ids=ORDER)
def test_a_connection_dropped_mid_command_is_converged_by_the_next_up(ladder, tmp_path, index, how):
    bed = bed_before(ladder, index, tmp_path / "bed")
    try:
        name = ORDER[index]
        fired = bed.ssh.drop_on_output(marker(name), how)
        with pytest.raises(ApplyError) as caught:
            bed.up()
        assert fired.exists(), "the marker never came"
        assert "the connection dropped mid-command" in str(caught.value), str(caught.value)
        # One SSH connection per host: killing its sshd fails every command in flight on it.
        check_cut(name, caught.value.ops, shared=how == "client")
        assert name not in stored_units(bed)
        assert bed.ssh.wait_idle(), "the dropped command still runs on the host"
        converges(bed, cut_left(name, caught.value.ops))
    finally:
        bed.close()


@pytest.mark.parametrize("command, when, skip, message, unit", HALF_WAY,
                         ids=["initramfs-in-vfio-binding", "second-pct-set-in-ct129-gpu-devices"])
def test_a_command_failing_half_way_is_repaired_by_the_next_up(ladder, tmp_path, command, when, skip, message, unit):
    bed = bed_before(ladder, ORDER.index(unit), tmp_path / "bed")
    try:
        bed.ssh.fail_once(command, message, when=when, skip=skip)
        with pytest.raises(ApplyError) as caught:
            bed.up()
        assert message in str(caught.value) and f"{unit}: changed:" in str(caught.value), "not half-way"
        check_cut(unit, caught.value.ops)
        converges(bed, cut_left(unit, caught.value.ops))
        assert bed.digest() == ladder.converged
    finally:
        bed.close()


def test_a_drop_right_after_apt_get_still_lets_destroy_restore_the_start(ladder, tmp_path):
    bed = bed_before(ladder, ORDER.index("nvidia-driver"), tmp_path / "bed")
    try:
        bed.ssh.drop_after("apt-get", "install *dkms*")  # the driver's install, not an exporter's beside it
        with pytest.raises(ApplyError) as caught:
            bed.up()
        check_cut("nvidia-driver", caught.value.ops)
        converges(bed, cut_left("nvidia-driver", caught.value.ops))
        bed.destroy()
        installed = (bed.tree / "var/lib/fakehost/dpkg-installed").read_text().split()
        assert "dkms" not in installed, "destroy left the packages the driver installed"
        assert bed.digest() == ladder.start, differs_from_start(ladder, bed)
    finally:
        bed.close()
