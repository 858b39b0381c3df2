"""A clean `up` of the kpro5 stack from the seed, one unit at a time, with the host and state copied before each.

Fault cases start from those copies: cutting unit k of a fresh `up` is the same as cutting the first unit that an
`up` runs when it starts where a clean one stood before unit k; the units before it are in sync and only read.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from sshhost.bed import Bed, host_unit_order, names

ORDER = host_unit_order()
# host: the host's side of the connection dies with its command; client: the connection's sshd process is
# killed, and the command runs on at the host until it next writes to the closed connection.
DROPS = ("host", "client")
# Commands that fail half-way: (command on the host, its arguments (glob), matching calls that still work,
# the error it prints, the unit it fails in).
HALF_WAY = [
    ("update-initramfs", "*", 0, "update-initramfs: failed: No space left on device", "vfio-binding"),
    ("pct", "set *--dev*", 1, "unable to write lxc config: got timeout", "ct129-gpu-devices"),
]


def marker(unit: str) -> str:
    """The line at which a unit's connection drops: its first change, after it has begun to act."""
    return f"{unit}: changed: *"


@dataclass
class Ladder:
    bed: Bed
    program: list
    start: str                  # digest of the seed
    converged: str              # digest after the clean `up`
    steps: list[Path]           # steps[k]: the host and state before unit k (0-based)


def build_ladder(root: Path) -> Ladder:
    bed = Bed.seed(root / "clean")
    start = bed.digest()
    program = bed.program()
    steps: list[Path] = []
    for unit in ORDER:
        step = root / f"before-{len(steps)}"
        shutil.copytree(bed.tree, step / "kpro5", symlinks=True)
        if bed.engine.state_file.exists():
            shutil.copy(bed.engine.state_file, step / "state.json")
        steps.append(step)
        ran = names(bed.up(program=program, targets=[unit]))
        if ran != [unit]:
            raise AssertionError(f"a targeted up of {unit} ran {ran}")
    return Ladder(bed, program, start, bed.digest(), steps)


def bed_before(ladder: Ladder, index: int, root: Path) -> Bed:
    """A bed of its own where the clean `up` stood before unit `index`."""
    step = ladder.steps[index]
    source = Bed.__new__(Bed)
    source.tree, source.run_file, source.sha256 = step / "kpro5", ladder.bed.run_file, ladder.bed.sha256
    source.engine = type("Stored", (), {"state_file": step / "state.json"})()
    return Bed.copy_of(source, root)


def converges(bed: Bed, first: str) -> None:
    """The next `up` starts again at `first`, reaches the declared state, and a further preview is clean."""
    program = bed.program()
    ran = names(bed.up(program=program))
    # The units from `first` on, each once; units that wait for none of each other finish in either order.
    assert sorted(ran) == sorted(ORDER[ORDER.index(first):]) and len(ran) == len(set(ran)), ran
    problems = bed.problems()
    assert problems == [], problems
    assert bed.preview(program=program).changed() == {}
