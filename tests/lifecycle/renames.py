"""Renames and replacements as the engine sees them: a program whose URNs (or a unit's identity) changed.

A renamed host changes only the host component's name (units are named by key, under the component's type); a
renamed component type or a re-nested unit changes every unit's URN, so the engine creates the "new" units and
deletes the old ones at the end; `--replace` makes a unit's new resource first and deletes the old one last.
Each must leave the host as it is: the old resources' teardowns find that another resource owns the unit.
Shared by tests/lifecycle/test_renames.py and `make lifecycle`.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Callable

HOST_TYPE = "gpuhosts:host:ProxmoxHost"


def _rewrite(program: list[dict], old: str, new: str) -> list[dict]:
    return json.loads(json.dumps(program).replace(old, new))


def renamed_component(program: list[dict]) -> list[dict]:
    """The host's component type renamed in code: every unit's URN changes."""
    return _rewrite(program, HOST_TYPE, "gpuhosts:host:GpuHost")


def re_nested(program: list[dict]) -> list[dict]:
    """The units moved under a component of their own: their parent chain, so their URNs, change."""
    nested = _rewrite(program, f"{HOST_TYPE}$pulumi-python:dynamic:Resource::",
                      f"{HOST_TYPE}$gpuhosts:host:Units$pulumi-python:dynamic:Resource::")
    host = next(r for r in nested if r["type"] == HOST_TYPE)
    group_urn = host["urn"].replace(f"{HOST_TYPE}::", f"{HOST_TYPE}$gpuhosts:host:Units::")
    for r in nested:
        if r["type"] == "pulumi-python:dynamic:Resource":
            r["parent"] = group_urn
    nested.append({"urn": group_urn, "type": "gpuhosts:host:Units", "name": "units", "parent": host["urn"],
                   "dependencies": [], "inputs": {}})
    return nested


@dataclass(frozen=True)
class Rename:
    name: str
    program: Callable                       # (bed) -> the program after the change
    replace: tuple[str, ...] = ()           # `pulumi up --replace` of these units


def host_renamed(bed) -> list[dict]:
    values = copy.deepcopy(bed.values())
    values["host"]["name"] = "kpro5b"
    return bed.program(values)


RENAMES = [
    Rename("host renamed", host_renamed),
    Rename("component renamed", lambda bed: renamed_component(bed.program())),
    Rename("units re-nested", lambda bed: re_nested(bed.program())),
    Rename("units replaced (--replace)", lambda bed: bed.program(),
           replace=("vfio-binding", "nvidia-driver", "ct129-gpu-devices", "ct129-nvidia-userspace")),
]
