"""The one component that turns a unit graph into resources: a component per group the plan declares, and under its
group a resource per unit, of a type named by the unit's kind, each waiting for what it needs.

Names are the units' keys and the groups' names, and the root is the host's component, so renaming the host changes
inputs only; a re-nested or renamed unit is still safe, because the old resource's teardown leaves a unit another
resource owns (gpuhosts/provider.py). No resource is created inside an `apply`: the graph is known before any output.

Every unit resource carries an alias to the URN it had when all units were `pulumi-python:dynamic:Resource` directly
under the host's component, so a stack converged then keeps every resource.

In a stack of several hosts every name begins with the host's (`prefix`, `kpro5/`): a URN holds its parents' types
but not their names, so two hosts' `vfio-binding` would otherwise be one URN. The host that was a one-host stack's
(`adopt_one_host`) carries aliases to its unprefixed names as well, so that move creates and deletes nothing.
"""

from __future__ import annotations

import functools
from typing import Any

import pulumi
import pulumi.dynamic

from gpuhosts.provider import HostUnitProvider, secret_digest, unit_inputs
from gpuhosts.units import GroupPath, Report, UnitGraph

# One instance for every resource: the engine deserialises and configures it once per provider process.
PROVIDER = HostUnitProvider()
# The type every unit had before each kind had its own.
FLAT_UNIT_TYPE = "pulumi-python:dynamic:Resource"


class HostUnit(pulumi.dynamic.Resource):
    """A unit on a host: create and update run its ensure, refresh runs its probe, delete its teardown."""

    rebootRequired: pulumi.Output[bool]
    report: pulumi.Output[Any]

    def __init__(self, name: str, props: dict[str, Any], opts: pulumi.ResourceOptions):
        super().__init__(PROVIDER, name, props, opts)


@functools.cache
def unit_type(kind: str) -> type[HostUnit]:
    """The resource class of a unit kind, `pulumi-python:dynamic/gpuhosts:<kind>`: a new kind needs no class here."""
    return type(kind, (HostUnit,), {"__module__": __name__, "__doc__": f"A {kind} unit on a host."},
                module="gpuhosts", name=kind)


class UnitGroup(pulumi.ComponentResource):
    """A group of units as one component: an LXC container, a service, a benchmark, the training job. A subclass
    declares the outputs users read off it; the plan gives their values (gpuhosts.units.Group)."""

    def __init__(self, type_: str, name: str, opts: pulumi.ResourceOptions):
        super().__init__(type_, name, None, opts)

    def publish(self, outputs: dict[str, pulumi.Output[Any]]) -> None:
        declared = set(typed_outputs(type(self)))
        if declared and declared != set(outputs):
            raise ValueError(f"{type(self).__name__} {self._name}: the plan gives outputs {sorted(outputs)}, the "
                             f"component declares {sorted(declared)}")
        for name, value in outputs.items():
            setattr(self, name, value)
        self.register_outputs(outputs)


class InferenceServiceStack(UnitGroup):
    listen: pulumi.Output[str]      # bind:port of the engine
    gate: pulumi.Output[Any]        # the deploy gate's report; None for a stopped service


class BenchmarkStack(UnitGroup):
    results: pulumi.Output[str]     # where the runs' files are
    table: pulumi.Output[Any]       # the table of the last run


class TrainingJobStack(UnitGroup):
    checkpoints: pulumi.Output[str]
    log: pulumi.Output[str]
    dataset: pulumi.Output[str]     # what the trainer reads


GROUP_TYPES = {cls.__name__: cls for cls in (InferenceServiceStack, BenchmarkStack, TrainingJobStack)}


def typed_outputs(cls: type) -> dict[str, Any]:
    return {name: hint for klass in reversed(cls.__mro__) if issubclass(klass, UnitGroup) and klass is not UnitGroup
            for name, hint in klass.__dict__.get("__annotations__", {}).items()}


def target_of(ssh) -> dict[str, Any]:
    """Where the units' commands go; no secret (the key comes from the stack config in the provider)."""
    # The host's name is left out: renaming it must not change a unit's inputs (its resources keep their names).
    return {"address": ssh.host, "port": ssh.port, "user": ssh.user, "hostKey": ssh.host_key}


def materialize(graph: UnitGraph, root: pulumi.Resource, module: str, target: dict[str, Any],
                secrets: dict[str, pulumi.Input[str]], prefix: str = "",
                adopt_one_host: bool = False, timeouts: dict[str, dict[str, int]] | None = None) -> tuple[dict[str, HostUnit], dict[GroupPath, UnitGroup]]:
    """The units' resources by key and the groups' components by path; a group's type is
    `gpuhosts:<module>:<kind>`, as the root's is."""
    groups: dict[GroupPath, UnitGroup] = {}
    for path in graph.components():
        kind, name = path[-1]
        parent = groups[path[:-1]] if len(path) > 1 else root
        aliases = [pulumi.Alias(name=name)] if prefix and adopt_one_host else []
        groups[path] = GROUP_TYPES.get(kind, UnitGroup)(f"gpuhosts:{module}:{kind}", prefix + name,
                                                        pulumi.ResourceOptions(parent=parent, aliases=aliases))
    resources: dict[str, HostUnit] = {}
    for unit in graph.apply_order:
        digest = None
        if unit.stdin_secret is not None:
            digest = pulumi.Output.secret(secrets[unit.stdin_secret]).apply(
                lambda value, key=unit.key: secret_digest(key, value))
        aliases = [pulumi.Alias(type_=FLAT_UNIT_TYPE, parent=root)]
        for kind, group in unit.formerly:
            former: dict[str, Any] = {}
            if kind is not None:
                former["type_"] = f"pulumi-python:dynamic/gpuhosts:{kind}"
            if group is not None:
                if group and group not in groups:
                    continue  # the group it stood in is gone from the program: no resource of the stack is there
                former["parent"] = groups[group] if group else root
            aliases.append(pulumi.Alias(**former))
        if prefix and adopt_one_host:
            aliases = [pulumi.Alias(name=unit.key), pulumi.Alias(name=unit.key, type_=FLAT_UNIT_TYPE, parent=root)]
        resources[unit.key] = unit_type(unit.kind)(
            prefix + unit.key, unit_inputs(unit, target, digest, timeouts),
            pulumi.ResourceOptions(parent=groups[unit.group] if unit.group else root,
                                   depends_on=[resources[need] for need in unit.needs], aliases=aliases))
    for path, component in groups.items():
        declared = graph.groups.get(path)
        component.publish({name: resources[value.unit].report if isinstance(value, Report)
                           else pulumi.Output.from_input(value)
                           for name, value in (declared.outputs if declared else {}).items()})
    return resources, groups
