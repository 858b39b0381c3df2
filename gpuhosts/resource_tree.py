"""The resource tree as `pulumi preview` shows it: each resource's type and name, under its parent.

    pulumi:pulumi:Stack                    gpuhosts-kpro5
    └─ gpuhosts:host:ProxmoxHost           kpro5
       ├─ pulumi-python:dynamic/gpuhosts:VfioBinding  vfio-binding
       …

A parent that is not among the resources (the stack) is shown from its URN. Siblings come in the order of a rank
by name (the plan's apply order), a component at the rank of the first unit under it; names break ties.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Protocol


class Registered(Protocol):
    urn: str
    type: str
    name: str
    parent: str | None


def urn_type(urn: str) -> str:
    """A URN's own type: the last of its qualified type's chain (`Parent$Child`)."""
    return urn.split("::")[2].rsplit("$", 1)[-1]


def urn_name(urn: str) -> str:
    return urn.split("::", 3)[3]


def render_tree(stack_urn: str, resources: Iterable[Registered], rank: Mapping[str, int] | None = None) -> str:
    rank = rank or {}
    nodes: dict[str, tuple[str, str]] = {}
    children: dict[str | None, list[str]] = {}
    for resource in resources:
        nodes[resource.urn] = (resource.type, resource.name)
        children.setdefault(resource.parent or stack_urn or None, []).append(resource.urn)
    roots = [parent for parent in children if parent is not None and parent not in nodes]
    roots += children.get(None, [])
    for urn in roots:
        nodes.setdefault(urn, (urn_type(urn), urn_name(urn)))
    last = max(rank.values(), default=0) + 1
    ranks: dict[str, int] = {}

    def first(urn: str) -> int:
        if urn not in ranks:
            # A component with nothing under it describes hardware (a GPU): shown before what acts on it.
            described = not children.get(urn) and not nodes[urn][0].startswith("pulumi-python:dynamic")
            default = -1 if described and urn not in roots else last
            ranks[urn] = min([rank.get(nodes[urn][1], default), *(first(child) for child in children.get(urn, []))])
        return ranks[urn]

    def ordered(urns: list[str]) -> list[str]:
        return sorted(urns, key=lambda urn: (first(urn), nodes[urn]))

    rows: list[tuple[str, str]] = []

    def walk(urn: str, prefix: str, lead: str) -> None:
        type_, name = nodes[urn]
        rows.append((lead + type_, name))
        kids = ordered(children.get(urn, []))
        for index, child in enumerate(kids):
            end = index == len(kids) - 1
            walk(child, prefix + ("   " if end else "│  "), prefix + ("└─ " if end else "├─ "))

    for root in ordered(roots):
        walk(root, "", "")
    width = max((len(left) for left, _ in rows), default=0) + 2
    return "".join(f"{left.ljust(width)}{name}\n" for left, name in rows)
