"""ProxmoxHost: the parent of a Proxmox VE host's GPU units, and the pure plan of that host."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components._command import connection_args
from components.container_services import ContainerServices, ContainerServicesPlan, plan_container_services
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
    container_services: dict[int, ContainerServicesPlan]

    @property
    def steps(self) -> list[Step]:
        ordered: list[Step | None] = [self.vfio, self.driver, *(self.reboot or ()), self.uvm]
        for vmid in sorted(self.container_devices):
            ordered += [self.container_devices[vmid], self.container_userspace[vmid]]
            if vmid in self.container_services:
                ordered += self.container_services[vmid].steps
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
        container_services={c.vmid: plan for c in containers if (plan := plan_container_services(config, c))},
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
                "modelStore": None if c.model_store is None else {"hostPath": c.model_store.host_path,
                                                                  "path": c.model_store.path},
                "services": {service.name: summarize_service(service, config) for service in config.services_in(c.vmid)},
            }
            for c in config.containers
        },
    }


def summarize_service(service, config: StackConfig) -> dict:
    """A service as a reviewer checks it: the derived command line and environment, not the settings."""
    from components.drafter_config import target_layer_ids
    from components.inference_service import engine_args, engine_environment, environment_file, venv_path
    from components.gate_probe import gate_settings
    from components.python_env import requirement
    from gpuhosts.compat import model_facts

    drafter = service.speculative.drafter
    summary = {
        "enabled": service.enabled,
        "engine": requirement(service),
        "unit": service.unit_name,
        "listen": f"{service.bind}:{service.port}",
        "gpus": list(service.gpus),
        "venv": venv_path(service),
        "argv": engine_args(service),
        "environment": engine_environment(service, config),
        "apiKey": None if service.api_key_secret is None else
        f"gpuhosts:{service.api_key_secret} in {environment_file(service)} (0600)",
        "weights": {spec.path: f"{spec.repo}@{spec.revision}" + (" (gated: gpuhosts:hfToken)" if getattr(spec, "gated", False) else "")
                    for spec in (service.model, drafter) if spec is not None},
        "weightsOn": service.weights_on.value,
        "sharesWith": list(service.shares_with),
        "gate": {k: v for k, v in gate_settings(service).items() if k != "base_url"} if service.enabled else None,
    }
    if drafter is not None and service.speculative.method.value == "dflash":
        target = service.model.num_layers or model_facts(service.model.repo).num_layers
        layers = drafter.num_layers or model_facts(drafter.repo).num_layers
        summary["drafterTargetLayerIds"] = list(drafter.target_layer_ids or
                                                (target_layer_ids(target, layers) if target and layers else []))
    return summary


class ProxmoxHost(pulumi.ComponentResource):
    def __init__(self, config: StackConfig, private_key: pulumi.Input[str],
                 secrets: dict[str, pulumi.Input[str]] | None = None, opts: pulumi.ResourceOptions | None = None):
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

        gates: dict[str, pulumi.Output] = {}
        for vmid, services in plan.container_services.items():
            unit = ContainerServices(f"{name}-ct{vmid}-services", services, connection, secrets or {}, child,
                                     depends_on=[self.containers[vmid].command])
            gates.update(unit.results)
        # Per service: where it listens and, for a running one, what its deploy gate measured.
        self.service_outputs = {
            service.name: {
                "container": service.container, "enabled": service.enabled, "port": service.port,
                "unit": service.unit_name, "gate": gates.get(service.name),
            }
            for service in config.services
        }

        self.reboot_required = pulumi.Output.all(*reboot_sources).apply(any)
        self.register_outputs({"rebootRequired": self.reboot_required, "services": self.service_outputs})
