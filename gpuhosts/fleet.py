"""Several Proxmox VE hosts in one stack (`gpuhosts:hosts`): a list of hosts, or a Proxmox VE cluster's nodes.

Each entry is what a one-host stack holds, in one mapping: the host's own fields (`name`, `ssh`, `bootloader`,
`kernelArgs`, `allowReboot`) beside its sections (`gpus`, `containers`, `services`, `benchmarks`, and `nvidia`
when it differs from the stack's `gpuhosts:nvidia`). An entry is validated exactly as a one-host stack is
(gpuhosts.stacks.validate_stack), so every rule of one host holds on each, and a problem names the entry's field
(`gpuhosts:hosts[1].gpus[0].container`). What spans hosts is checked here: names and SSH targets are unique, at
most one host takes over a one-host stack's resources, and the nodes of one cluster share its vmids (a Proxmox VE
cluster keeps one guest list for all its nodes: pve-cluster's pmxcfs `/etc/pve/.vmlist`, and `pct create`
refuses a vmid any node holds: pve-container src/PVE/API2/LXC.pm `PVE::Cluster::check_vmid_unused`).

A one-host stack (`gpuhosts:host`) stays as it is; the program names a fleet's resources `<host>/<unit>`, and
the host marked `migratedFromHost` carries aliases to its one-host names (docs/operations.md, "Many hosts in one
stack").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpuhosts.benchmarks import referenced_benchmark_secrets
from gpuhosts.config import (
    HOSTNAME,
    NAMESPACE,
    SECRET_KEYS,
    ConfigError,
    HostConfig,
    Problem,
    StackConfig,
    StackKind,
    _suggest,
    kind_problems,
    namespace_problems,
    stray_key_problems,
)
from gpuhosts.services import referenced_secrets
from gpuhosts.stacks import require_locks, validate_stack

FLEET_SECTIONS = ("kind", "nvidia", "monitoring", "hosts")
# A one-host stack's sections that a fleet keeps per host.
HOST_SECTIONS = ("nvidia", "gpus", "containers", "services", "benchmarks")
HOST_FIELDS = tuple(field.alias or name for name, field in HostConfig.model_fields.items())
FLEET_FIELDS = ("cluster", "migratedFromHost")
ENTRY_KEYS = HOST_FIELDS + FLEET_FIELDS + HOST_SECTIONS
# The separator of a fleet's resource names: neither a host's name nor a unit's key can hold it.
NAME_SEPARATOR = "/"
ENTRY_FIELD_HELP = {
    "cluster": "Name of the Proxmox VE cluster the host is a node of; the nodes of one cluster share its vmids. "
               "Default none (a host of its own).",
    "migratedFromHost": "This host was the stack's `gpuhosts:host` before the stack listed hosts: its resources "
                        "carry aliases to their one-host names, so the move creates and deletes nothing. At most one "
                        "host. Default false.",
}


@dataclass(frozen=True)
class FleetHost:
    """One host of a fleet: its validated one-host stack, and where it stands among the others."""

    index: int
    config: StackConfig
    cluster: str | None = None
    migrated_from_host: bool = False

    @property
    def name(self) -> str:
        return self.config.host.name

    @property
    def prefix(self) -> str:
        """What the host's resource names begin with: its units are `<host>/<unit>`, its groups `<host>/<group>`."""
        return f"{self.name}{NAME_SEPARATOR}"


@dataclass(frozen=True)
class FleetConfig:
    hosts: tuple[FleetHost, ...]

    def warnings(self) -> list[str]:
        return [entry_text(text, host.index) for host in self.hosts for text in host.config.warnings()]


def is_fleet(raw: dict[str, Any]) -> bool:
    """A stack that lists its hosts (`gpuhosts:hosts`) rather than naming one (`gpuhosts:host`)."""
    return raw.get("hosts") is not None


def referenced_fleet_secrets(raw_hosts: Any) -> set[str]:
    """The secret keys the hosts' services and benchmarks name (raw, unvalidated), as a one-host stack's do."""
    names: set[str] = set()
    for entry in raw_hosts if isinstance(raw_hosts, list) else []:
        if isinstance(entry, dict):
            names |= referenced_secrets(entry.get("services")) | referenced_benchmark_secrets(entry.get("benchmarks"))
    return names


# `gpuhosts:host…` and a host section, as a one-host stack's problems and warnings name them.
_ONE_HOST_FIELD = re.compile(rf"{NAMESPACE}:host(?![\w-])(\.)?")
_ONE_HOST_SECTION = re.compile(rf"{NAMESPACE}:(gpus|containers|services|benchmarks)\b")


def entry_text(text: str, index: int, own_nvidia: bool = True) -> str:
    """A one-host stack's words about one of its fields, said of the fleet's entry `index`."""
    at = f"{NAMESPACE}:hosts[{index}]"
    text = _ONE_HOST_FIELD.sub(lambda m: at + (m.group(1) or ""), text)
    text = _ONE_HOST_SECTION.sub(lambda m: f"{at}.{m.group(1)}", text)
    if own_nvidia:
        text = re.sub(rf"{NAMESPACE}:nvidia\b", f"{at}.nvidia", text)
    return text


def _entry_path(path: str, index: int, own_nvidia: bool) -> str:
    return entry_text(path, index, own_nvidia)


def validate_fleet(raw: dict[str, Any], secret_keys: set[str] | frozenset[str] = frozenset(),
                   other_keys=()) -> FleetConfig:
    """The stack's hosts, each validated as a one-host stack, and the rules across them; ConfigError naming every
    problem of every host at once."""
    problems = namespace_problems(other_keys) + kind_problems(raw, StackKind.PROXMOX)
    for key in ("host", "gpus", "containers", "services", "benchmarks"):
        if raw.get(key) is not None:
            where = "" if key == "host" else f".{key}"
            problems.append(Problem(path=f"{NAMESPACE}:{key}", message=(
                f"is given beside {NAMESPACE}:hosts; a stack that lists its hosts keeps each host's "
                f"{'fields' if key == 'host' else key} in its entry: move it into {NAMESPACE}:hosts[N]{where}")))
    rest = {k: v for k, v in raw.items() if k not in ("host", "gpus", "containers", "services", "benchmarks")}
    problems += stray_key_problems(rest, FLEET_SECTIONS, SECRET_KEYS, referenced_fleet_secrets(raw.get("hosts")),
                                   secret_keys, "is not a gpuhosts setting")
    entries = raw.get("hosts")
    if not isinstance(entries, list) or not entries:
        problems.append(Problem(path=f"{NAMESPACE}:hosts", message="must be a list of hosts, each a mapping with "
                                                                 "name, ssh, bootloader and the host's gpus"))
        raise ConfigError(problems)
    hosts: list[FleetHost] = []
    for index, entry in enumerate(entries):
        host = _validate_entry(index, entry, raw.get("nvidia"), raw.get("monitoring"), secret_keys, problems)
        if host is not None:
            hosts.append(host)
    problems += _across_hosts(entries, hosts)
    if problems:
        raise ConfigError(problems)
    return FleetConfig(tuple(hosts))


def _validate_entry(index: int, entry: Any, nvidia: Any, monitoring: Any, secret_keys,
                    problems: list[Problem]) -> FleetHost | None:
    at = f"{NAMESPACE}:hosts[{index}]"
    if not isinstance(entry, dict):
        problems.append(Problem(path=at, message="must be a mapping: name, ssh, bootloader, gpus, …"))
        return None
    found = []
    for key in entry:
        if key not in ENTRY_KEYS:
            found.append(Problem(path=f"{at}.{key}", message=f"unknown field {key!r}" + _suggest(key, ENTRY_KEYS)
                                 .replace(f"{NAMESPACE}:", f"{at}.")))
    cluster, migrated = entry.get("cluster"), entry.get("migratedFromHost", False)
    if cluster is not None and not (isinstance(cluster, str) and HOSTNAME.match(cluster)):
        found.append(Problem(path=f"{at}.cluster", message=f"{cluster!r} is not a cluster name (lower-case letters, "
                                                           "digits, '-'), as `pvecm status` shows it"))
    if not isinstance(migrated, bool):
        found.append(Problem(path=f"{at}.migratedFromHost", message=f"{migrated!r} is not true or false"))
    own_nvidia = entry.get("nvidia") is not None
    one_host = {"kind": StackKind.PROXMOX.value,
                "host": {k: v for k, v in entry.items() if k in HOST_FIELDS},
                "nvidia": entry["nvidia"] if own_nvidia else nvidia,
                # One monitoring section for every host: each host's exporters and files, labelled by its name.
                **({"monitoring": monitoring} if monitoring is not None else {}),
                **{k: entry.get(k) for k in HOST_SECTIONS if k != "nvidia"}}
    try:
        config = require_locks(validate_stack(one_host, secret_keys))
    except ConfigError as error:
        found += [Problem(path=_entry_path(p.path, index, own_nvidia), message=entry_text(p.message, index, own_nvidia))
                  for p in error.problems]
        config = None
    problems += found
    if found or config is None:
        return None
    return FleetHost(index, config, cluster, migrated)


def _across_hosts(entries: list[Any], hosts: list[FleetHost]) -> list[Problem]:
    problems: list[Problem] = []
    names: dict[str, int] = {}
    targets: dict[tuple[str, int], int] = {}
    for host in hosts:
        at = f"{NAMESPACE}:hosts[{host.index}]"
        if host.name in names:
            problems.append(Problem(path=f"{at}.name", message=f"{host.name} is already hosts[{names[host.name]}]; "
                                                               "each host is named once"))
        names.setdefault(host.name, host.index)
        ssh = host.config.host.ssh
        target = (ssh.host.lower(), ssh.port)
        if target in targets:
            problems.append(Problem(path=f"{at}.ssh.host", message=(
                f"{ssh.host}:{ssh.port} is already hosts[{targets[target]}]'s SSH server; one machine is one host "
                "(two entries would converge it twice, each as if the other's units were drift)")))
        targets.setdefault(target, host.index)
    migrated = [host.index for host in hosts if host.migrated_from_host]
    for index in migrated[1:]:
        problems.append(Problem(path=f"{NAMESPACE}:hosts[{index}].migratedFromHost", message=(
            f"is true for hosts[{migrated[0]}] too; only the host the one-host stack declared takes over its "
            "resources (their one-host names can belong to one resource each): set it on that host alone")))
    clusters: dict[str, dict[int, tuple[int, str]]] = {}
    for host in hosts:
        if host.cluster is None:
            continue
        vmids = clusters.setdefault(host.cluster, {})
        for position, container in enumerate(host.config.containers):
            earlier = vmids.get(container.vmid)
            if earlier is not None:
                problems.append(Problem(path=f"{NAMESPACE}:hosts[{host.index}].containers[{position}].vmid", message=(
                    f"{container.vmid} is already container {container.vmid} of {earlier[1]} (hosts[{earlier[0]}]) "
                    f"in cluster {host.cluster}; a Proxmox VE cluster's vmids are unique across its nodes: give "
                    "this container its own vmid")))
            else:
                vmids[container.vmid] = (host.index, host.name)
    return problems
