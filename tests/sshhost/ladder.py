"""A clean `up` of the kpro5 stack from the seed, one unit at a time, with the host and state copied before each.

Fault cases start from those copies: cutting unit k of a fresh `up` is the same as cutting the first unit that an
`up` runs when it starts where a clean one stood before unit k; the units before it are in sync and only read.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from fakehost.tree import tree_listing
from sshhost.bed import Bed, host_unit_graph, host_unit_order, names

ORDER = host_unit_order()
# Each unit's needs, read from the same plan: units that wait for none of each other run side by side.
NEEDS = host_unit_graph()
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
    start_listing: dict         # the seed's paths, to say where a host differs from it
    converged: str              # digest after the clean `up`
    steps: list[Path]           # steps[k]: the host and state before unit k (0-based)


def build_ladder(root: Path) -> Ladder:
    bed = Bed.seed(root / "clean")
    start, start_listing = bed.digest(), tree_listing(bed.tree)
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
    return Ladder(bed, program, start, start_listing, bed.digest(), steps)


def differs_from_start(ladder: Ladder, bed: Bed) -> list[str]:
    """The paths where `bed`'s host differs from the seed, with what each holds there and here."""
    here = tree_listing(bed.tree)
    return [f"{path}: {ladder.start_listing.get(path)} -> {here.get(path)}"
            for path in sorted(ladder.start_listing.keys() | here.keys())
            if ladder.start_listing.get(path) != here.get(path)]


def bed_before(ladder: Ladder, index: int, root: Path) -> Bed:
    """A bed of its own where the clean `up` stood before unit `index`."""
    step = ladder.steps[index]
    source = Bed.__new__(Bed)
    source.tree, source.run_file, source.sha256 = step / "kpro5", ladder.bed.run_file, ladder.bed.sha256
    source.engine = type("Stored", (), {"state_file": step / "state.json"})()
    return Bed.copy_of(source, root)


def dependents(unit: str) -> set[str]:
    """The units that wait for `unit`, directly or through others."""
    found: set[str] = set()
    frontier = {unit}
    while frontier:
        frontier = {key for key, needs in NEEDS.items() if frontier & set(needs)} - found
        found |= frontier
    return found


def cut_left(first: str, ops: list) -> list[str]:
    """What an `up` cut at `first` left to do: the units from `first` on that it did not finish, in plan order."""
    finished = {op.name for op in ops if op.operation != "read" and op.outcome == "ok"}
    return [unit for unit in ORDER[ORDER.index(first):] if unit not in finished]


def check_cut(first: str, ops: list, shared: bool = False) -> None:
    """An `up` cut in `first`: that unit failed, nothing that waits for it ran, and what ran beside it either
    finished or, where the cut took the host's one connection (`shared`), failed with it.

    Which of the units beside it ran depends on when the failure came: a failed step stops the scheduling of new
    ones, and those in flight finish (tests/engine)."""
    acted = [op for op in ops if op.operation != "read"]
    seen = [(op.name, op.outcome) for op in acted]
    beside = set(ORDER[ORDER.index(first):]) - dependents(first) - {first}
    failed = {op.name for op in acted if op.outcome != "ok"}
    assert first in failed and not {op.name for op in acted} & dependents(first), seen
    assert failed - {first} <= (beside if shared else set()), seen
    assert all("the connection dropped" in op.error for op in acted if op.name in failed - {first}), seen
    assert {op.name for op in acted if op.outcome == "ok"} <= beside, seen


def converges(bed: Bed, left: list[str]) -> None:
    """The next `up` runs each unit in `left` once and no other, reaches the declared state, and a further preview
    is clean."""
    program = bed.program()
    ran = names(bed.up(program=program))
    # Units that wait for none of each other finish in either order.
    assert sorted(ran) == sorted(left) and len(ran) == len(set(ran)), ran
    problems = bed.problems()
    assert problems == [], problems
    assert bed.preview(program=program).changed() == {}
