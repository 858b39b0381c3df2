"""The unit graph: what each unit of a host does, what it truly needs, and the one order derived from that.

A unit is facts plus an operation (docs/architecture.md, "How a host is converged"):

* `ensure` — idempotent; moves the host to the desired facts, repairs drift, ends with one result line;
* `teardown` — run from state; undoes only what this unit's ensure did, and only while this resource owns it;
* `probe` — read-only and fast; prints one facts line (gpuhosts.protocol) with the observed facts;
* `desired` — the facts the probe prints on a host in the declared state.

Plan functions return units with the keys of the units they need; `UnitGraph` checks that the needs exist and have
no cycle, and gives the apply order, the teardown order and the waves a parallel engine may run at once. The
components materialise a graph with one loop (components/host_units.py); nothing else writes an order down.

The plans also say where each unit sits in the resource tree (`Unit.group`: the components above it, below the
host's own) and which outputs a component offers (`Group`); the tree is for reading, the needs alone order the units.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, TypeVar

from gpuhosts.render import HostFile

UNIT_KEY = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
# A unit's kind names its resource type and a group's kind its component's type: a Pulumi type's name.
KIND = re.compile(r"^[A-Z][A-Za-z0-9]{0,62}$")
GROUP_NAME = UNIT_KEY

# The components above a unit, outermost first, each (kind, name): (("LxcContainer", "ct129"),
# ("InferenceServiceStack", "qwen-sglang")). Empty: directly under the host's component.
GroupPath = tuple[tuple[str, str], ...]


class GraphError(ValueError):
    pass


OPERATIONS = ("probe", "ensure", "teardown")
# How long one operation of a unit may run, in seconds (gpuhosts/provider.py ends it, on the host and in the client).
# A probe only reads; most ensures install a file or a package. The kinds below wait on the network, a compiler or an
# engine, sized for a slow link: a 55 GB download at 2 MB/s takes 7.6 h. `ssh.operationTimeouts` overrides them.
DEFAULT_LIMITS_S = {"probe": 600, "ensure": 1800, "teardown": 1800}
KIND_LIMITS_S: dict[str, dict[str, int]] = {
    "NvidiaDriver": {"ensure": 7200, "teardown": 3600},  # the .run's download, then a DKMS build per kernel
    "ContainerUserspace": {"ensure": 3600},
    "PythonEnv": {"ensure": 7200},  # an engine's lock: several GB of wheels
    "ModelDownload": {"ensure": 43200},
    "DatasetStage": {"ensure": 43200},
    "DatasetPrepare": {"ensure": 86400},  # tokenizing every sample of the mix
    "DrafterConvert": {"ensure": 3600},
    "DDTreeCheckout": {"ensure": 3600},
    "DeployGate": {"ensure": 3600},  # the engine's readiness (30 min at most) and the measurements
    "HiddenStateServer": {"ensure": 3600},
    "Benchmark": {"ensure": 14400},
    "TrainingJob": {"ensure": 3600},  # the smoke run before the launch
    "VfioBinding": {"ensure": 3600},  # initramfs images of every kernel
}
# Every kind a plan makes; an override names one of them.
UNIT_KINDS = frozenset({
    "Benchmark", "ContainerUserspace", "DDTreeCheckout", "DatasetPrepare", "DatasetStage", "DcgmExporter", "DeployGate",
    "DrafterConvert", "Gateway", "GatewayAdmit", "GatewayDrain", "HiddenStateCheck", "HiddenStateServer", "HostReboot",
    "InferenceService", "LxcGpuPassthrough", "ModelDownload", "ModelStore", "MonitoringFiles", "NodeExporter",
    "NvidiaDeviceNodes", "NvidiaDriver", "Preflight", "PythonEnv", "TrainingJob", "TrainingMonitor", "VfioBinding",
})


def operation_limits(kind: str, overrides: Mapping[str, Mapping[str, int]] | None = None) -> dict[str, int]:
    """The limit of each operation of a unit of `kind`: the defaults, the kind's own, then the stack's."""
    return {**DEFAULT_LIMITS_S, **KIND_LIMITS_S.get(kind, {}), **((overrides or {}).get(kind) or {})}


@dataclass(frozen=True)
class HubFiles:
    """A Hugging Face repository's files at a revision as a unit keeps them in `directory` (inside `container`, or
    on the host): what `gpuhosts check --deep` reads whole and compares with the Hub's own listing."""

    repo: str
    revision: str
    directory: str
    container: int | None = None


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
    group: GroupPath = ()
    # A unit whose probe reads nothing says why nothing of it can be read back on a refresh; every other unit
    # declares facts (tests/test_unit_facts.py holds every unit of the committed stacks to it).
    no_facts_because: str = ""
    hub: HubFiles | None = None
    # Directories whose files the unit recorded as it wrote them (templates/common/content.sh.j2): a refresh
    # compares sizes and sampled digests, `gpuhosts check --deep` each file's whole sha256.
    content: tuple[str, ...] = ()
    # Where the unit's resource stood before a release of gpuhosts moved it: (its kind then or None for the same,
    # its group then or None for the same), each an alias, so a converged stack keeps the resource.
    formerly: tuple[tuple[str | None, GroupPath | None], ...] = ()

    def __post_init__(self) -> None:
        if not UNIT_KEY.match(self.key):
            raise GraphError(f"unit key {self.key!r} is not lower-case letters, digits and '-'")
        if not KIND.match(self.kind):
            raise GraphError(f"unit {self.key}: kind {self.kind!r} is not a CamelCase name (it names a resource type)")
        _check_path(self.group, f"unit {self.key}")

    @property
    def digest(self) -> str:
        return hashlib.sha256((self.ensure + "\0" + self.teardown).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Report:
    """A component's output that is the report of one of its units, once that unit has run."""

    unit: str


@dataclass(frozen=True)
class Group:
    """A component users read outputs from: where it is (as a unit's `group`) and its outputs, each a plain value
    or a `Report`."""

    path: GroupPath
    outputs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.path:
            raise GraphError("a group's path is empty: the host's own component is not a group")
        _check_path(self.path, "group")


def _check_path(path: GroupPath, what: str) -> None:
    for step in path:
        if not (isinstance(step, tuple) and len(step) == 2 and KIND.match(step[0]) and GROUP_NAME.match(step[1])):
            raise GraphError(f"{what}: group step {step!r} is not (CamelCase kind, lower-case name)")


Placed = TypeVar("Placed", Unit, Group)


def within(path: GroupPath, items: Iterable[Placed]) -> list[Placed]:
    """The units or groups moved under `path`, keeping the groups they already have below it: an outer plan puts
    what an inner plan grouped into its own component."""
    return [replace(item, group=path + item.group) if isinstance(item, Unit) else replace(item, path=path + item.path)
            for item in items]


class UnitGraph:
    """Units and their needs, checked once: unknown needs and cycles are errors that name the units."""

    def __init__(self, units: Iterable[Unit], groups: Iterable[Group] = ()):
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
        self.groups: dict[GroupPath, Group] = {}
        for group in groups:
            if group.path in self.groups:
                raise GraphError(f"two groups are at {_path_text(group.path)}")
            self.groups[group.path] = group
        self._check_groups()

    def _check_groups(self) -> None:
        paths = self.components()
        # A component's resource name is unique only with its type's chain of kinds (a Pulumi URN has no parent
        # names), so one name under two containers would be one resource.
        seen: dict[tuple[tuple[str, ...], str], GroupPath] = {}
        for path in paths:
            identity = (tuple(kind for kind, _ in path), path[-1][1])
            if seen.setdefault(identity, path) != path:
                raise GraphError(f"groups {_path_text(seen[identity])} and {_path_text(path)} would be one resource: "
                                 f"give them different names")
        for path, group in self.groups.items():
            if path not in paths:
                raise GraphError(f"group {_path_text(path)} has outputs but no unit under it")
            for name, value in group.outputs.items():
                if isinstance(value, Report) and (value.unit not in self.units or
                                                  self.units[value.unit].group[:len(path)] != path):
                    raise GraphError(f"group {_path_text(path)}: output {name} reports {value.unit}, which is not a "
                                     "unit under it")

    def components(self) -> list[GroupPath]:
        """Every group the units are in, outer before inner, in the apply order of the first unit in each."""
        paths: dict[GroupPath, None] = {}
        for unit in self.apply_order:
            for depth in range(1, len(unit.group) + 1):
                paths.setdefault(unit.group[:depth])
        return list(paths)

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


def _path_text(path: GroupPath) -> str:
    return "/".join(f"{kind} {name}" for kind, name in path)
