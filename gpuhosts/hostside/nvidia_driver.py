"""NvidiaDriver's decisions, over the facts its ensure gathers on the Proxmox host.

The ensure (templates/nvidia_driver/ensure.sh.j2) prints what it read and pipes it into this file, run on the host
verbatim under `python3 -I` (standard library only, Python 3.9 on), and performs the actions it reads back. It asks
twice: `preflight` before anything changes, `built` once the driver is installed. Facts, one record a line, a value
running to the end of its line ("-": none):

    installed VERSION             the NVIDIA user space (libnvidia-ml's file name)
    loaded VERSION                the loaded nvidia module
    kernel RELEASE                uname -r
    pveversion TEXT               pveversion's output, its first line
    pve-container VERSION         dpkg's version of pve-container
    efi present|absent            /sys/firmware/efi
    efivar NAME BYTE              the value byte of SecureBoot and SetupMode (efivarfs: 4 attribute bytes first)
    package NAME installed|absent
    dkms LINE                     a line of `dkms status -m nvidia -v VERSION`
    build-log present|absent      DKMS's make.log of a failed build
    gpu ADDRESS DRIVER            each GPU for nvidia

Actions, one a line, tab-separated:

    refuse MESSAGE                stop (in `preflight`: before anything changed)
    say MESSAGE
    unload                        take the loaded module out so the installer can replace it
    install-packages NAME…        what the installer needs first (space-separated)
    install-driver                fetch the pinned .run and install it with DKMS
    reboot                        the loaded module or a GPU's driver waits for the next boot
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

NONE = "-"
VERBS = ("refuse", "say", "unload", "install-packages", "install-driver", "reboot")
# efivarfs names: the EFI global variable GUID (UEFI spec, EFI_GLOBAL_VARIABLE).
SECURE_BOOT = "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
SETUP_MODE = "SetupMode-8be4df61-93ca-11d2-aa0d-00e098032b8c"


class FactsError(ValueError):
    pass


@dataclass
class Facts:
    installed: str = ""
    loaded: str = ""
    kernel: str = ""
    pveversion: str = ""
    pve_container: str = ""
    efi: bool = False
    efivars: Dict[str, str] = field(default_factory=dict)
    packages: Dict[str, bool] = field(default_factory=dict)
    dkms: List[str] = field(default_factory=list)
    build_log: bool = False
    gpus: List[Tuple[str, str]] = field(default_factory=list)


def _dash(value: str) -> str:
    return "" if value == NONE else value


def _state(value: str, yes: str, no: str, what: str) -> bool:
    if value not in (yes, no):
        raise FactsError(f"{what}: {value!r} is neither {yes} nor {no}")
    return value == yes


def _words(rest: str, count: int, what: str) -> List[str]:
    words = rest.split(" ")
    if len(words) != count:
        raise FactsError(f"{what} needs {count} values: {rest!r}")
    return words


_RECORDS = {
    "installed": lambda f, rest: setattr(f, "installed", _dash(rest)),
    "loaded": lambda f, rest: setattr(f, "loaded", _dash(rest)),
    "kernel": lambda f, rest: setattr(f, "kernel", rest),
    "pveversion": lambda f, rest: setattr(f, "pveversion", rest),
    "pve-container": lambda f, rest: setattr(f, "pve_container", _dash(rest)),
    "efi": lambda f, rest: setattr(f, "efi", _state(rest, "present", "absent", "efi")),
    "efivar": lambda f, rest: f.efivars.__setitem__(*_words(rest, 2, "efivar")),
    "package": lambda f, rest: f.packages.__setitem__(
        _words(rest, 2, "package")[0], _state(rest.split(" ")[-1], "installed", "absent", "package")),
    "dkms": lambda f, rest: f.dkms.append(rest),
    "build-log": lambda f, rest: setattr(f, "build_log", _state(rest, "present", "absent", "build-log")),
    "gpu": lambda f, rest: f.gpus.append(tuple(_dash(w) for w in _words(rest, 2, "gpu"))),
}


def read_facts(data: bytes) -> Facts:
    """The gathered facts; FactsError names the first record that is not one."""
    facts = Facts()
    for line in data.decode("utf-8", "replace").splitlines():
        verb, _, rest = line.partition(" ")
        if not verb:
            continue
        if verb not in _RECORDS:
            raise FactsError(f"unknown record {verb!r}")
        _RECORDS[verb](facts, rest)
    return facts


# --- Debian versions, as dpkg compares them (dpkg lib/dpkg/version.c: parseversion, verrevcmp) ------------------
def _digit(char: str) -> bool:
    return "0" <= char <= "9"


def _order(char: str) -> int:
    if _digit(char):
        return 0
    if "a" <= char.lower() <= "z":
        return ord(char)
    if char == "~":
        return -1
    return ord(char) + 256 if char else 0


def _verrevcmp(a: str, b: str) -> int:
    i = j = 0
    while i < len(a) or j < len(b):
        first_diff = 0
        while (i < len(a) and not _digit(a[i])) or (j < len(b) and not _digit(b[j])):
            ac = _order(a[i]) if i < len(a) else 0
            bc = _order(b[j]) if j < len(b) else 0
            if ac != bc:
                return ac - bc
            i += 1
            j += 1
        while i < len(a) and a[i] == "0":
            i += 1
        while j < len(b) and b[j] == "0":
            j += 1
        while i < len(a) and _digit(a[i]) and j < len(b) and _digit(b[j]):
            if not first_diff:
                first_diff = ord(a[i]) - ord(b[j])
            i += 1
            j += 1
        if i < len(a) and _digit(a[i]):
            return 1
        if j < len(b) and _digit(b[j]):
            return -1
        if first_diff:
            return first_diff
    return 0


def _split_version(version: str) -> Tuple[int, str, str]:
    epoch, colon, rest = version.strip().partition(":")
    if not colon:
        epoch, rest = "0", version.strip()
    upstream, dash, revision = rest.rpartition("-")
    if not dash:
        upstream, revision = rest, ""
    return int(epoch or 0), upstream, revision


def compare_versions(a: str, b: str) -> int:
    """<0, 0 or >0 as Debian version `a` sorts before, with or after `b` (`dpkg --compare-versions`)."""
    (ea, ua, ra), (eb, ub, rb) = _split_version(a), _split_version(b)
    if ea != eb:
        return ea - eb
    return _verrevcmp(ua, ub) or _verrevcmp(ra, rb)


# --- the decisions ---------------------------------------------------------------------------------------------
Action = Tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    version: str
    module_type: str
    proxmox_release: str
    container_gpus: bool
    devn_min: str
    hotplug_min: str

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        data = json.loads(text)
        return cls(data["version"], data["module_type"], data["proxmox_release"], bool(data["container_gpus"]),
                   data["devn_min"], data["hotplug_min"])


def pve_version(pveversion: str) -> str:
    """pve-manager's version from pveversion's "pve-manager/<version>/<build commit> (running kernel: <release>)"."""
    parts = pveversion.split("/")
    return parts[1] if len(parts) >= 2 and parts[0] == "pve-manager" else ""


def secure_boot(facts: Facts) -> str:
    """Secure Boot as mokutil --sb-state decides it: SecureBoot 1 and SetupMode not 1."""
    if not facts.efi:
        return "not available (legacy BIOS boot)"
    if facts.efivars.get(SECURE_BOOT) == "1" and facts.efivars.get(SETUP_MODE) != "1":
        return "enabled"
    return "disabled"


def decide_preflight(plan: Plan, facts: Facts) -> List[Action]:
    version, pct = plan.version, facts.pve_container
    actions: List[Action] = [("say", f"wanted {version} ({plan.module_type}); loaded module: {facts.loaded or 'none'}; "
                                     f"installed user space: {facts.installed or 'none'}")]
    pve = pve_version(facts.pveversion)
    actions.append(("say", f"pre-flight: Proxmox VE {pve or 'unknown'} (pveversion), pve-container "
                           f"{pct or 'not installed'}, kernel {facts.kernel}"))
    if plan.proxmox_release and pve.rsplit(".", 1)[0] != plan.proxmox_release:
        return actions + [("refuse", f"the host runs Proxmox VE {pve or 'unknown'} (pveversion), the stack says "
                                     f"{plan.proxmox_release} (host.proxmoxRelease): the plan checked the driver against "
                                     f"{plan.proxmox_release}'s kernels; set the release the host runs, or upgrade the "
                                     "host first")]
    boot = secure_boot(facts)
    actions.append(("say", f"pre-flight: Secure Boot {boot}"))
    if boot == "enabled" and facts.installed != version:
        return actions + [("refuse", f"Secure Boot is enabled, so the kernel loads only signed modules, and gpuhosts "
                                     f"builds nvidia {version} unsigned (it gives the installer no "
                                     "--module-signing-secret-key and sets up no DKMS signing key): disable Secure Boot "
                                     "in the firmware, or install the driver signed with an enrolled MOK yourself, and "
                                     "run again")]
    devn = bool(pct) and compare_versions(pct, plan.devn_min) >= 0
    hotplug = bool(pct) and compare_versions(pct, plan.hotplug_min) >= 0
    yes = {True: "yes", False: "no"}
    actions.append(("say", f"pre-flight: container devN entries: {yes[devn]} (pve-container >= {plan.devn_min}); "
                           f"devN hotplug: {yes[hotplug]} (pve-container >= {plan.hotplug_min})"))
    if plan.container_gpus and not devn:
        return actions + [("refuse", f"the stack gives GPUs to containers as devN entries, which need pve-container "
                                     f">= {plan.devn_min} (Proxmox VE 8.1); this host has {pct or 'no pve-container'}: "
                                     "upgrade Proxmox VE and run again")]
    if facts.installed == version:
        return actions
    if facts.loaded and facts.loaded != version:
        # The installer will not replace a loaded module.
        actions.append(("unload",))
    # dkms first: the .run registers its module with DKMS only when DKMS is already there.
    wanted = ["dkms", f"proxmox-headers-{facts.kernel}", "proxmox-default-headers"]
    missing = [name for name in wanted if not facts.packages.get(name)]
    if missing:
        actions.append(("install-packages", " ".join(missing)))
    return actions + [("install-driver",)]


def dkms_state(lines: List[str], version: str, kernel: str) -> str:
    """DKMS's state of nvidia `version` for `kernel` (installed, built), "" when not built there. dkms 3.0.10
    do_status prints "<module>/<version>, <kernel>, <arch>: <state>[ (WARNING…)]" or "<module>/<version>: added"."""
    prefix = f"nvidia/{version}, {kernel}, "
    for line in lines:
        if line.startswith(prefix):
            state = line[len(prefix):].split(": ", 1)
            return state[1].split(" ")[0] if len(state) == 2 and state[1] else ""
    return ""


def decide_built(plan: Plan, facts: Facts) -> List[Action]:
    """After the install: a module not built for the running kernel never loads, however often the host reboots."""
    version, kernel = plan.version, facts.kernel
    actions: List[Action] = [("say", f"DKMS: {line}") for line in facts.dkms if line]
    if any(facts.dkms) and facts.loaded != version and dkms_state(facts.dkms, version, kernel) != "installed":
        # dkms 3.0.10 actual_build moves the log beside the build only when it succeeds; a failed one stays in build/.
        why = (f"its DKMS build failed (log: /var/lib/dkms/nvidia/{version}/build/make.log)" if facts.build_log else
               f"DKMS has not built it there (is proxmox-headers-{kernel} installed?)")
        return actions + [("refuse", f"nvidia {version} is not installed for the running kernel {kernel}, so no "
                                     f"reboot would load it: {why}; fix the build and run 'dkms install -m nvidia -v "
                                     f"{version} -k {kernel}', or boot a kernel it is built for (dkms status -m nvidia) "
                                     "with proxmox-boot-tool kernel pin, and run again")]
    return actions


def decide_settled(plan: Plan, facts: Facts) -> List[Action]:
    """Once installed and its daemon running: what waits for the next boot."""
    actions: List[Action] = []
    if facts.installed != plan.version:
        return [("refuse", f"after installing, user space is {facts.installed or 'absent'}, not {plan.version}")]
    if facts.loaded != plan.version:
        actions += [("say", f"the loaded module is {facts.loaded or 'none'}; {plan.version} takes over at the next "
                            "boot"), ("reboot",)]
    for address, driver in facts.gpus:
        if driver != "nvidia":
            actions += [("say", f"GPU {address} is on '{driver or 'no driver'}'; nvidia takes it at the next boot"),
                        ("reboot",)]
    return actions


DECISIONS = {"preflight": decide_preflight, "built": decide_built, "settled": decide_settled}


def one_line(value: str) -> str:
    return " ".join(str(value).split("\t")).replace("\n", " ")


def format_actions(actions: List[Action]) -> str:
    return "".join("\t".join(one_line(part) for part in action) + "\n" for action in actions)


def main(argv: List[str], stdin=None) -> int:
    if len(argv) != 2 or argv[0] not in DECISIONS:
        sys.stderr.write(f"usage: nvidia-driver {'|'.join(DECISIONS)} PLAN_JSON < FACTS\n")
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
