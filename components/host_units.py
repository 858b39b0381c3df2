"""The one component that turns a unit graph into resources: a HostUnit per unit, each waiting for what it needs.

Names are the units' keys and the parent is the host's component, so renaming the host changes inputs only; a
re-nested or renamed unit is still safe, because the old resource's teardown leaves a unit another resource owns
(gpuhosts/provider.py). No resource is created inside an `apply`: the graph is known before any output.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi.dynamic

from gpuhosts.provider import HostUnitProvider, secret_digest, unit_inputs
from gpuhosts.units import UnitGraph

# One instance for every resource: the engine deserialises and configures it once per provider process.
PROVIDER = HostUnitProvider()


class HostUnit(pulumi.dynamic.Resource):
    """A unit on a host: create and update run its ensure, refresh runs its probe, delete its teardown."""

    rebootRequired: pulumi.Output[bool]
    report: pulumi.Output[Any]

    def __init__(self, name: str, props: dict[str, Any], opts: pulumi.ResourceOptions):
        super().__init__(PROVIDER, name, props, opts)


def target_of(ssh) -> dict[str, Any]:
    """Where the units' commands go; no secret (the key comes from the stack config in the provider)."""
    # The host's name is left out: renaming it must not change a unit's inputs (its resources keep their names).
    return {"address": ssh.host, "port": ssh.port, "user": ssh.user, "hostKey": ssh.host_key}


def materialize(graph: UnitGraph, parent: pulumi.Resource, target: dict[str, Any],
                secrets: dict[str, pulumi.Input[str]]) -> dict[str, HostUnit]:
    resources: dict[str, HostUnit] = {}
    for unit in graph.apply_order:
        digest = None
        if unit.stdin_secret is not None:
            digest = pulumi.Output.secret(secrets[unit.stdin_secret]).apply(
                lambda value, key=unit.key: secret_digest(key, value))
        resources[unit.key] = HostUnit(
            unit.key, unit_inputs(unit, target, digest),
            pulumi.ResourceOptions(parent=parent, depends_on=[resources[need] for need in unit.needs]))
    return resources
