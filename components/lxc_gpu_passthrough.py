"""LxcGpuPassthrough: `devN` entries for a container's GPUs (minors resolved on the host), nvidiactl and nvidia-uvm."""

from __future__ import annotations

import pulumi
from pulumi_command import remote

from components._command import step_command
from gpuhosts.config import ContainerConfig, StackConfig
from gpuhosts.render import HostFile, Step, render

UVM_UNIT = "gpuhosts-nvidia-uvm.service"


def plan_uvm_at_boot(config: StackConfig) -> Step:
    unit_file = HostFile(f"/etc/systemd/system/{UVM_UNIT}", render("lxc_gpu_passthrough/nvidia-uvm.service.j2"))
    values = dict(unit="nvidia-uvm-at-boot", uvm_unit=unit_file, uvm_unit_name=UVM_UNIT)
    return Step(
        name=f"{config.host.name}-nvidia-uvm-at-boot",
        create=render("lxc_gpu_passthrough/uvm-ensure.sh.j2", **values),
        delete=render("lxc_gpu_passthrough/uvm-teardown.sh.j2", **values),
        files=(unit_file,),
    )


def plan_container_devices(config: StackConfig, container: ContainerConfig) -> Step:
    unit = f"ct{container.vmid}-gpu-devices"
    values = dict(
        unit=unit,
        vmid=container.vmid,
        hostname=container.hostname,
        allow_restart=container.allow_restart,
        gpus=[gpu.address for gpu in config.container_gpus(container.vmid)],
    )
    return Step(
        name=f"{config.host.name}-{unit}",
        create=render("lxc_gpu_passthrough/devices-ensure.sh.j2", **values),
        delete=render("lxc_gpu_passthrough/devices-teardown.sh.j2", **values),
    )


class LxcGpuPassthrough(pulumi.ComponentResource):
    """One per host: the boot-time uvm unit, then one command per container that receives GPUs."""

    def __init__(self, name: str, uvm: Step, containers: dict[int, Step], connection: remote.ConnectionArgs,
                 opts: pulumi.ResourceOptions | None = None, depends_on: list[pulumi.Resource] | None = None):
        super().__init__("gpuhosts:host:LxcGpuPassthrough", name, None, opts)
        self.uvm = step_command(uvm, connection, self, depends_on or [])
        self.containers = {vmid: step_command(step, connection, self, [self.uvm]) for vmid, step in containers.items()}
        self.register_outputs({"containers": sorted(self.containers)})
