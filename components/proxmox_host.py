"""ProxmoxHost: the root of a Proxmox VE host's resource tree; the plan itself is gpuhosts.plans.proxmox_host."""

from __future__ import annotations

import pulumi

from components.host_units import materialize, target_of
from gpuhosts.config import GpuConfig, StackConfig
from gpuhosts.plans.container_services import benchmark_at, service_at
from gpuhosts.plans.proxmox_host import plan_host


class Gpu(pulumi.ComponentResource):
    """One GPU of the host, where `pulumi preview` shows the hardware: its address, its model, and where it goes.
    An entry of the state alone: the units that bind it (vfio-binding, the driver, the container's passthrough)
    act on it."""

    address: pulumi.Output[str]
    model: pulumi.Output[str]
    use: pulumi.Output[str]         # vfio, host or container
    goesTo: pulumi.Output[str]      # vfio-pci (for VMs), the host's nvidia driver, or CT <vmid>

    def __init__(self, name: str, gpu: GpuConfig, opts: pulumi.ResourceOptions):
        super().__init__("gpuhosts:host:Gpu", name, None, opts)
        goes_to = {"vfio": "vfio-pci (for VMs)", "host": "the host's nvidia driver"}.get(
            gpu.use.value, f"CT {gpu.container}")
        outputs = {"address": gpu.address, "model": gpu.model, "use": gpu.use.value, "goesTo": goes_to}
        for key, value in outputs.items():
            setattr(self, key, pulumi.Output.from_input(value))
        self.register_outputs(outputs)


class ProxmoxHost(pulumi.ComponentResource):
    def __init__(self, config: StackConfig, secrets: dict[str, pulumi.Input[str]] | None = None,
                 opts: pulumi.ResourceOptions | None = None, *, prefix: str = "", adopt_one_host: bool = False):
        """`prefix` begins the names of the host's resources in a stack of several hosts (gpuhosts/fleet.py);
        `adopt_one_host` gives them aliases to the names they had when the stack held this host alone."""
        name = config.host.name
        super().__init__("gpuhosts:host:ProxmoxHost", name, None, opts)
        graph = plan_host(config)
        self.gpus = {gpu.address: Gpu(prefix + gpu.address, gpu, pulumi.ResourceOptions(
            parent=self, aliases=[pulumi.Alias(name=gpu.address)] if prefix and adopt_one_host else []))
            for gpu in config.gpus}
        self.units, self.groups = materialize(graph, self, "host", target_of(config.host.ssh), secrets or {},
                                              prefix, adopt_one_host, config.host.ssh.operation_timeouts)
        self.reboot_required = pulumi.Output.all(*(u.rebootRequired for u in self.units.values())).apply(
            lambda flags: any(bool(flag) for flag in flags))
        # Per service: where it listens and, for a running one, what its deploy gate measured the last time it
        # passed, with when. Pulumi writes stack outputs only when a whole update succeeds, and a gate that fails
        # fails its update, so after a failed gate `pulumi stack output` still holds the earlier pass: the name and
        # the time say so, rather than a bare `gate` that would read as the verdict on what was just deployed.
        # A service in a container without GPUs has no units, so no component: it is listed all the same.
        stacks = {service.name: self.groups.get(service_at(service)) for service in config.services}
        self.service_outputs = {
            service.name: {
                "container": service.container, "enabled": service.enabled, "port": service.port,
                "unit": service.unit_name, "listen": getattr(stacks[service.name], "listen", None),
                "lastPassedGate": getattr(stacks[service.name], "gate", None),
            }
            for service in config.services
        }
        # Per benchmark: the table of its last run (the report of its unit), and where the files are.
        self.benchmark_outputs = {
            bench.name: {"container": bench.container, "results": self.groups[benchmark_at(bench)].results,
                         "table": self.groups[benchmark_at(bench)].table}
            for bench in config.benchmarks
        }
        self.register_outputs({"rebootRequired": self.reboot_required, "services": self.service_outputs,
                               "benchmarks": self.benchmark_outputs})
