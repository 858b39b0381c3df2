"""LxcGpuPassthrough's decisions, over the facts its ensure gathers on the Proxmox host.

The ensure (templates/lxc_gpu_passthrough/devices-ensure.sh.j2) prints what it read and pipes it into this file, run
on the host verbatim under `python3 -I` (standard library only, Python 3.9 on), and performs the actions it reads
back. Facts, one record a line, a value running to the end of its line; the container's config is Proxmox's own
JSON, framed by its length:

    config LENGTH, then LENGTH bytes and a newline
                                      GET /nodes/{node}/lxc/{vmid}/config (`pvesh get … --output-format json`): the
                                      config as the next start will have it (pending values in, pending deletions out)
    current-config LENGTH, then …     the same with current=1: what is in effect now
    config-error TEXT                 why pvesh could not read it
    container running|stopped
    owned KEY PATH                    a devN gpuhosts gave (its record on the host)
    gpu ADDRESS DRIVER MINOR          each declared GPU ("-": none)
    guests ADDRESS TEXT               the other guests holding it: "none", "unknown: why", or who
    guest-fix ADDRESS TEXT            how those guests let go of it
    node PATH present|absent          a host device node

Actions, one a line, tab-separated:

    refuse MESSAGE        stop before anything changed
    warn MESSAGE
    say MESSAGE
    drop KEY PATH HOW     take back an entry of ours: HOW `delete` (in effect now; it goes at the next start) or
                          `revert` (only pending so far: `--delete` would leave it pending)
    take-back KEY PATH    a removal by hand that waits for the next start, reverted: the entry stays as it was
    add KEY PATH          a new devN
    want PATH             a node the container must have once the actions ran
    path PATH             (`paths`) a node a devN names, in either view, whose presence the ensure then gathers
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

NONE = "-"
VERBS = ("refuse", "warn", "say", "drop", "take-back", "add", "want", "path")


class FactsError(ValueError):
    pass


@dataclass
class Facts:
    config_error: Optional[str] = None
    running: bool = False
    hostname: str = ""
    unprivileged: str = ""
    entries: List[Tuple[str, str]] = field(default_factory=list)
    current: List[Tuple[str, str]] = field(default_factory=list)
    owned: List[Tuple[str, str]] = field(default_factory=list)
    gpus: Dict[str, Tuple[str, str]] = field(default_factory=dict)  # address → (driver, minor), "" for none
    guests: Dict[str, str] = field(default_factory=dict)
    guest_fixes: Dict[str, str] = field(default_factory=dict)
    nodes: Dict[str, bool] = field(default_factory=dict)


def _dash(value: str) -> str:
    return "" if value == NONE else value


def _pair(rest: str) -> Tuple[str, str]:
    key, _, value = rest.partition(" ")
    return key, value


def _container(facts: Facts, rest: str) -> None:
    if rest not in ("running", "stopped"):
        raise FactsError(f"container {rest!r} is neither running nor stopped")
    facts.running = rest == "running"


def dev_entries(config: dict) -> List[Tuple[str, str]]:
    """Each devN of an API config with its path, by key number. The value is a property string: parts split at
    ',', the path either `path=…` or the part without '=' (pve-container src/PVE/LXC/Config.pm $dev_desc, path its
    default key), so `path=/dev/nvidia0` and `mode=0666,/dev/nvidia0` name the same node as `/dev/nvidia0`."""
    entries = []
    for key in sorted((k for k in config if re.fullmatch(r"dev[0-9]+", k)), key=lambda k: int(k[3:])):
        path = ""
        for part in str(config[key]).split(","):
            if part.startswith("path="):
                path = part[len("path="):]
            elif "=" not in part:
                path = part
        entries.append((key, path))
    return entries


def _config(facts: Facts, config: dict, current: bool) -> None:
    if not isinstance(config, dict):
        raise FactsError("the container's config is not a JSON object")
    if current:
        facts.current = dev_entries(config)
        return
    facts.hostname = str(config.get("hostname", ""))
    # a boolean of the schema: 0 or 1, and absent is 0 (privileged)
    facts.unprivileged = "1" if str(config.get("unprivileged", 0)).lower() in ("1", "true") else "0"
    facts.entries = dev_entries(config)


def _gpu(facts: Facts, rest: str) -> None:
    words = rest.split(" ")
    if len(words) != 3:
        raise FactsError(f"gpu needs an address, a driver and a minor: {rest!r}")
    address, driver, minor = words
    facts.gpus[address] = (_dash(driver), _dash(minor))


def _node(facts: Facts, rest: str) -> None:
    path, _, state = rest.rpartition(" ")
    if state not in ("present", "absent") or not path:
        raise FactsError(f"node needs a path and present or absent: {rest!r}")
    facts.nodes[path] = state == "present"


_RECORDS = {
    "container": _container,
    "config-error": lambda facts, rest: setattr(facts, "config_error", rest),
    "owned": lambda facts, rest: facts.owned.append(_pair(rest)),
    "gpu": _gpu,
    "guests": lambda facts, rest: facts.guests.__setitem__(*_pair(rest)),
    "guest-fix": lambda facts, rest: facts.guest_fixes.__setitem__(*_pair(rest)),
    "node": _node,
}


def read_facts(data: bytes) -> Facts:
    """The gathered facts; FactsError names the first record that is not one."""
    facts = Facts()
    at = 0
    while at < len(data):
        end = data.find(b"\n", at)
        if end < 0:
            raise FactsError(f"the last record has no newline: {data[at:at + 80]!r}")
        line = data[at:end].decode("utf-8", "replace")
        at = end + 1
        verb, _, rest = line.partition(" ")
        if verb in ("config", "current-config"):
            if not rest.isdigit():
                raise FactsError(f"{verb} needs its length: {line!r}")
            body = data[at:at + int(rest)]
            if len(body) != int(rest) or data[at + int(rest):at + int(rest) + 1] != b"\n":
                raise FactsError(f"{verb}: {rest} bytes and a newline were promised, {len(body)} came")
            at += int(rest) + 1
            try:
                config = json.loads(body)
            except ValueError as error:
                raise FactsError(f"{verb} is not JSON: {error}") from None
            _config(facts, config, verb == "current-config")
        elif verb in _RECORDS:
            _RECORDS[verb](facts, rest)
        elif verb:
            raise FactsError(f"unknown record {verb!r}")
    return facts


@dataclass(frozen=True)
class Plan:
    vmid: int
    hostname: str
    privileged: bool
    gpus: Tuple[str, ...]
    nodes: Tuple[str, ...]
    unwanted: Tuple[str, ...]

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        data = json.loads(text)
        return cls(int(data["vmid"]), data["hostname"], bool(data["privileged"]), tuple(data["gpus"]),
                   tuple(data["nodes"]), tuple(data["unwanted"]))


def node_fix(path: str) -> str:
    """How a missing host node comes back: the NVIDIA driver's own nodes from nvidia-modprobe (-c=N makes
    /dev/nvidiaN, minor 255 nvidiactl, -u -c=0 nvidia-uvm and -uvm-tools), as gpuhosts' boot unit makes them; for
    any other node, only whoever configured it knows."""
    if path in ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"):
        return "nvidia-modprobe -u -c=0 makes it"
    if path == "/dev/nvidiactl":
        return "nvidia-modprobe -c=255 makes it"
    if re.match(r"^/dev/nvidia[0-9]", path):
        return f"nvidia-modprobe -c={path[len('/dev/nvidia'):]} makes it"
    return "its driver makes it"


Action = Tuple[str, ...]


def _refusals(plan: Plan, facts: Facts) -> Tuple[List[Action], List[str]]:
    """The checks before anything changes, and the nodes the container must have."""
    vmid = plan.vmid
    if facts.config_error is not None:
        if "does not exist" in facts.config_error:
            return [("refuse", f"container {vmid} does not exist on this host (pct list); fix "
                               "gpuhosts:containers")], []
        return [("refuse", f"cannot read container {vmid}'s config: {facts.config_error}")], []
    actions: List[Action] = []
    if facts.hostname != plan.hostname:
        actions.append(("warn", f"warning: container {vmid} is named '{facts.hostname}', the stack says "
                                f"{plan.hostname}"))
    # A privileged container's root is the host's: GPUs go to one only where the stack says it knows.
    if facts.unprivileged != "1" and not plan.privileged:
        return actions + [("refuse", f"container {vmid} is privileged (unprivileged: 0): its root is the host's root, "
                                     "and what runs in it could take the host; make it unprivileged, or declare it "
                                     "with privileged: true in gpuhosts:containers")], []
    # Before the driver's check: a VM that holds the GPU has it on vfio-pci, and the guest is what to name.
    for address in plan.gpus:
        guests = facts.guests.get(address, "unknown: not read")
        if guests.startswith("unknown:"):
            return actions + [("refuse", f"cannot tell which other guests hold GPU {address}: "
                                         f"{guests[len('unknown: '):]}")], []
        if guests != "none":
            return actions + [("refuse", f"GPU {address} is held by {guests} besides container {vmid}: two guests "
                                         "on one GPU, and gpuhosts does not take it from the other. Let the other "
                                         f"guest go ({facts.guest_fixes.get(address, '')}), or give container {vmid} "
                                         "another GPU in gpuhosts:gpus, and run again")], []
    wanted = []
    for address in plan.gpus:
        driver, minor = facts.gpus.get(address, ("", ""))
        if driver != "nvidia":
            return actions + [("refuse", f"GPU {address} is on '{driver or 'no driver'}', not nvidia: the vfio "
                                         "binding or a reboot must release it first")], []
        if not minor:
            return actions + [("refuse", f"the nvidia driver reports no minor for {address} "
                                         f"(/proc/driver/nvidia/gpus/{address}/information)")], []
        wanted.append(f"/dev/nvidia{minor}")
        actions.append(("say", f"GPU {address} is /dev/nvidia{minor}"))
    wanted += plan.nodes
    for node in wanted:
        if not facts.nodes.get(node):
            return actions + [("refuse", f"host device {node} is missing ({node_fix(node)}; the nvidia-uvm-at-boot "
                                         "unit does at every boot); pct would refuse it and the container would not "
                                         "start")], []
    return actions, wanted


def decide_ensure(plan: Plan, facts: Facts) -> List[Action]:
    actions, wanted = _refusals(plan, facts)
    if any(action[0] == "refuse" for action in actions):
        return actions
    vmid = plan.vmid
    owned = set(facts.owned)
    current_keys = {key for key, _ in facts.current}
    # Entries of ours that are no longer wanted go; their nodes may be gone already (a GPU moved to vfio-pci).
    dropped = [(key, path) for key, path in facts.entries if path not in wanted and (key, path) in owned]
    # A node the stack does not give that someone passed by hand: gpuhosts takes back only its own entries.
    for node in plan.unwanted:
        for key, path in facts.entries:
            if path == node and (key, path) not in owned:
                return actions + [("refuse", f"container {vmid} has {path} as {key}, which gpuhosts did not give: "
                                             f"remove it (pct set {vmid} --delete {key}), or set profilingDevice: true "
                                             "for this container")]
    entry_paths = {path for _, path in facts.entries}
    to_add = [node for node in wanted if node not in entry_paths]
    if dropped or to_add:
        # Every `pct set` re-reads the host node of each devN in effect and fails while one is missing
        # (pve-container API2/LXC/Config.pm update_vm); entries going, or whose removal waits, do not count.
        going = {key for key, _ in dropped}
        next_keys = {key for key, _ in facts.entries}
        for key, path in facts.current:
            if path and not facts.nodes.get(path, True) and key in next_keys and key not in going:
                return actions + [("refuse", f"container {vmid} has {key}: {path}, but the host has no {path}, and "
                                             "pct refuses every change to the container until it exists "
                                             f"({node_fix(path)}) or the entry goes (pct set {vmid} --delete {key})")]
    taken = {key for key, _ in facts.entries} | current_keys
    for key, path in dropped:
        if key in current_keys:
            # on a running container the removal waits for its next start (pve-container does not hot-unplug)
            actions.append(("drop", key, path, "delete"))
            if not facts.running:
                taken.discard(key)
        else:
            actions.append(("drop", key, path, "revert"))
            taken.discard(key)
    for node in to_add:
        # Removed by hand from the running container, the entry is only pending removal: taking the removal back
        # restores it as it was. A new devN for the same node would wait for a restart before pve-container 6.0.4,
        # and from 6.0.4 on fails to plug in: the node is still there (mknod: File exists).
        pending = next((key for key, path in facts.current if path == node), None)
        if pending is not None:
            actions.append(("take-back", pending, node))
            continue
        index = 0
        while f"dev{index}" in taken:
            index += 1
        taken.add(f"dev{index}")
        actions.append(("add", f"dev{index}", node))
    return actions + [("want", node) for node in wanted]


def device_paths(plan: Plan, facts: Facts) -> List[Action]:
    return [("path", path) for path in dict.fromkeys(p for _, p in facts.entries + facts.current if p)]


DECISIONS = {"ensure": decide_ensure, "paths": device_paths}


def one_line(value: str) -> str:
    return " ".join(str(value).split("\t")).replace("\n", " ")


def format_actions(actions: List[Action]) -> str:
    return "".join("\t".join(one_line(part) for part in action) + "\n" for action in actions)


def main(argv: List[str], stdin=None) -> int:
    if len(argv) != 2 or argv[0] not in DECISIONS:
        sys.stderr.write(f"usage: lxc-gpu-passthrough {'|'.join(DECISIONS)} PLAN_JSON < FACTS\n")
        return 2
    try:
        facts = read_facts((stdin or sys.stdin.buffer).read())
    except FactsError as error:
        sys.stderr.write(f"the gathered facts are malformed: {error}\n")
        return 1
    actions = DECISIONS[argv[0]](Plan.from_json(argv[1]), facts)
    unknown = sorted({action[0] for action in actions} - set(VERBS))
    if unknown:
        sys.stderr.write(f"a decision took an action the script does not know: {', '.join(unknown)}\n")
        return 1
    sys.stdout.write(format_actions(actions))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
