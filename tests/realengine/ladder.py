"""A clean `pulumi up` of the kpro5 stack from the seed, one unit at a time, with the host and state kept before each.

Each rung is `pulumi up --target` of one unit (with the components it sits in): the real CLI creates that unit and
nothing else, and the host's tree and the stack's state are kept before it (``Converged.snapshot``). Cutting unit k
of a fresh `up` is the same as cutting the first unit an `up` runs when it starts where a clean one stood before
unit k: the units before it are in sync, so the engine only refreshes them.

What a cut `up` did is read from the CLI's event stream (each unit's step: created, updated or failed, and the
error it failed with) and from the provider's log (each ensure and teardown that ran on the host).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fakehost.tree import tree_listing
from realengine import Project, Run, urn_name
from realengine.beds import Converged, Snapshot
from sshhost.bed import host_unit_graph, host_unit_order

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
    host: Converged             # the stack that climbed the ladder, converged at its top
    start: str                  # digest of the seed
    start_listing: dict         # the seed's paths, to say where a host differs from it
    converged: str              # digest after the clean `up`
    steps: list[Snapshot]       # steps[k]: the host and state before unit k (0-based)

    def close(self) -> None:
        self.host.close()


def unit_targets(host: Converged) -> dict[str, list[str]]:
    """For each unit, the `--target` arguments that create it and nothing else: its URN and those of the components
    it sits in. The engine refuses to create a resource whose parent is neither in the state nor targeted, and
    before the first `up` no resource has a URN in the state, so they are read from a preview's planned steps.

    Each is given as a pattern: the engine refuses a literal URN that its state does not hold yet ("could not be
    found in the stack"), and a pattern may match a resource it is about to create. Names are unique in the stack,
    so the pattern of a name matches one resource."""
    planned = {step["urn"]: (step.get("newState") or {}).get("parent") for step in host.preview().steps}
    by_name = {urn_name(urn): urn for urn in planned}
    stack = host.stack.name
    targets: dict[str, list[str]] = {}
    for unit in ORDER:
        chain, urn = [], by_name[unit]
        while urn:
            chain.append(f"--target=urn:pulumi:{stack}::gpuhosts::**::{urn_name(urn)}")
            urn = planned.get(urn)
        targets[unit] = chain
    return targets


def build_ladder(project: Project, root: Path) -> Ladder:
    host = Converged.seed(project, root / "clean")
    start, start_listing = host.digest(), tree_listing(host.bed.tree)
    targets = unit_targets(host)
    steps: list[Snapshot] = []
    for unit in ORDER:
        steps.append(host.snapshot(root / f"before-{len(steps)}"))
        ran = host.up(None, *targets[unit]).host_operations
        if ran != [(unit, "ensure")]:
            raise AssertionError(f"a targeted up of {unit} ran {ran}")
    return Ladder(host, start, start_listing, host.digest(), steps)


def host_before(ladder: Ladder, index: int, root: Path) -> Converged:
    """A host and stack of their own where the clean `up` stood before unit `index`."""
    return Converged.restore(ladder.steps[index], root, ladder.host.stack.project)


def differs_from_start(ladder: Ladder, host: Converged) -> list[str]:
    """The paths where `host` differs from the seed, with what each holds there and here."""
    here = tree_listing(host.bed.tree)
    return [f"{path}: {ladder.start_listing.get(path)} -> {here.get(path)}"
            for path in sorted(ladder.start_listing.keys() | here.keys())
            if ladder.start_listing.get(path) != here.get(path)]


def stored_units(host: Converged) -> set[str]:
    """The host units the stack's state holds."""
    return set(host.state()) & set(ORDER)


def dependents(unit: str) -> set[str]:
    """The units that wait for `unit`, directly or through others."""
    found: set[str] = set()
    frontier = {unit}
    while frontier:
        frontier = {key for key, needs in NEEDS.items() if frontier & set(needs)} - found
        found |= frontier
    return found


def unit_steps(run: Run) -> dict[str, str]:
    """Each host unit's step in the run, by name ("failed" for one whose step failed); a unit the engine only
    refreshed (same) is left out: it did not act."""
    return {name: op for name, op in run.operations().items() if name in NEEDS and op != "same"}


def cut_left(first: str, run: Run) -> list[str]:
    """What an `up` cut at `first` left to do: the units from `first` on that it did not finish, in plan order."""
    finished = {name for name, op in unit_steps(run).items() if op != "failed"}
    return [unit for unit in ORDER[ORDER.index(first):] if unit not in finished]


def check_cut(first: str, run: Run, shared: bool = False) -> None:
    """An `up` cut in `first`: that unit failed, nothing that waits for it ran, and what ran beside it either
    finished or, where the cut took the host's one connection (`shared`), failed with it.

    Which of the units beside it ran depends on when the failure came: a failed step stops the engine from
    scheduling new ones, and those in flight finish."""
    acted = unit_steps(run)
    errors = run.errors()
    seen = (acted, errors)
    beside = set(ORDER[ORDER.index(first):]) - dependents(first) - {first}
    failed = {name for name, op in acted.items() if op == "failed"}
    assert run.returncode != 0, seen
    assert first in failed and not set(acted) & dependents(first), seen
    # The host's own account: no script of a unit that waits for the cut one ran there.
    assert not {unit for unit, _ in run.host_operations} & dependents(first), run.host_operations
    assert failed - {first} <= (beside if shared else set()), seen
    assert all("the connection dropped" in errors.get(name, "") for name in failed - {first}), seen
    assert {name for name, op in acted.items() if op != "failed"} <= beside, seen


def converges(host: Converged, left: list[str]) -> Run:
    """The next `up` runs each unit in `left` once and no other, creates exactly those, reaches the declared state,
    and a further preview is clean."""
    run = host.up()
    ran = [unit for unit, _ in run.host_operations]
    # Units that wait for none of each other finish in either order.
    assert sorted(ran) == sorted(left) and len(ran) == len(set(ran)), run.host_operations
    assert {unit for unit, script in run.host_operations if script != "ensure"} == set(), run.host_operations
    assert unit_steps(run) == {unit: "create" for unit in left}, unit_steps(run)
    problems = host.bed.problems()
    assert problems == [], problems
    assert host.preview().changed() == {}
    return run
