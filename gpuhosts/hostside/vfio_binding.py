"""VfioBinding's decisions, over the facts its scripts gather on the Proxmox host.

The unit's bash gathers facts and performs actions; everything in between is decided here. The ensure, the teardown
and the probe each pipe what they read (`facts`, below) into this file, which runs on the host verbatim under
`python3 -I` (standard library only, Python 3.9 and later: Proxmox VE 7's Debian 11 is the oldest host), and reads
back the actions (`ensure`, `teardown`, `verify`) or the observed facts (`probe`).

Facts, one record a line (`read_facts`); a file's text is framed by its length, since it may hold anything:

    function ADDRESS VENDOR DEVICE DRIVER OVERRIDE   every function of a declared slot ("-" for none)
    module NAME loaded|absent                        vfio_pci, nvidia (/sys/module)
    vm VMID STATUS ID                                a PCI id in a VM's current config (templates/common/vms.sh.j2)
    vm-table-error TEXT                              why the VMs' PCI ids could not be read
    original ADDRESS DRIVER OVERRIDE                 what teardown returns each function to
    file NAME LENGTH, then LENGTH bytes and a newline
    missing NAME

File names: `proc-cmdline`, `added-args` (the arguments this unit added), `kernel-cmdline` (/etc/kernel/cmdline) and
`grub PATH` for /etc/default/grub and each /etc/default/grub.d/*.cfg in the order grub-mkconfig sources them.

Actions, one a line, tab-separated (`VERB\tVALUE…`); a message carries no tab or newline:

    refuse MESSAGE            stop before anything changed
    check-release ADDRESS     the nvidia driver must let go of it (the script asks the GPU's processes)
    warn MESSAGE
    cmdline TEXT              the boot loader's current kernel arguments
    write-cmdline PATH BASE64 the boot loader file's whole new content, then its refresh
    record-arg ARG            an argument this unit added (teardown removes only those)
    load-vfio                 modprobe vfio-pci
    mark ADDRESS              driver_override = vfio-pci, nothing unbound
    bind ADDRESS              moved to vfio-pci
    remove-id VENDOR DEVICE   vfio-pci's dynamic id, which would take the GPU straight back
    release ADDRESS           back to its default driver
    return ADDRESS DRIVER     teardown: back to the driver it had ("" unbinds)
    override ADDRESS VALUE    teardown: the driver_override it had
    reboot                    the running kernel lags what was configured
"""

from __future__ import annotations

import base64
import json
import re
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

NVIDIA_VENDOR = "0x10de"
NONE = "-"
# Every action a decision may take, in the words of the docstring above.
VERBS = ("refuse", "check-release", "warn", "cmdline", "write-cmdline", "record-arg", "load-vfio", "mark", "bind",
         "remove-id", "release", "return", "override", "reboot", "fact")


class FactsError(ValueError):
    pass


@dataclass(frozen=True)
class PciFunction:
    address: str
    vendor: str
    device: str
    driver: str  # "" when unbound
    override: str  # "" when none (sysfs prints "(null)")

    @property
    def slot(self) -> str:
        return self.address.rsplit(".", 1)[0]


@dataclass(frozen=True)
class VmUse:
    vmid: str
    status: str
    pci_id: str


@dataclass
class Facts:
    functions: List[PciFunction] = field(default_factory=list)
    modules: Dict[str, bool] = field(default_factory=dict)
    vms: List[VmUse] = field(default_factory=list)
    vm_table_error: Optional[str] = None
    original: List[Tuple[str, str, str]] = field(default_factory=list)
    files: Dict[str, Optional[str]] = field(default_factory=dict)  # None: the file is missing

    def functions_of(self, slot: str) -> List[PciFunction]:
        return [f for f in self.functions if f.slot == slot]

    def function(self, address: str) -> Optional[PciFunction]:
        return next((f for f in self.functions if f.address == address), None)

    def grub_files(self) -> List[Tuple[str, str]]:
        return [(name[len("grub "):], text) for name, text in self.files.items()
                if name.startswith("grub ") and text is not None]


# --- one parser per fact -------------------------------------------------------------------------------------
def _dash(value: str) -> str:
    return "" if value == NONE else value


def _function(facts: Facts, words: List[str]) -> None:
    address, vendor, device, driver, override = words
    facts.functions.append(PciFunction(address, vendor, device, _dash(driver),
                                       "" if override in (NONE, "(null)") else override))


def _module(facts: Facts, words: List[str]) -> None:
    name, state = words
    if state not in ("loaded", "absent"):
        raise FactsError(f"module {name}: {state!r} is neither loaded nor absent")
    facts.modules[name] = state == "loaded"


def _vm(facts: Facts, words: List[str]) -> None:
    vmid, status, pci_id = words
    facts.vms.append(VmUse(vmid, status, pci_id))


def _original(facts: Facts, words: List[str]) -> None:
    address, driver, override = words
    facts.original.append((address, _dash(driver), _dash(override)))


_RECORDS = {"function": (_function, 5), "module": (_module, 2), "vm": (_vm, 3), "original": (_original, 3)}


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
        if verb == "file":
            name, _, length = rest.rpartition(" ")
            if not length.isdigit() or not name:
                raise FactsError(f"a file record needs a name and a length: {line!r}")
            size = int(length)
            body = data[at:at + size]
            if len(body) != size or data[at + size:at + size + 1] != b"\n":
                raise FactsError(f"file {name}: {size} bytes and a newline were promised, {len(body)} came")
            facts.files[name] = body.decode("utf-8", "surrogateescape")
            at += size + 1
        elif verb == "missing":
            facts.files[rest] = None
        elif verb == "vm-table-error":
            facts.vm_table_error = rest
        elif verb in _RECORDS:
            parse, count = _RECORDS[verb]
            words = rest.split(" ")
            if len(words) != count:
                raise FactsError(f"{verb} needs {count} values: {line!r}")
            parse(facts, words)
        elif verb:
            raise FactsError(f"unknown record {verb!r}")
    return facts


# --- the boot loader's kernel command line ---------------------------------------------------------------------
class Refused(Exception):
    pass


@dataclass(frozen=True)
class Cmdline:
    """Where the boot loader takes the kernel arguments from, and how to write them back with everything else of
    that file as it was."""

    path: str
    value: str
    lines: Tuple[str, ...]
    index: int  # the line that holds the value
    prefix: str = ""
    quote: str = ""
    suffix: str = ""


# grub-mkconfig sources /etc/default/grub and then each /etc/default/grub.d/*.cfg as shell, so the last assignment
# of GRUB_CMDLINE_LINUX_DEFAULT wins. Sourcing would run whatever those files hold as root, so only a strict form is
# read: `[export ]GRUB_CMDLINE_LINUX_DEFAULT=` with a "double-quoted" value (no $ ` \ " inside), a 'single-quoted'
# one or a bare word, then nothing or blanks and an optional # comment. Any other line naming it refuses.
_GRUB_LINE = re.compile(r"""^(\s*(?:export\s+)?GRUB_CMDLINE_LINUX_DEFAULT=)"""
                        r"""(?:"([^"$`\\]*)"|'([^']*)'|([^\s"$`\\;&|<>()#']*))"""
                        r"""((?:\s+(?:#.*)?)?)$""")
_GRUB_BARE = re.compile(r"""^[^\s"$`\\;&|<>()#']*$""")
GRUB_DEFAULT = "/etc/default/grub"
KERNEL_CMDLINE = "/etc/kernel/cmdline"


def _lines(text: str) -> List[str]:
    lines = text.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def grub_cmdline(files: List[Tuple[str, str]]) -> Cmdline:
    found = None
    for path, text in files:
        lines = _lines(text)
        for n, line in enumerate(lines):
            if "GRUB_CMDLINE_LINUX_DEFAULT" not in line or re.match(r"^\s*#", line):
                continue
            match = _GRUB_LINE.match(line)
            if not match:
                raise Refused(f"{path} line {n + 1} sets GRUB_CMDLINE_LINUX_DEFAULT in a form this script cannot "
                              "rewrite safely (only NAME=\"…\", NAME='…' or NAME=word, then an optional # comment): "
                              f"{line}")
            prefix, double, single, bare, suffix = match.groups()
            quote, value = ('"', double) if double is not None else ("'", single) if single is not None else ("", bare)
            found = Cmdline(path, value, tuple(lines), n, prefix, quote, suffix)
    if found is None:
        raise Refused("neither /etc/default/grub nor /etc/default/grub.d/*.cfg sets GRUB_CMDLINE_LINUX_DEFAULT; add "
                      "GRUB_CMDLINE_LINUX_DEFAULT=\"quiet\" to /etc/default/grub")
    return found


def systemd_boot_cmdline(text: Optional[str]) -> Cmdline:
    """proxmox-boot-tool puts only the first line of /etc/kernel/cmdline on the boot entry (a last line without a
    newline counts) and aborts its refresh when that line has no root=."""
    if text is None:
        raise Refused("/etc/kernel/cmdline is missing: proxmox-boot-tool would boot with /proc/cmdline; write the "
                      "kernel command line there first")
    lines = _lines(text) or [""]
    if "root=" not in lines[0]:
        raise Refused("the first line of /etc/kernel/cmdline has no root=, so proxmox-boot-tool refresh would abort; "
                      "put the whole kernel command line, root= included, on that line")
    return Cmdline(KERNEL_CMDLINE, lines[0], tuple(lines), 0)


def configured_cmdline(bootloader: str, facts: Facts) -> Cmdline:
    if bootloader == "systemd-boot":
        return systemd_boot_cmdline(facts.files.get("kernel-cmdline"))
    return grub_cmdline(facts.grub_files())


def rewritten(cmdline: Cmdline, value: str) -> str:
    """The boot loader file with `value` in place of the arguments, every other line, the quoting and a trailing
    comment as they were."""
    lines = list(cmdline.lines)
    if cmdline.path == KERNEL_CMDLINE:
        lines[0] = value
        return "\n".join(lines) + "\n"
    quote = cmdline.quote
    if quote == "" and not _GRUB_BARE.match(value):
        quote = '"'
    if (quote == '"' and re.search(r'["$`\\]', value)) or (quote == "'" and "'" in value):
        raise Refused(f"the kernel arguments '{value}' cannot be written into {cmdline.path} safely")
    lines[cmdline.index] = f"{cmdline.prefix}{quote}{value}{quote}{cmdline.suffix}"
    return "\n".join(lines) + "\n"


def _write(cmdline: Cmdline, value: str) -> Tuple[str, ...]:
    content = base64.b64encode(rewritten(cmdline, value).encode("utf-8", "surrogateescape")).decode()
    return ("write-cmdline", cmdline.path, content)


def _words(text: Optional[str]) -> List[str]:
    return (text or "").split()


# --- the decisions ---------------------------------------------------------------------------------------------
Action = Tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    bootloader: str
    vfio_slots: Tuple[str, ...]
    nvidia_slots: Tuple[str, ...]
    kernel_args: Tuple[str, ...]

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        data = json.loads(text)
        return cls(data["bootloader"], tuple(data["vfio_slots"]), tuple(data["nvidia_slots"]),
                   tuple(data["kernel_args"]))


def vms_using_slot(facts: Facts, slot: str) -> List[Tuple[str, str]]:
    """Each VM (vmid, status) whose current config names a function of the slot, or the slot itself, once."""
    seen: Dict[str, str] = {}
    for use in facts.vms:
        if use.pci_id.rsplit(".", 1)[0] == slot or use.pci_id == slot:
            seen.setdefault(use.vmid, use.status)
    return list(seen.items())


def _declared_gpus(plan: Plan, facts: Facts) -> List[Action]:
    for slot in plan.vfio_slots + plan.nvidia_slots:
        first = facts.function(f"{slot}.0")
        if first is None:
            return [("refuse", f"GPU {slot}.0 is declared but not on this host (lspci -D); fix gpuhosts:gpus")]
        if first.vendor != NVIDIA_VENDOR:
            return [("refuse", f"{slot}.0 is not an NVIDIA device (vendor {first.vendor}); fix gpuhosts:gpus")]
    return []


def decide_ensure(plan: Plan, facts: Facts) -> List[Action]:
    refused = _declared_gpus(plan, facts)
    if refused:
        return refused
    to_vfio, to_mark, to_release = [], [], []
    for slot in plan.vfio_slots:
        for function in facts.functions_of(slot):
            if function.driver != "vfio-pci":
                to_vfio.append(function)
            elif function.override != "vfio-pci":
                # Already on vfio-pci (perhaps in a running VM): only the override is recorded, nothing is unbound.
                to_mark.append(function)
    for slot in plan.nvidia_slots:
        to_release += [f for f in facts.functions_of(slot) if f.driver == "vfio-pci" or f.override]

    actions: List[Action] = [("check-release", f.address) for f in to_vfio if f.driver == "nvidia"]
    if to_release and facts.vm_table_error is not None:
        return actions + [("refuse", f"cannot tell which VMs use a GPU: {facts.vm_table_error}")]
    for function in to_release:
        for vmid, status in vms_using_slot(facts, function.slot):
            # Only "stopped" has no QEMU process: a paused or suspended VM still holds the GPU.
            if status != "stopped":
                return actions + [("refuse", f"VM {vmid} is {status} with {function.slot} passed through (qm config "
                                             f"{vmid}); stop it or keep the GPU on vfio")]
            actions.append(("warn", f"warning: stopped VM {vmid} still lists {function.slot} in hostpci; it will not "
                                    "start until that entry is removed"))

    try:
        cmdline = configured_cmdline(plan.bootloader, facts)
        current = cmdline.value
        present = _words(current)
        recorded = _words(facts.files.get("added-args"))
        missing = [arg for arg in plan.kernel_args if arg not in present]
        wanted = " ".join(([current] if current else []) + missing)
        if missing:
            rewritten(cmdline, wanted)  # refuses before anything changed
    except Refused as refusal:
        return actions + [("refuse", str(refusal))]
    actions.append(("cmdline", current))
    actions += [("record-arg", arg) for arg in missing if arg not in recorded]
    if missing:
        actions.append(_write(cmdline, wanted))
    booted = _words(facts.files.get("proc-cmdline"))
    if any(arg not in booted for arg in plan.kernel_args):
        actions.append(("reboot",))

    if to_vfio and not facts.modules.get("vfio_pci"):
        actions.append(("load-vfio",))
    actions += [("mark", f.address) for f in to_mark]
    actions += [("bind", f.address) for f in to_vfio]
    # A loaded `ids=` option lives on as vfio-pci's dynamic ids; they would take the GPU straight back.
    actions += [("remove-id", f.vendor[2:] if f.vendor.startswith("0x") else f.vendor,
                 f.device[2:] if f.device.startswith("0x") else f.device) for f in to_release]
    actions += [("release", f.address) for f in to_release]
    return actions


def decide_verify(plan: Plan, facts: Facts) -> List[Action]:
    """After the live rebinding: what must hold now, and whether a reboot finishes it."""
    actions: List[Action] = []
    for slot in plan.vfio_slots:
        for function in facts.functions_of(slot):
            if function.driver != "vfio-pci":
                return [("refuse", f"{function.address} is on '{function.driver}', not vfio-pci, after binding")]
    for slot in plan.nvidia_slots:
        first = facts.function(f"{slot}.0")
        driver = first.driver if first else ""
        if driver == "vfio-pci":
            return [("refuse", f"{slot}.0 is still on vfio-pci after releasing it")]
        if driver == "" and facts.modules.get("nvidia"):
            actions += [("warn", f"{slot}.0 has no driver although nvidia is loaded; it binds at the next boot"),
                        ("reboot",)]
    return actions


def decide_teardown(plan: Plan, facts: Facts) -> List[Action]:
    actions: List[Action] = []
    for address, driver, _override in facts.original:
        now = facts.function(address)
        current = now.driver if now else ""
        if current == driver:
            continue
        if current == "nvidia":
            actions.append(("check-release", address))
        if current == "vfio-pci":
            slot = address.rsplit(".", 1)[0]
            if facts.vm_table_error is not None:
                return actions + [("refuse", f"cannot tell which VMs use a GPU: {facts.vm_table_error}")]
            for vmid, status in vms_using_slot(facts, slot):
                if status != "stopped":
                    return actions + [("refuse", f"VM {vmid} is {status} with {slot} passed through; stop it before "
                                                 "tearing down")]
    recorded = _words(facts.files.get("added-args"))
    if facts.files.get("added-args") is not None:
        try:
            cmdline = configured_cmdline(plan.bootloader, facts)
            kept = " ".join(arg for arg in _words(cmdline.value) if arg not in recorded)
            if kept != cmdline.value:
                actions += [_write(cmdline, kept), ("reboot",)]
        except Refused as refusal:
            return actions + [("refuse", str(refusal))]
    for address, driver, override in facts.original:
        now = facts.function(address)
        override_after = now.override if now else ""
        if (now.driver if now else "") != driver:
            actions.append(("return", address, driver))
            if driver:
                override_after = driver  # a rebind goes through driver_override
        if override_after != override:
            actions.append(("override", address, override))
    return actions


def observe(plan: Plan, facts: Facts) -> List[Action]:
    """The probe's facts, each `fact NAME VALUE`, as plans/vfio_binding.py declares them."""
    observed: List[Action] = []
    try:
        present: Optional[List[str]] = _words(configured_cmdline(plan.bootloader, facts).value)
        unreadable = ""
    except Refused as refusal:
        present, unreadable = None, str(refusal)
    for arg in plan.kernel_args:
        state = f"unreadable: {unreadable}" if present is None else "present" if arg in present else "absent"
        observed.append(("fact", f"kernel argument {arg}", state))
    for slot in plan.vfio_slots + plan.nvidia_slots:
        observed.append(("fact", f"slot {slot}", slot_binding(facts.functions_of(slot))))
    for slot in plan.nvidia_slots:
        if facts.vm_table_error is not None:
            running = f"unknown: {facts.vm_table_error}"
        else:
            running = ", ".join(f"VM {vmid}" for vmid, status in vms_using_slot(facts, slot)
                                if status != "stopped") or "none"
        observed.append(("fact", f"running VM with {slot}", running))
    return observed


def slot_binding(functions: List[PciFunction]) -> str:
    """"vfio-pci" when every function is on vfio-pci, "not vfio-pci" when none is, else each with its driver."""
    on_vfio = sum(f.driver == "vfio-pci" for f in functions)
    if functions and on_vfio == len(functions):
        return "vfio-pci"
    if on_vfio == 0:
        return "not vfio-pci"
    return " ".join(f"{f.address}={f.driver}" for f in functions)


DECISIONS = {"ensure": decide_ensure, "verify": decide_verify, "teardown": decide_teardown, "probe": observe}


def one_line(value: str) -> str:
    return " ".join(str(value).split("\t")).replace("\n", " ")


def format_actions(actions: List[Action]) -> str:
    return "".join("\t".join(one_line(part) for part in action) + "\n" for action in actions)


def main(argv: List[str], stdin=None) -> int:
    if len(argv) != 2 or argv[0] not in DECISIONS:
        sys.stderr.write(f"usage: vfio-binding {'|'.join(DECISIONS)} PLAN_JSON < FACTS\n")
        return 2
    try:
        facts = read_facts((stdin or sys.stdin.buffer).read())
    except FactsError as error:
        sys.stderr.write(f"the gathered facts are malformed: {error}\n")
        return 1
    actions = DECISIONS[argv[0]](Plan.from_json(argv[1]), facts)
    unknown = sorted({action[0] for action in actions} - set(VERBS))
    if unknown:
        sys.stderr.write(f"a decision took an action the scripts do not know: {', '.join(unknown)}\n")
        return 1
    sys.stdout.write(format_actions(actions))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
