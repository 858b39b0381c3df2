"""Renames and replacements as the engine sees them: a program whose URNs (or a unit's identity) changed.

A renamed host changes only the host component's name (units are named by key, under the component's type); a
renamed component type or a re-nested unit changes every unit's URN, so the engine creates the "new" units and
deletes the old ones at the end; `--replace` makes a unit's new resource first and deletes the old one last.
Each must leave the host as it is: the old resources' teardowns find that another resource owns the unit.
`flat_layout` is the program as it registered before each unit kind had its type and the tree its components, the
state the units' aliases carry a stack over from. Shared by tests/lifecycle/test_renames.py, test_aliases.py and
`make lifecycle`.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Callable

from gpuhosts.plans.proxmox_host import plan_host
from gpuhosts.stacks import validate_stack

HOST_TYPE = "gpuhosts:host:ProxmoxHost"
FLAT_UNIT_TYPE = "pulumi-python:dynamic:Resource"


def is_unit(resource: dict) -> bool:
    return resource["type"].startswith("pulumi-python:dynamic")


def urn_under(parent_urn: str, type_: str, name: str) -> str:
    """A URN under a parent that is not the stack, as the engine makes it: the parent's chain of types, then `$` and
    the type (pkg/resource/urn.go)."""
    return f"{parent_urn.rsplit('::', 1)[0]}${type_}::{name}"


def _flattened(program: list[dict], parent_type: str, unit_type) -> list[dict]:
    """Every unit directly under a component of `parent_type` (the root's own, or one made under the root), of type
    `unit_type(resource)`, without aliases; the components between them are gone."""
    root = _root(program)
    parent = root if parent_type == root["type"] else {
        "urn": urn_under(root["urn"], parent_type, "units"), "type": parent_type, "name": "units",
        "parent": root["urn"], "dependencies": [], "inputs": {}, "aliases": []}
    urns = {r["urn"]: urn_under(parent["urn"], unit_type(r), r["name"]) for r in program if is_unit(r)}
    units = [{**r, "urn": urns[r["urn"]], "type": unit_type(r), "parent": parent["urn"], "aliases": [],
              "dependencies": sorted(urns.get(d, d) for d in r["dependencies"])} for r in program if is_unit(r)]
    return [root, *([] if parent is root else [parent]), *units]


def flat_layout(program: list[dict]) -> list[dict]:
    """The program as it was before the resource tree: one `pulumi-python:dynamic:Resource` per unit, directly
    under the host's (or node's) component, nothing else, no aliases."""
    return _flattened(program, _root(program)["type"], lambda r: FLAT_UNIT_TYPE)


def _root(program: list[dict]) -> dict:
    """The host's or node's component: the one resource whose parent (the stack) the program does not register."""
    urns = {r["urn"] for r in program}
    (root,) = [r for r in program if r["parent"] not in urns]
    return root


def _rewrite(program: list[dict], old: str, new: str) -> list[dict]:
    return json.loads(json.dumps(program).replace(old, new))


def renamed_component(program: list[dict]) -> list[dict]:
    """The host's component type renamed in code: every unit's URN changes."""
    return _rewrite(program, HOST_TYPE, "gpuhosts:host:GpuHost")


def re_nested(program: list[dict]) -> list[dict]:
    """The units moved, without aliases, under one component of their own: their parent chain, so their URNs,
    change."""
    return _flattened(program, "gpuhosts:host:Units", lambda r: r["type"])


@dataclass
class CarriedOver:
    """`up` of today's program over a host converged with the flat one: what it did, and the state before and after."""

    ops: list                               # the engine's ops of that `up` (a refresh's reads included)
    preview: dict                           # name: operation of its preview's changes
    before: dict                            # the state after the flat `up`
    after: dict                             # the state after today's
    scripts: int                            # ensure and teardown runs in the provider's log of that `up`

    def count(self, operation: str) -> int:
        return sum(op.operation == operation for op in self.ops)

    @property
    def commands(self) -> int:
        return sum(op.operation != "read" for op in self.ops)

    def figure(self) -> str:
        return f"alias: creates={self.count('create')} deletes={self.count('delete')} commands={self.commands}"


def carry_over(bed, program: list[dict]) -> CarriedOver:
    """Converge `bed` with the flat layout of `program`, then preview and `up` `program` itself."""
    bed.up(program=flat_layout(program))
    before = bed.engine.state()
    preview = {name: change.operation for name, change in bed.preview(program=program).changed().items()}
    logged = len(bed.engine.log)
    ops = bed.up(program=program)
    scripts = sum(" ensure " in line or " teardown " in line for line in bed.engine.log[logged:]
                  if line.startswith("gpuhosts-unit: "))
    return CarriedOver(ops, preview, before, bed.engine.state(), scripts)


@dataclass(frozen=True)
class Rename:
    name: str
    program: Callable                       # (bed) -> the program after the change
    replace: tuple[str, ...] = ()           # `pulumi up --replace` of these units
    values: Callable | None = None          # (bed) -> the stack's values after the change, where they change


def host_renamed_values(bed) -> dict:
    values = copy.deepcopy(bed.values())
    values["host"]["name"] = "kpro5b"
    return values


def host_renamed(bed) -> list[dict]:
    return bed.program(host_renamed_values(bed))


RENAMES = [
    Rename("host renamed", host_renamed, values=host_renamed_values),
    Rename("component renamed", lambda bed: renamed_component(bed.program())),
    Rename("units re-nested", lambda bed: re_nested(bed.program())),
    Rename("units replaced (--replace)", lambda bed: bed.program(),
           replace=("vfio-binding", "nvidia-driver", "ct129-gpu-devices", "ct129-nvidia-userspace")),
]


def rewritten(old_values: dict, new_values: dict) -> dict[str, set[str]]:
    """The units whose declared state the change of values moves, each with the paths of the files it writes: what
    an `up` must change on the host. Read from the plans, never listed: a host's name is a label on its metrics."""
    old, new = (plan_host(validate_stack(values, {"sshPrivateKey"})).units for values in (old_values, new_values))
    return {key: {file.path.lstrip("/") for file in new[key].files}
            for key in old.keys() & new.keys() if old[key].desired != new[key].desired}
