"""LxcGpuPassthrough's decisions, over the facts its ensure gathers on the Proxmox host.

The ensure (templates/lxc_gpu_passthrough/devices-ensure.sh.j2) prints what it read and pipes it into this file, run
on the host verbatim under `python3 -I` (standard library only, Python 3.9 on), and performs the actions it reads
back. Facts, one record a line, a value running to the end of its line:

    container absent                  `pct config VMID` failed
    container running|stopped
    hostname NAME                     `pct config`'s hostname
    unprivileged 0|1|-                `pct config`'s unprivileged ("-": not set, which is privileged)
    entry KEY PATH                    a devN as the container's next start will have it (`pct config`)
    current KEY PATH                  a devN in effect now (`pct config --current`)
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
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

NONE = "-"
VERBS = ("refuse", "warn", "say", "drop", "take-back", "add", "want")


class FactsError(ValueError):
    pass


@dataclass
class Facts:
    exists: bool = True
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
    if rest not in ("absent", "running", "stopped"):
        raise FactsError(f"container {rest!r} is neither absent, running nor stopped")
    facts.exists = rest != "absent"
    facts.running = rest == "running"


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
    "hostname": lambda facts, rest: setattr(facts, "hostname", rest),
    "unprivileged": lambda facts, rest: setattr(facts, "unprivileged", _dash(rest)),
    "entry": lambda facts, rest: facts.entries.append(_pair(rest)),
    "current": lambda facts, rest: facts.current.append(_pair(rest)),
    "owned": lambda facts, rest: facts.owned.append(_pair(rest)),
    "gpu": _gpu,
    "guests": lambda facts, rest: facts.guests.__setitem__(*_pair(rest)),
    "guest-fix": lambda facts, rest: facts.guest_fixes.__setitem__(*_pair(rest)),
    "node": _node,
}


def read_facts(text: str) -> Facts:
    facts = Facts()
    for line in text.splitlines():
        verb, _, rest = line.partition(" ")
        if not verb:
            continue
        if verb not in _RECORDS:
            raise FactsError(f"unknown record {verb!r}")
        _RECORDS[verb](facts, rest)
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
    if not facts.exists:
        return [("refuse", f"container {vmid} does not exist on this host (pct list); fix gpuhosts:containers")], []
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


DECISIONS = {"ensure": decide_ensure}


def one_line(value: str) -> str:
    return " ".join(str(value).split("\t")).replace("\n", " ")


def format_actions(actions: List[Action]) -> str:
    return "".join("\t".join(one_line(part) for part in action) + "\n" for action in actions)


def main(argv: List[str], stdin: Optional[str] = None) -> int:
    if len(argv) != 2 or argv[0] not in DECISIONS:
        sys.stderr.write(f"usage: lxc-gpu-passthrough {'|'.join(DECISIONS)} PLAN_JSON < FACTS\n")
        return 2
    try:
        facts = read_facts(sys.stdin.read() if stdin is None else stdin)
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
