"""The unit graph: what each unit of a host does, what it truly needs, and the one order derived from that.

A unit is facts plus an operation (docs: README, "How a host is converged"):

* `ensure` — idempotent; moves the host to the desired facts, repairs drift, ends with one result line;
* `teardown` — run from state; undoes only what this unit's ensure did, and only while this resource owns it;
* `probe` — read-only and fast; prints one facts line (gpuhosts.protocol) with the observed facts;
* `desired` — the facts the probe prints on a host in the declared state.

Plan functions return units with the keys of the units they need; `UnitGraph` checks that the needs exist and have
no cycle, and gives the apply order, the teardown order and the waves a parallel engine may run at once. The
components materialise a graph with one loop (components/host_units.py); nothing else writes an order down.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from gpuhosts.render import HostFile

UNIT_KEY = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


class GraphError(ValueError):
    pass


@dataclass(frozen=True)
class Unit:
    """One host unit. `key` names it on its host and in Pulumi (the resource name), so it never contains the host's
    name: renaming the host changes inputs, not identities."""

    key: str
    kind: str
    ensure: str
    teardown: str
    probe: str
    desired: dict[str, Any] = field(default_factory=dict)
    needs: tuple[str, ...] = ()
    files: tuple[HostFile, ...] = ()
    # Name of the secret stack key the scripts receive on stdin (never in a script).
    stdin_secret: str | None = None
    # vmid of the container the files are installed in; None for the host itself.
    container: int | None = None
    # What the teardown undoes, in a reviewer's words with the GPUs, slots and vmids it concerns: `gpuhosts diff`
    # warns with it when the unit goes away, so the words come from the plan that knows them.
    undoes: str = ""
    # Desired facts (files are "file PATH" facts) whose change only takes effect after a host reboot.
    reboot_on: tuple[str, ...] = ()
    # The container a change of this unit restarts (devN or mpN entries), and whether allowRestart lets it.
    restarts: int | None = None
    restart_allowed: bool = False

    def __post_init__(self) -> None:
        if not UNIT_KEY.match(self.key):
            raise GraphError(f"unit key {self.key!r} is not lower-case letters, digits and '-'")

    @property
    def digest(self) -> str:
        return hashlib.sha256((self.ensure + "\0" + self.teardown).encode()).hexdigest()[:16]


class UnitGraph:
    """Units and their needs, checked once: unknown needs and cycles are errors that name the units."""

    def __init__(self, units: Iterable[Unit]):
        self.units: dict[str, Unit] = {}
        for unit in units:
            if unit.key in self.units:
                raise GraphError(f"two units are called {unit.key}")
            self.units[unit.key] = unit
        for unit in self.units.values():
            unknown = [need for need in unit.needs if need not in self.units]
            if unknown:
                raise GraphError(f"unit {unit.key} needs {', '.join(unknown)}, which the plan does not have")
        self._order = self._topological()

    def _topological(self) -> list[str]:
        # Kahn's algorithm; ties keep the order in which the plan declared the units, so output is stable.
        position = {key: index for index, key in enumerate(self.units)}
        waiting = {key: set(unit.needs) for key, unit in self.units.items()}
        ordered: list[str] = []
        while waiting:
            ready = sorted((key for key, needs in waiting.items() if not needs), key=position.__getitem__)
            if not ready:
                raise GraphError("the units' needs form a cycle: " + " → ".join(sorted(waiting)))
            for key in ready:
                del waiting[key]
                ordered.append(key)
            for needs in waiting.values():
                needs.difference_update(ready)
        return ordered

    def __iter__(self):
        return (self.units[key] for key in self._order)

    def __len__(self) -> int:
        return len(self.units)

    def __getitem__(self, key: str) -> Unit:
        return self.units[key]

    @property
    def apply_order(self) -> list[Unit]:
        return [self.units[key] for key in self._order]

    @property
    def teardown_order(self) -> list[Unit]:
        return list(reversed(self.apply_order))

    def waves(self) -> list[list[str]]:
        """Keys grouped by depth: every unit of a wave needs only units of earlier waves."""
        depth: dict[str, int] = {}
        for key in self._order:
            depth[key] = 1 + max((depth[need] for need in self.units[key].needs), default=-1)
        waves: list[list[str]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
        for key in self._order:
            waves[depth[key]].append(key)
        return waves

    def needed_by(self, key: str) -> list[str]:
        return [other.key for other in self.apply_order if key in other.needs]

    def files(self) -> list[tuple[int | None, HostFile]]:
        return [(unit.container, file) for unit in self.apply_order for file in unit.files]
