"""VfioBinding: GPUs for VMs on vfio-pci by PCI address (all functions of the slot), surviving reboots."""

from __future__ import annotations

import pulumi
from pulumi_command import remote

from components._command import reboot_required, step_command
from gpuhosts.config import GpuUse, StackConfig
from gpuhosts.render import HostFile, Step, render

UNIT = "vfio-binding"
OVERRIDE_SCRIPT = "/usr/local/lib/gpuhosts/vfio-override.sh"


def render_files(config: StackConfig) -> dict[str, HostFile]:
    vfio_slots = [gpu.slot for gpu in config.gpus_for(GpuUse.VFIO)]
    return {
        "override_script": HostFile(OVERRIDE_SCRIPT, render("vfio_binding/vfio-override.sh.j2", vfio_slots=vfio_slots),
                                    mode="0755"),
        "modprobe_conf": HostFile("/etc/modprobe.d/gpuhosts-vfio.conf",
                                  render("vfio_binding/modprobe-vfio.conf.j2", vfio_slots=vfio_slots,
                                         override_script=OVERRIDE_SCRIPT)),
        "modules_conf": HostFile("/etc/modules-load.d/gpuhosts-vfio.conf",
                                 render("vfio_binding/modules-load-vfio.conf.j2", vfio_slots=vfio_slots)),
    }


def plan_vfio_binding(config: StackConfig) -> Step:
    files = render_files(config)
    values = dict(
        unit=UNIT,
        bootloader=config.host.bootloader.value,
        vfio_slots=[gpu.slot for gpu in config.gpus_for(GpuUse.VFIO)],
        nvidia_slots=[gpu.slot for gpu in config.nvidia_gpus],
        kernel_args=list(config.host.kernel_args),
        **files,
    )
    return Step(
        name=f"{config.host.name}-{UNIT}",
        create=render("vfio_binding/ensure.sh.j2", **values),
        delete=render("vfio_binding/teardown.sh.j2", **values),
        files=tuple(files.values()),
    )


class VfioBinding(pulumi.ComponentResource):
    def __init__(self, name: str, step: Step, connection: remote.ConnectionArgs,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpuhosts:host:VfioBinding", name, None, opts)
        self.command = step_command(step, connection, self)
        self.reboot_required = reboot_required(self.command)
        self.register_outputs({"rebootRequired": self.reboot_required})
