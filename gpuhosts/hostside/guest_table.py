"""The guests that hold a GPU, read from Proxmox VE's API as JSON: the VMs with one row per PCI id their hostpciN
entries give this node, and the running containers with one row per devN entry in effect.

The scripts that need them (templates/common/vms.sh.j2, templates/lxc_gpu_passthrough/gpu-guests.sh.j2, and
templates/common/pve-api.sh.j2 for a container's own entries) read the API with `pvesh get … --output-format json`
and pipe the answers in; this file runs on the host verbatim under
`python3 -I` (standard library only, Python 3.9 and later) and prints the rows. Each API path, and what its answer
holds:

    qemu-list     GET /nodes/{node}/qemu --full 1       [{"vmid": 101, "status": "running", "qmpstatus": …}, …]
                  qemu-server src/PVE/API2/Qemu.pm `vmlist`; `full` asks QMP, so `qmpstatus` is what `qm status`
                  prints (paused, prelaunch, …), and `status` when QMP gave none (src/PVE/QemuServer.pm `vmstatus`)
    qemu-config   GET /nodes/{node}/qemu/{vmid}/config --current 1    {"hostpci0": "0000:01:00,pcie=1", …}
                  qemu-server src/PVE/API2/Qemu.pm `vm_config`; `current` is what a running VM has, not what is
                  pending
    pci-mapping   GET /cluster/mapping/pci              [{"id": "rtx3090", "map": ["node=kpro5,path=…", …]}, …]
                  pve-manager PVE/API2/Cluster/Mapping/PCI.pm `index`, each mapping as
                  pve-guest-common src/PVE/Mapping/PCI.pm stores it

    lxc-list      GET /nodes/{node}/lxc                 [{"vmid": 129, "status": "running", …}, …]
                  pve-container src/PVE/API2/LXC.pm `vmlist`, src/PVE/LXC.pm `vmstatus`
    lxc-config    GET /nodes/{node}/lxc/{vmid}/config --current 1     {"dev0": "/dev/nvidia0", …}
                  pve-container src/PVE/API2/LXC/Config.pm `vm_config`

Read at qemu-server e6352be67f70042a7433a3a3c712b36d02f9f7cb, pve-manager 14a22df35955d97dfc1af21e117dc894a29df0c9
and pve-container 94f558522ef61f9858c39c264d0ac4e697e49268.

Records on stdin, each answer framed by its length (it is JSON, but framing keeps one reader for every record):

    api NAME LENGTH, then LENGTH bytes and a newline
        NAME: qemu-list, pci-mapping, qemu-config VMID, lxc-list, lxc-config VMID

Commands:

    vmids              the VMs of qemu-list, one a line: the qemu-config records to gather next
    vm-rows NODE       "VMID STATUS ID" for every PCI id in a VM's current config, resolved through the cluster's
                       resource mappings for NODE
    ctids SELF         the running containers of lxc-list other than SELF: the lxc-config records to gather next
    ct-rows            "CT VMID KEY PATH" for every devN entry in effect in those containers
    ct-config WHAT     of the one lxc-config record: `dev` "devN<TAB>path" per devN entry, `mp` "mpN<TAB>source<TAB>
                       target" per mount point, `unprivileged` 1 or 0, `idmap` yes when it maps its own ids
                       (an lxc.idmap raw key)
"""

from __future__ import annotations

import json
import re
import sys
from typing import Dict, List, Tuple

_HOSTPCI = re.compile(r"hostpci\d+")


class FactsError(ValueError):
    pass


def read_answers(data: bytes) -> Dict[str, object]:
    """The API answers by record name; FactsError names the first record that is not one."""
    answers: Dict[str, object] = {}
    at = 0
    while at < len(data):
        end = data.find(b"\n", at)
        if end < 0:
            raise FactsError(f"the last record has no newline: {data[at:at + 80]!r}")
        line = data[at:end].decode("utf-8", "replace")
        at = end + 1
        verb, _, rest = line.partition(" ")
        if not verb:
            continue
        name, _, length = rest.rpartition(" ")
        if verb != "api" or not name or not length.isdigit():
            raise FactsError(f"not an api record with a name and a length: {line!r}")
        size = int(length)
        body = data[at:at + size]
        if len(body) != size or data[at + size:at + size + 1] != b"\n":
            raise FactsError(f"{name}: {size} bytes and a newline were promised, {len(body)} came")
        at += size + 1
        try:
            answers[name] = json.loads(body.decode("utf-8"))
        except ValueError as error:
            raise FactsError(f"{name} is not JSON: {error}") from None
    return answers


def normal_address(text: str) -> str:
    """A PCI id as the scripts compare them: lower case, a 4-digit domain (nvidia-smi writes 8, Proxmox none)."""
    address = text.strip().lower().replace(" ", "")
    if re.fullmatch(r"[0-9a-f]{8}:.*", address):
        return address[4:]
    if re.fullmatch(r"[0-9a-f]{2}:[0-9a-f]{2}(\.[0-7])?", address):
        return "0000:" + address
    return address


def property_string(text: str, default_key: str) -> List[Tuple[str, str]]:
    """A Proxmox property string's key=value parts, in order; a part without `=` belongs to the default key
    (pve-common src/PVE/JSONSchema.pm `parse_property_string`)."""
    parts = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        key, equals, value = part.partition("=")
        parts.append((key, value) if equals else (default_key, part))
    return parts


def mapped_paths(mappings: object, name: str, node: str) -> List[str]:
    """The PCI paths a cluster resource mapping gives this node. Each `map` entry names its node and its paths,
    several paths `;`-separated; its format has no default key, and Proxmox skips an entry it cannot parse
    (pve-guest-common src/PVE/Mapping/PCI.pm `$map_fmt`, `get_node_mapping` @
    11fa95682eed43e7aa89c0e70769fe6e177327eb)."""
    paths: List[str] = []
    for mapping in mappings if isinstance(mappings, list) else []:
        if not isinstance(mapping, dict) or mapping.get("id") != name:
            continue
        for entry in mapping.get("map") or []:
            parts = property_string(entry, "")
            keys = dict(parts)
            if "" not in keys and keys.get("node") == node:
                paths += [p for p in keys.get("path", "").split(";") if p]
    return paths


def hostpci_ids(config: Dict[str, object], mappings: object, node: str) -> List[str]:
    """The PCI ids every hostpciN entry of a VM's config names, mappings resolved: `host` is the default key, so
    `pcie=1,0000:01:00` names the host too, and several ids are `;`-separated (qemu-server
    src/PVE/QemuServer/PCI.pm `$hostpci_fmt`)."""
    ids: List[str] = []
    for key in sorted(config, key=lambda k: (len(k), k)):
        if not _HOSTPCI.fullmatch(key):
            continue
        for part_key, value in property_string(str(config[key]), "host"):
            if part_key == "host":
                ids += value.split(";")
            elif part_key == "mapping":
                ids += mapped_paths(mappings, value, node)
    return [normal_address(i) for i in ids if i.strip()]


def listed(answers: Dict[str, object], name: str) -> Dict[int, Dict[str, object]]:
    """The guests of a list answer by vmid."""
    guests = answers.get(name)
    if not isinstance(guests, list):
        raise FactsError(f"{name} is not the API's list of guests")
    found = {}
    for guest in guests:
        vmid = guest.get("vmid") if isinstance(guest, dict) else None
        if not isinstance(vmid, int) or isinstance(vmid, bool):
            raise FactsError(f"a guest of {name} has no numeric vmid: {guest!r}")
        found[vmid] = guest
    return dict(sorted(found.items()))


def vmids(answers: Dict[str, object]) -> List[int]:
    return list(listed(answers, "qemu-list"))


def ctids(answers: Dict[str, object], self_vmid: int) -> List[int]:
    return [vmid for vmid, ct in listed(answers, "lxc-list").items()
            if vmid != self_vmid and ct.get("status") == "running"]


def dev_entries(config: Dict[str, object]) -> List[Tuple[str, str]]:
    """Each devN of a container's config with its path, by key number: `path` is the default key of the property
    string (pve-container src/PVE/LXC/Config.pm $dev_desc), so `mode=0666,/dev/nvidia0` names /dev/nvidia0."""
    entries = []
    for key in sorted((k for k in config if re.fullmatch(r"dev[0-9]+", k)), key=lambda k: int(k[3:])):
        path = ""
        for part_key, value in property_string(str(config[key]), "path"):
            if part_key == "path":
                path = value
        entries.append((key, path))
    return entries


def mp_entries(config: Dict[str, object]) -> List[Tuple[str, str, str]]:
    """Each mpN of a container's config with its source and its path in the container: `volume` is the default
    key of the property string, `mp` the path (pve-container src/PVE/LXC/Config.pm $mp_desc)."""
    entries = []
    for key in sorted((k for k in config if re.fullmatch(r"mp[0-9]+", k)), key=lambda k: int(k[2:])):
        parts = dict(property_string(str(config[key]), "volume"))
        entries.append((key, parts.get("volume", ""), parts.get("mp", "")))
    return entries


def raw_keys(config: Dict[str, object]) -> List[str]:
    """The names of the raw lxc.* keys, which the API gives as [key, value] pairs under `lxc`."""
    raw = config.get("lxc") or []
    if not isinstance(raw, list) or not all(isinstance(pair, list) and len(pair) == 2 for pair in raw):
        raise FactsError(f"the raw lxc keys are not [key, value] pairs: {raw!r}")
    return [str(pair[0]) for pair in raw]


def own_config(answers: Dict[str, object]) -> Dict[str, object]:
    names = [n for n in answers if re.fullmatch(r"lxc-config \d+", n)]
    if len(names) != 1 or not isinstance(answers[names[0]], dict):
        raise FactsError(f"one container's config was expected, not {names or 'none'}")
    return answers[names[0]]


CT_CONFIG_FIELDS = ("dev", "mp", "unprivileged", "idmap")


def ct_config(answers: Dict[str, object], what: str) -> List[str]:
    config = own_config(answers)
    if what == "dev":
        return [f"{key}\t{path}" for key, path in dev_entries(config)]
    if what == "mp":
        return ["\t".join(entry) for entry in mp_entries(config)]
    if what == "unprivileged":
        # pve-container's schema types it as a boolean: the API gives 1 or 0, an older answer "1".
        return ["1" if str(config.get("unprivileged", 0)) == "1" else "0"]
    if what == "idmap":
        return ["yes" if "lxc.idmap" in raw_keys(config) else "no"]
    raise FactsError(f"ct-config reads {', '.join(CT_CONFIG_FIELDS)}, not {what!r}")


def ct_rows(answers: Dict[str, object]) -> List[Tuple[int, str, str]]:
    """(vmid, devN, path) for each devN in effect of each container whose config was read."""
    found = []
    for name in sorted((n for n in answers if re.fullmatch(r"lxc-config \d+", n)), key=lambda n: int(n.split()[1])):
        config = answers[name]
        if not isinstance(config, dict):
            raise FactsError(f"{name} is not a container's config")
        found += [(int(name.split()[1]), key, path) for key, path in dev_entries(config) if path]
    return found


def rows(answers: Dict[str, object], node: str) -> List[Tuple[int, str, str]]:
    """(vmid, status, PCI id) for every PCI id in a VM's current config; a VM listed without its config is an
    error, never "no PCI ids"."""
    mappings = answers.get("pci-mapping", [])
    statuses = {vmid: str(vm.get("qmpstatus") or vm.get("status") or "unknown")
                for vmid, vm in listed(answers, "qemu-list").items()}
    found = []
    for vmid in statuses:
        config = answers.get(f"qemu-config {vmid}")
        if not isinstance(config, dict):
            raise FactsError(f"VM {vmid} is listed but its config was not read")
        found += [(vmid, statuses[vmid], pci_id) for pci_id in dict.fromkeys(hostpci_ids(config, mappings, node))]
    return found


COMMANDS = {
    "vmids": (0, lambda answers: [str(v) for v in vmids(answers)]),
    "vm-rows": (1, lambda answers, node: [f"{vmid} {status} {pci_id}" for vmid, status, pci_id in rows(answers, node)]),
    "ctids": (1, lambda answers, self_vmid: [str(v) for v in ctids(answers, int(self_vmid))]),
    "ct-rows": (0, lambda answers: [f"CT {vmid} {key} {path}" for vmid, key, path in ct_rows(answers)]),
    "ct-config": (1, ct_config),
}


def main(argv: List[str], stdin=None) -> int:
    if not argv or argv[0] not in COMMANDS or len(argv) != 1 + COMMANDS[argv[0]][0] \
            or (argv[0] == "ctids" and not argv[1].isdigit()) \
            or (argv[0] == "ct-config" and argv[1] not in CT_CONFIG_FIELDS):
        sys.stderr.write("usage: guest-table vmids | vm-rows NODE | ctids SELF_VMID | ct-rows "
                         "| ct-config dev|mp|unprivileged|idmap < API ANSWERS\n")
        return 2
    try:
        answers = read_answers((stdin or sys.stdin.buffer).read())
        lines = COMMANDS[argv[0]][1](answers, *argv[1:])
    except FactsError as error:
        sys.stdout.write(f"the API's answers about the guests are malformed: {error}\n")
        return 1
    sys.stdout.write("".join(line + "\n" for line in lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
