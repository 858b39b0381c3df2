"""A stack of several Proxmox hosts (`gpuhosts:hosts`): each entry validated as a one-host stack and named by its
entry, the rules across hosts, and the program's resources — every name prefixed with its host's, and the host a
one-host stack held carrying aliases to exactly its one-host URNs."""

from __future__ import annotations


import pytest

from conftest import KPRO5_SECRETS, PROJECT, kpro5_values
from fleet_data import fleet_values
from gpuhosts.config import ConfigError
from gpuhosts.fleet import validate_fleet
from gpuhosts.plan import is_host_unit, run_program


def two_hosts() -> dict:
    return fleet_values(kpro5_values(), 2)


def problems_of(values: dict) -> list[str]:
    with pytest.raises(ConfigError) as error:
        validate_fleet(values, KPRO5_SECRETS)
    return [str(problem) for problem in error.value.problems]


def _set(path: list, value):
    def change(values: dict) -> None:
        target = values
        for step in path[:-1]:
            target = target[step]
        if value is _DELETE:
            del target[path[-1]]
        else:
            target[path[-1]] = value
    return change


_DELETE = object()


def _also(key: str, value):
    def change(values: dict) -> None:
        values[key] = value
    return change


def _same_target(values: dict) -> None:
    values["hosts"][1]["ssh"]["host"] = values["hosts"][0]["ssh"]["host"]


def _both_migrated(values: dict) -> None:
    for entry in values["hosts"]:
        entry["migratedFromHost"] = True


def _one_cluster(values: dict) -> None:
    for entry in values["hosts"]:
        entry["cluster"] = "pve-lab"


# (case, change to a valid stack of two kpro5-like hosts, the problem's path, words it must hold)
CASES = [
    ("an entry's field, named by its entry", _set(["hosts", 1, "ssh", "port"], 0),
     "gpuhosts:hosts[1].ssh.port", "must be at least 1, not 0"),
    ("a GPU's container, named by its entry", _set(["hosts", 1, "gpus", 2, "container"], 555),
     "gpuhosts:hosts[1].gpus[2].container", "add {vmid: 555, hostname: …} to gpuhosts:hosts[1].containers"),
    ("a service's rule, named by its entry", _set(["hosts", 1, "services", 0, "container"], 130),
     "gpuhosts:hosts[1].services[0].container", "not declared in gpuhosts:hosts[1].containers"),
    ("an unknown field of an entry", _set(["hosts", 0, "gpu"], []), "gpuhosts:hosts[0].gpu", "did you mean"),
    ("an entry without its host fields", _set(["hosts", 1, "bootloader"], _DELETE),
     "gpuhosts:hosts[1].bootloader", "is required"),
    ("two entries of one name", _set(["hosts", 1, "name"], "kpro5"), "gpuhosts:hosts[1].name", "already hosts[0]"),
    ("two entries of one machine", _same_target, "gpuhosts:hosts[1].ssh.host", "one machine is one host"),
    ("two hosts taking over one stack's resources", _both_migrated, "gpuhosts:hosts[1].migratedFromHost",
     "set it on that host alone"),
    ("one vmid on two nodes of a cluster", _one_cluster, "gpuhosts:hosts[1].containers[0].vmid",
     "unique across its nodes"),
    ("a cluster name that is not one", _set(["hosts", 0, "cluster"], "PVE Lab"), "gpuhosts:hosts[0].cluster",
     "not a cluster name"),
    ("a one-host section beside the list", _also("gpus", [{"address": "0000:01:00.0", "model": "x", "use": "vfio"}]),
     "gpuhosts:gpus", "move it into gpuhosts:hosts[N].gpus"),
    ("the one host beside the list", _also("host", {"name": "kpro5"}), "gpuhosts:host",
     "move it into gpuhosts:hosts[N]"),
    ("an empty list", _set(["hosts"], []), "gpuhosts:hosts", "must be a list of hosts"),
    ("a host's own driver version, named by its entry", _set(["hosts", 1, "nvidia"], {"version": "580.1",
                                                                                        "sha256": "0" * 64}),
     "gpuhosts:hosts[1].nvidia.version", "not an exact driver version"),
]


@pytest.mark.parametrize("case, change, path, words", CASES, ids=[case[0] for case in CASES])
def test_a_bad_stack_of_hosts_is_refused_naming_the_entry_and_the_fix(case, change, path, words):
    values = two_hosts()
    change(values)
    found = problems_of(values)
    assert any(problem.startswith(f"{path}:") and words in problem for problem in found), found


def test_each_host_is_checked_whole_and_every_problem_is_named_at_once():
    values = two_hosts()
    values["hosts"][0]["ssh"]["port"] = 0
    values["hosts"][1]["gpus"][2]["container"] = 555
    found = problems_of(values)
    assert [p.split(":", 2)[1] for p in found] == ["hosts[0].ssh.port", "hosts[1].gpus[2].container"], found


def test_two_clusters_may_each_use_a_vmid_and_hosts_of_no_cluster_too():
    values = fleet_values(kpro5_values(), 3)
    values["hosts"][0]["cluster"] = "pve-a"
    values["hosts"][1]["cluster"] = "pve-b"
    fleet = validate_fleet(values, KPRO5_SECRETS)
    assert [(h.name, h.cluster) for h in fleet.hosts] == [("kpro5", "pve-a"), ("kpro5-1", "pve-b"), ("kpro5-2", None)]


def test_warnings_name_the_entry_they_concern():
    fleet = validate_fleet(two_hosts(), KPRO5_SECRETS)
    placeholders = [w for w in fleet.warnings() if "is a placeholder (a documentation address" in w]
    assert [w.split(" ", 1)[0] for w in placeholders] == ["gpuhosts:hosts[0].ssh.host", "gpuhosts:hosts[1].ssh.host"]


@pytest.fixture(scope="module")
def programs():
    one = run_program(PROJECT, "kpro5", kpro5_values(), KPRO5_SECRETS)
    fleet = run_program(PROJECT, "kpro5", two_hosts(), KPRO5_SECRETS)
    fresh = run_program(PROJECT, "kpro5", fleet_values(kpro5_values(), 2, migrated=False), KPRO5_SECRETS)
    return one, fleet, fresh


def test_every_resource_of_a_host_is_named_after_its_host_and_every_urn_is_its_own(programs):
    _one, fleet, _fresh = programs
    hosts = [r for r in fleet.resources if r.type == "gpuhosts:host:ProxmoxHost"]
    assert sorted(r.name for r in hosts) == ["kpro5", "kpro5-1"]
    below = [r for r in fleet.resources if r not in hosts]
    assert all(r.name.split("/")[0] in ("kpro5", "kpro5-1") and r.name.count("/") == 1 for r in below), \
        [r.name for r in below]
    assert len({r.urn for r in fleet.resources}) == len(fleet.resources)
    # Each host's units under its own host's component, waiting only for units of their own host.
    by_urn = {r.urn: r for r in fleet.resources}
    for unit in filter(lambda r: is_host_unit(r.type), below):
        root = unit
        while by_urn.get(root.parent) is not None:
            root = by_urn[root.parent]
        assert root.name == unit.name.split("/")[0], unit.name
        assert all(by_urn[d].name.split("/")[0] == root.name for d in unit.dependencies), unit.name


def test_the_host_a_one_host_stack_held_aliases_exactly_its_one_host_urns(programs):
    one, fleet, fresh = programs
    claimed: dict[str, list[str]] = {}
    for resource in fleet.resources:
        for alias in resource.aliases:
            claimed.setdefault(alias, []).append(resource.name)
    for resource in one.resources:
        if resource.type == "gpuhosts:host:ProxmoxHost":
            assert resource.urn in {r.urn for r in fleet.resources}
            continue
        assert claimed.get(resource.urn) == [f"kpro5/{resource.name}"], resource.urn
    # A stack that was never one host's claims none of them.
    fresh_aliases = {alias for r in fresh.resources for alias in r.aliases}
    assert not fresh_aliases & {r.urn for r in one.resources}


def test_outputs_are_per_host(programs):
    _one, fleet, _fresh = programs
    assert sorted(fleet.outputs["desired"]) == ["kpro5", "kpro5-1"]
    assert sorted(fleet.outputs["services"]["kpro5-1"]) == ["qwen-sglang", "qwen-vllm-dflash"]
