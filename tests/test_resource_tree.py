"""The resource tree as `pulumi preview` shows it (gpuhosts/resource_tree.py): types and names under their parents,
siblings in the plan's order, the stack shown from its URN."""

from __future__ import annotations

from dataclasses import dataclass

from gpuhosts.resource_tree import render_tree, urn_name, urn_type

STACK = "urn:pulumi:kpro5::gpuhosts::pulumi:pulumi:Stack::gpuhosts-kpro5"
HOST = "urn:pulumi:kpro5::gpuhosts::gpuhosts:host:ProxmoxHost::kpro5"
CT = "urn:pulumi:kpro5::gpuhosts::gpuhosts:host:ProxmoxHost$gpuhosts:host:LxcContainer::ct129"


@dataclass
class R:
    urn: str
    type: str
    name: str
    parent: str | None


def unit(parent: str, kind: str, name: str) -> R:
    type_ = f"pulumi-python:dynamic/gpuhosts:{kind}"
    return R(f"{parent.rsplit('::', 1)[0]}${type_}::{name}", type_, name, parent)


def test_a_urn_names_its_own_type_and_name():
    assert urn_type(CT) == "gpuhosts:host:LxcContainer" and urn_name(CT) == "ct129"
    assert urn_type(STACK) == "pulumi:pulumi:Stack" and urn_name(STACK) == "gpuhosts-kpro5"


def test_children_under_their_parents_in_the_plans_order_a_component_where_its_first_unit_is():
    resources = [
        R(CT, "gpuhosts:host:LxcContainer", "ct129", HOST),
        unit(CT, "ContainerUserspace", "ct129-nvidia-userspace"),
        unit(HOST, "NvidiaDriver", "nvidia-driver"),
        unit(CT, "LxcGpuPassthrough", "ct129-gpu-devices"),
        R(HOST, "gpuhosts:host:ProxmoxHost", "kpro5", STACK),
        unit(HOST, "VfioBinding", "vfio-binding"),
    ]
    rank = {"vfio-binding": 0, "nvidia-driver": 1, "ct129-gpu-devices": 2, "ct129-nvidia-userspace": 3}
    assert render_tree(STACK, resources, rank) == (
        "pulumi:pulumi:Stack                                         gpuhosts-kpro5\n"
        "└─ gpuhosts:host:ProxmoxHost                                kpro5\n"
        "   ├─ pulumi-python:dynamic/gpuhosts:VfioBinding            vfio-binding\n"
        "   ├─ pulumi-python:dynamic/gpuhosts:NvidiaDriver           nvidia-driver\n"
        "   └─ gpuhosts:host:LxcContainer                            ct129\n"
        "      ├─ pulumi-python:dynamic/gpuhosts:LxcGpuPassthrough   ct129-gpu-devices\n"
        "      └─ pulumi-python:dynamic/gpuhosts:ContainerUserspace  ct129-nvidia-userspace\n")


def test_a_component_before_a_later_sibling_draws_the_rail_for_its_children():
    resources = [R(HOST, "gpuhosts:host:ProxmoxHost", "kpro5", STACK), R(CT, "gpuhosts:host:LxcContainer", "ct129", HOST),
                 unit(CT, "LxcGpuPassthrough", "ct129-gpu-devices"), unit(HOST, "HostReboot", "reboot")]
    lines = render_tree(STACK, resources, {"ct129-gpu-devices": 0, "reboot": 1}).splitlines()
    assert [line.split()[0:2] for line in lines[2:]] == [["├─", "gpuhosts:host:LxcContainer"],
                                                          ["│", "└─"], ["└─", "pulumi-python:dynamic/gpuhosts:HostReboot"]]


def test_without_a_rank_siblings_come_by_type_and_name_and_every_resource_is_shown_once():
    resources = [R(HOST, "gpuhosts:host:ProxmoxHost", "kpro5", STACK), unit(HOST, "B", "b"), unit(HOST, "A", "z"),
                 unit(HOST, "A", "a")]
    lines = render_tree(STACK, resources).splitlines()
    assert [line.split()[-1] for line in lines] == ["gpuhosts-kpro5", "kpro5", "a", "z", "b"]
    assert render_tree(STACK, []) == ""
