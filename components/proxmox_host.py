"""ProxmoxHost: the parent of a Proxmox VE host's GPU units, and the pure plan of that host."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components._command import connection_args
from components.container_userspace import ContainerUserspace, plan_container_userspace
from components.host_reboot import HostReboot, plan_host_reboot
from components.lxc_gpu_passthrough import LxcGpuPassthrough, plan_container_devices, plan_uvm_at_boot
from components.nvidia_driver import NvidiaDriver, plan_nvidia_driver
from components.vfio_binding import VfioBinding, plan_vfio_binding
from gpuhosts.config import GpuUse, StackConfig
from gpuhosts.render import Step


@dataclass(frozen=True)
class HostPlan:
    """Everything one host receives, in apply order; the components and the offline plan both read it."""

    driver: Step | None
    vfio: Step
    reboot: tuple[Step, Step] | None
    uvm: Step | None
    container_devices: dict[int, Step]
    container_userspace: dict[int, Step]

    @property
    def steps(self) -> list[Step]:
        ordered: list[Step | None] = [self.vfio, self.driver, *(self.reboot or ()), self.uvm]
        for vmid in sorted(self.container_devices):
            ordered += [self.container_devices[vmid], self.container_userspace[vmid]]
        return [step for step in ordered if step is not None]


def plan_host(config: StackConfig) -> HostPlan:
    needs_driver = bool(config.nvidia_gpus)
    containers = [c for c in config.containers if config.container_gpus(c.vmid)]
    return HostPlan(
        driver=plan_nvidia_driver(config) if needs_driver else None,
        vfio=plan_vfio_binding(config),
        reboot=plan_host_reboot(config) if config.host.allow_reboot else None,
        uvm=plan_uvm_at_boot(config) if containers else None,
        container_devices={c.vmid: plan_container_devices(config, c) for c in containers},
        container_userspace={c.vmid: plan_container_userspace(config, c) for c in containers},
    )


def summarize_host(config: StackConfig) -> dict:
    """The desired state in the words a reviewer checks."""
    driver = config.nvidia
    return {
        "bootloader": config.host.bootloader.value,
        "kernelArgs": list(config.host.kernel_args),
        "allowReboot": config.host.allow_reboot,
        "driver": None if driver is None else {
            "version": driver.version,
            "kernelModuleType": driver.kernel_module_type.value,
            "sha256": driver.sha256,
            "url": driver.download_url,
        },
        "vfio": [gpu.address for gpu in config.gpus_for(GpuUse.VFIO)],
        "nvidia": [gpu.address for gpu in config.nvidia_gpus],
        "gpus": {gpu.address: {"model": gpu.model, "use": gpu.use.value} for gpu in sorted(config.gpus, key=lambda g: g.address)},
        "containers": {
            str(c.vmid): {
                "hostname": c.hostname,
                "gpus": [gpu.address for gpu in config.container_gpus(c.vmid)],
                "devices": ["/dev/nvidia<minor of %s>" % gpu.address for gpu in config.container_gpus(c.vmid)]
                + ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"],
                "userspace": driver.version if driver else None,
            }
            for c in config.containers
        },
    }


class ProxmoxHost(pulumi.ComponentResource):
    def __init__(self, config: StackConfig, private_key: pulumi.Input[str], opts: pulumi.ResourceOptions | None = None):
        name = config.host.name
        super().__init__("gpuhosts:host:ProxmoxHost", name, None, opts)
        plan = plan_host(config)
        connection = connection_args(config.host, private_key)
        child = pulumi.ResourceOptions(parent=self)

        # vfio first: it frees the GPUs meant for nvidia, and the driver's installer loads its module only when
        # there is a GPU left for it to take.
        self.vfio = VfioBinding(f"{name}-vfio-binding", plan.vfio, connection, child)
        reboot_sources = [self.vfio.reboot_required]
        gate: pulumi.Resource = self.vfio.command
        self.driver = None
        if plan.driver is not None:
            self.driver = NvidiaDriver(f"{name}-nvidia-driver", plan.driver, connection, child, depends_on=[gate])
            reboot_sources.append(self.driver.reboot_required)
            gate = self.driver.command

        if plan.reboot is not None:
            reboot = HostReboot(f"{name}-reboot", plan.reboot, config, private_key,
                                triggers=[s.digest for s in (plan.vfio, plan.driver) if s is not None],
                                opts=child, depends_on=[gate])
            gate = reboot.wait

        self.containers: dict[int, ContainerUserspace] = {}
        if plan.uvm is not None:
            passthrough = LxcGpuPassthrough(f"{name}-lxc-gpu-passthrough", plan.uvm, plan.container_devices, connection,
                                            child, depends_on=[gate])
            for vmid, step in plan.container_userspace.items():
                self.containers[vmid] = ContainerUserspace(f"{name}-ct{vmid}-userspace", step, connection, child,
                                                           depends_on=[passthrough.containers[vmid]])

        self.reboot_required = pulumi.Output.all(*reboot_sources).apply(any)
        self.register_outputs({"rebootRequired": self.reboot_required})
