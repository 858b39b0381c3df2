"""NvidiaDriver: the exact NVIDIA driver on the host — headers, DKMS, nouveau off, persistence daemon."""

from __future__ import annotations

import json
from pathlib import Path

from gpuhosts.config import GpuUse, StackConfig
from gpuhosts.facts import Fact, desired, files_facts, render_probe, systemd_unit_facts
from gpuhosts.hostside import nvidia_driver as decisions
from gpuhosts.render import HostFile, render
from gpuhosts.units import Unit

UNIT = "nvidia-driver"
# The boot unit of LxcGpuPassthrough (gpuhosts/plans/lxc_gpu_passthrough.py), named here to keep the modules apart.
UVM_UNIT = "gpuhosts-nvidia-uvm.service"
PERSISTENCED_UNIT = "gpuhosts-nvidia-persistenced.service"
# pve-container debian/changelog: 5.0.7 "allow passing raw device nodes through to containers" (Proxmox VE 8.1,
# bb2f6f7214bce2ec70f84759d3ce1c6aca3da02c); 6.0.4 "implement device hotplug" (VE 9.0, 27a7f7dcd5f4d1967e67bb0d951ab67443473900).
DEVN_MIN_PVE_CONTAINER = "5.0.7"
DEVN_HOTPLUG_MIN_PVE_CONTAINER = "6.0.4"
# The driver's decisions run on the host as this file's own text (gpuhosts/hostside/nvidia_driver.py).
DECIDER = Path(decisions.__file__).read_text()


def render_files(config: StackConfig) -> dict[str, HostFile]:
    nvidia = config.nvidia
    return {
        "nouveau_blacklist": HostFile("/etc/modprobe.d/gpuhosts-nouveau.conf",
                                      render("nvidia_driver/nouveau-blacklist.conf.j2", version=nvidia.version)),
        "persistenced_unit": HostFile(f"/etc/systemd/system/{PERSISTENCED_UNIT}",
                                      render("nvidia_driver/nvidia-persistenced.service.j2", version=nvidia.version)),
    }


def driver_facts(config: StackConfig, files: dict[str, HostFile]) -> list[Fact]:
    version = config.nvidia.version
    return [
        *files_facts(files.values()),
        Fact("installed user space", "userspace_version", version),
        # Until a reboot finishes an upgrade the old module stays loaded; the preview shows that as drift.
        Fact("loaded module", "module_version", version),
        Fact("loaded module type", "module_type", config.nvidia.kernel_module_type.value),
        *systemd_unit_facts(files["persistenced_unit"]),
        # The daemon keeps it on (--persistence-mode); `nvidia-smi -pm 0` turns it off behind the daemon's back.
        *(Fact(f"persistence mode {gpu.address}", f"persistence_mode {gpu.address}", "Enabled")
          for gpu in config.nvidia_gpus),
        # The release the stack says the host runs, as pveversion prints it (major.minor of pve-manager).
        *([Fact("Proxmox VE release", "pve_release", config.host.proxmox_release)]
          if config.host.proxmox_release else []),
    ]


def plan_nvidia_driver(config: StackConfig, needs: tuple[str, ...]) -> Unit:
    files = render_files(config)
    # The pre-flight refuses what the host cannot do for this stack: its boot loader, devN for container GPUs.
    plan = {"version": config.nvidia.version, "module_type": config.nvidia.kernel_module_type.value,
            "proxmox_release": config.host.proxmox_release or "",
            "container_gpus": bool(config.gpus_for(GpuUse.CONTAINER)),
            "devn_min": DEVN_MIN_PVE_CONTAINER, "hotplug_min": DEVN_HOTPLUG_MIN_PVE_CONTAINER}
    values = dict(unit=UNIT, nvidia=config.nvidia, persistenced_unit_name=PERSISTENCED_UNIT, uvm_unit_name=UVM_UNIT,
                  nvidia_gpus=[gpu.address for gpu in config.nvidia_gpus], bootloader=config.host.bootloader.value,
                  plan_json=json.dumps(plan, sort_keys=True), decider=DECIDER.rstrip("\n"), **files)
    facts = driver_facts(config, files)
    return Unit(
        key=UNIT,
        kind="NvidiaDriver",
        ensure=render("nvidia_driver/ensure.sh.j2", **values),
        teardown=render("nvidia_driver/teardown.sh.j2", **values),
        probe=render_probe(UNIT, facts, prelude=render("nvidia_driver/probe-helpers.sh.j2")),
        desired=desired(facts),
        needs=needs,
        files=tuple(files.values()),
        undoes=(f"NVIDIA driver {config.nvidia.version} uninstalled (only if gpuhosts installed it) from "
                f"{', '.join(f'{gpu.model} {gpu.address}' for gpu in config.nvidia_gpus)}; "
                f"{PERSISTENCED_UNIT} and the nouveau blacklist removed; a reboot finishes it"),
        # A new module or module type loads only at boot; the nouveau blacklist acts from the rebuilt initramfs.
        reboot_on=("loaded module", "loaded module type", f"file {files['nouveau_blacklist'].path}"),
    )
