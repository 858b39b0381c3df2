"""gpuhosts' program with every host's units moved, without aliases, under one component of their own
(`gpuhosts:host:Units`): each unit's parent chain, so its URN, changes and the engine creates it anew and deletes the
old one last. Copied over a project copy's __main__.py; it runs today's __main__.py (today.py)."""

from __future__ import annotations

import importlib
import runpy
from pathlib import Path

import pulumi

import components.host_units as host_units

today = host_units.materialize


def renested(graph, root, *args, **kwargs):
    units = pulumi.ComponentResource("gpuhosts:host:Units", "units", None, pulumi.ResourceOptions(parent=root))
    return today(graph, units, *args, **kwargs)


host_units.materialize = renested
for module in ("components.proxmox_host", "components.training_node"):
    importlib.import_module(module).materialize = renested
runpy.run_path(str(Path(__file__).with_name("today.py")), run_name="__main__")
