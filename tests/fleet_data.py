"""A stack of several hosts made from a one-host stack's values: the same host side on each, named and addressed
apart. The tests of gpuhosts/fleet.py and the fleet figures build their stacks with it."""

from __future__ import annotations

import copy
from typing import Any

ONE_HOST_SECTIONS = ("gpus", "containers", "services", "benchmarks")


def fleet_entry(values: dict[str, Any], name: str, address: str) -> dict[str, Any]:
    """A one-host stack's host and sections as one entry of `gpuhosts:hosts`, named `name` at `address`."""
    entry = {**copy.deepcopy(values["host"]),
             **{key: copy.deepcopy(values[key]) for key in ONE_HOST_SECTIONS if values.get(key) is not None}}
    entry["name"] = name
    entry["ssh"]["host"] = address
    return entry


def fleet_values(values: dict[str, Any], count: int, migrated: bool = True) -> dict[str, Any]:
    """`count` hosts like the one-host stack's: the first keeps its name and address (and, with `migrated`, takes
    over its resources), the others are <name>-1, <name>-2 … at documentation addresses (RFC 5737)."""
    name, address = values["host"]["name"], values["host"]["ssh"]["host"]
    entries = [fleet_entry(values, name, address)]
    if migrated:
        entries[0]["migratedFromHost"] = True
    entries += [fleet_entry(values, f"{name}-{index}", f"198.51.100.{index}") for index in range(1, count)]
    fleet = {"kind": "proxmox", "nvidia": copy.deepcopy(values["nvidia"]), "hosts": entries}
    if "monitoring" in values:
        fleet["monitoring"] = copy.deepcopy(values["monitoring"])
    return fleet
