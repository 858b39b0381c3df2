"""gpuhosts' program as the release before a move registered it: every unit that carries `formerly` (its kind and
group then) stands where it stood, without the aliases, and the rest as today. The real-engine tier converges a host
with it, then moves the stack to today's program. Copied over a project copy's __main__.py; it runs today's
__main__.py (today.py) with `materialize` given the former graph."""

from __future__ import annotations

import importlib
import runpy
from dataclasses import replace
from pathlib import Path

import components.host_units as host_units
from gpuhosts.units import UnitGraph

today = host_units.materialize


def former_graph(graph: UnitGraph) -> UnitGraph:
    units = []
    for unit in graph.apply_order:
        for kind, group in unit.formerly:
            unit = replace(unit, kind=kind or unit.kind, group=unit.group if group is None else group)
        units.append(replace(unit, formerly=()))
    return UnitGraph(units, graph.groups.values())


def former(graph, *args, **kwargs):
    return today(former_graph(graph), *args, **kwargs)


host_units.materialize = former
for module in ("components.proxmox_host", "components.training_node"):
    importlib.import_module(module).materialize = former
runpy.run_path(str(Path(__file__).with_name("today.py")), run_name="__main__")
