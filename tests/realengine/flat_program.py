"""gpuhosts' program as it registered before the resource tree: the same plan, every unit a
`pulumi-python:dynamic:Resource` directly under the host's component, without aliases and without the groups'
components. The real-engine tier converges a host with it, then moves the stack to today's program (whose units
carry aliases to these URNs). Copied over a project copy's __main__.py; it runs today's __main__.py with
`materialize` made flat."""

from __future__ import annotations

import importlib
import runpy
from pathlib import Path

import pulumi
import pulumi.dynamic

import components.host_units as host_units
from gpuhosts.provider import secret_digest, unit_inputs


class FlatUnit(pulumi.dynamic.Resource):
    """`pulumi-python:dynamic:Resource`: a subclass without module or name takes the SDK's default type."""


def flat(graph, root, module, target, secrets, prefix="", adopt_one_host=False, timeouts=None):
    resources = {}
    for unit in graph.apply_order:
        digest = None
        if unit.stdin_secret is not None:
            digest = pulumi.Output.secret(secrets[unit.stdin_secret]).apply(
                lambda value, key=unit.key: secret_digest(key, value))
        resources[unit.key] = FlatUnit(
            host_units.PROVIDER, prefix + unit.key, unit_inputs(unit, target, digest, timeouts),
            pulumi.ResourceOptions(parent=root, depends_on=[resources[need] for need in unit.needs]))
    return resources, {}


host_units.materialize = flat
for module in ("components.proxmox_host", "components.training_node"):
    importlib.import_module(module).materialize = flat
runpy.run_path(str(Path(__file__).with_name("today.py")), run_name="__main__")
