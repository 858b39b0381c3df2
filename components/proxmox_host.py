"""ProxmoxHost: the parent of a Proxmox VE host's units; the plan itself is gpuhosts.plans.proxmox_host."""

from __future__ import annotations

import pulumi

from components.host_units import materialize, target_of
from gpuhosts.config import StackConfig
from gpuhosts.plans.benchmark import benchmark_key, results_dir
from gpuhosts.plans.deploy_gate import gate_key
from gpuhosts.plans.proxmox_host import plan_host


class ProxmoxHost(pulumi.ComponentResource):
    def __init__(self, config: StackConfig, secrets: dict[str, pulumi.Input[str]] | None = None,
                 opts: pulumi.ResourceOptions | None = None):
        name = config.host.name
        super().__init__("gpuhosts:host:ProxmoxHost", name, None, opts)
        graph = plan_host(config)
        self.units = materialize(graph, self, target_of(config.host.ssh), secrets or {})
        self.reboot_required = pulumi.Output.all(*(u.rebootRequired for u in self.units.values())).apply(
            lambda flags: any(bool(flag) for flag in flags))
        gates = {s.name: self.units[gate_key(s)].report for s in config.services if gate_key(s) in self.units}
        # Per service: where it listens and, for a running one, what its deploy gate measured.
        self.service_outputs = {
            service.name: {
                "container": service.container, "enabled": service.enabled, "port": service.port,
                "unit": service.unit_name, "gate": gates.get(service.name),
            }
            for service in config.services
        }
        # Per benchmark: the table of its last run (the report of its unit), and where the files are.
        self.benchmark_outputs = {
            bench.name: {"container": bench.container, "results": results_dir(bench),
                         "table": self.units[benchmark_key(bench)].report}
            for bench in config.benchmarks
        }
        self.register_outputs({"rebootRequired": self.reboot_required, "services": self.service_outputs,
                               "benchmarks": self.benchmark_outputs})
