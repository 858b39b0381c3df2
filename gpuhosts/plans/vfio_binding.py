"""VfioBinding: GPUs for VMs on vfio-pci by PCI address (all functions of the slot), surviving reboots."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from gpuhosts.config import GpuUse, StackConfig
from gpuhosts.facts import Fact, desired, files_facts, render_probe
from gpuhosts.hostside import vfio_binding as decisions
from gpuhosts.render import HostFile, render
from gpuhosts.units import Unit

UNIT = "vfio-binding"
OVERRIDE_SCRIPT = "/usr/local/lib/gpuhosts/vfio-override.sh"
# The decisions run on the host as this file's own text (gpuhosts/hostside/vfio_binding.py).
DECIDER = Path(decisions.__file__).read_text()


def render_files(config: StackConfig) -> dict[str, HostFile]:
    vfio_slots = [gpu.slot for gpu in config.gpus_for(GpuUse.VFIO)]
    return {
        "override_script": HostFile(OVERRIDE_SCRIPT, render("vfio_binding/vfio-override.sh.j2", vfio_slots=vfio_slots),
                                    mode="0755"),
        # mkinitramfs runs the executables of /etc/initramfs-tools/hooks (initramfs-tools(7)).
        "initramfs_hook": HostFile("/etc/initramfs-tools/hooks/gpuhosts-vfio",
                                   render("vfio_binding/initramfs-hook.sh.j2", override_script=OVERRIDE_SCRIPT),
                                   mode="0755"),
        "modprobe_conf": HostFile("/etc/modprobe.d/gpuhosts-vfio.conf",
                                  render("vfio_binding/modprobe-vfio.conf.j2", vfio_slots=vfio_slots,
                                         override_script=OVERRIDE_SCRIPT)),
        "modules_conf": HostFile("/etc/modules-load.d/gpuhosts-vfio.conf",
                                 render("vfio_binding/modules-load-vfio.conf.j2", vfio_slots=vfio_slots)),
    }


def vfio_facts(config: StackConfig, files: dict[str, HostFile]) -> list[Fact]:
    facts = files_facts(files.values())
    for arg in config.host.kernel_args:
        facts.append(decided_fact(f"kernel argument {arg}", "present"))
    for gpu in config.gpus_for(GpuUse.VFIO):
        facts.append(decided_fact(f"slot {gpu.slot}", "vfio-pci"))
    for gpu in config.nvidia_gpus:
        facts.append(decided_fact(f"slot {gpu.slot}", "not vfio-pci"))
        # A running VM that lists a GPU meant for nvidia is drift that ensure must not repair: it refuses.
        facts.append(decided_fact(f"running VM with {gpu.slot}", "none"))
    return facts


def decided_fact(name: str, value: str) -> Fact:
    """A fact the probe's one decision observes (gpuhosts/hostside/vfio_binding.py `observe`)."""
    return Fact(name, f"observed {shlex.quote(name)}", value)


def decision_plan(config: StackConfig) -> str:
    """What the decisions are made for, as gpuhosts/hostside/vfio_binding.py `Plan` reads it."""
    return json.dumps({"bootloader": config.host.bootloader.value,
                       "vfio_slots": [gpu.slot for gpu in config.gpus_for(GpuUse.VFIO)],
                       "nvidia_slots": [gpu.slot for gpu in config.nvidia_gpus],
                       "kernel_args": list(config.host.kernel_args)}, sort_keys=True)


def plan_vfio_binding(config: StackConfig) -> Unit:
    files = render_files(config)
    values = dict(
        unit=UNIT,
        bootloader=config.host.bootloader.value,
        vfio_slots=[gpu.slot for gpu in config.gpus_for(GpuUse.VFIO)],
        nvidia_slots=[gpu.slot for gpu in config.nvidia_gpus],
        plan_json=decision_plan(config),
        decider=DECIDER.rstrip("\n"),  # the here-document gives it back its last newline
        **files,
    )
    facts = vfio_facts(config, files)
    return Unit(
        key=UNIT,
        kind="VfioBinding",
        ensure=render("vfio_binding/ensure.sh.j2", **values),
        teardown=render("vfio_binding/teardown.sh.j2", **values),
        probe=render_probe(UNIT, facts, prelude=render("vfio_binding/probe-helpers.sh.j2", **values)),
        desired=desired(facts),
        files=tuple(files.values()),
        undoes=vfio_undoes(config),
        # The modprobe and initramfs files act when the initramfs loads vfio-pci, the arguments at boot.
        reboot_on=tuple(f.name for f in facts if f.name.startswith(("file ", "kernel argument "))),
    )


def vfio_undoes(config: StackConfig) -> str:
    gpus = ", ".join(f"{gpu.model} {gpu.address}" for gpu in config.gpus_for(GpuUse.VFIO)) or "no GPU"
    args = " ".join(config.host.kernel_args)
    return (f"{gpus} returned from vfio-pci to the driver each had before (nvidia where it is installed); "
            f"gpuhosts' vfio modprobe, modules-load and initramfs files removed and the initramfs rebuilt; "
            f"kernel arguments gpuhosts added ({args or 'none'}) removed; a reboot finishes it")
