"""ContainerServices: a GPU container's inference services, in order — the model store mount (weightsOn: host),
each service's PythonEnv, the ModelDownloads, the InferenceServices, and a DeployGate per enabled service.

A service that is declared stopped and shares GPUs or a port with a running one (sharesWith) is stopped before
that one starts.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_command import remote

from components.deploy_gate import DeployGate, plan_deploy_gate
from components.inference_service import InferenceService, plan_inference_service
from components.model_download import (
    HF_TOKEN,
    Download,
    ModelDownload,
    ModelStore,
    download_slug,
    downloads_for,
    plan_model_download,
    plan_model_store,
)
from components.python_env import PythonEnv, plan_python_env
from gpuhosts.config import ContainerConfig, StackConfig
from gpuhosts.render import Step
from gpuhosts.services import ServiceConfig


@dataclass(frozen=True)
class ContainerServicesPlan:
    vmid: int
    services: tuple[ServiceConfig, ...]
    store: Step | None
    envs: dict[str, Step]
    downloads: tuple[tuple[Download, Step], ...]
    units: dict[str, Step]
    gates: dict[str, Step]

    @property
    def steps(self) -> list[Step]:
        ordered = [self.store] if self.store else []
        ordered += list(self.envs.values()) + [step for _, step in self.downloads]
        ordered += [self.units[s.name] for s in self.start_order] + list(self.gates.values())
        return ordered

    @property
    def start_order(self) -> list[ServiceConfig]:
        """Stopped services first, so that one sharing GPUs or a port has let go before the running one starts."""
        return sorted(self.services, key=lambda s: s.enabled)

    def stopped_before(self, service: ServiceConfig) -> list[str]:
        if not service.enabled:
            return []
        return [other.name for other in self.services if not other.enabled and
                (other.name in service.shares_with or service.name in other.shares_with)]


def plan_container_services(config: StackConfig, container: ContainerConfig) -> ContainerServicesPlan | None:
    services = config.services_in(container.vmid)
    if not services:
        return None
    host = config.host.name
    needs_store = container.model_store is not None and any(s.weights_on.value == "host" for s in services)
    units = {s.name: plan_inference_service(host, s, config) for s in services}
    return ContainerServicesPlan(
        vmid=container.vmid,
        services=tuple(services),
        store=plan_model_store(host, container) if needs_store else None,
        envs={s.name: plan_python_env(host, s) for s in services},
        downloads=tuple((d, plan_model_download(host, container.vmid, d)) for d in downloads_for(container, services)),
        units=units,
        gates={s.name: plan_deploy_gate(host, s, units[s.name]) for s in services if s.enabled},
    )


class ContainerServices(pulumi.ComponentResource):
    def __init__(self, name: str, plan: ContainerServicesPlan, connection: remote.ConnectionArgs,
                 secrets: dict[str, pulumi.Input[str]], opts: pulumi.ResourceOptions | None = None,
                 depends_on: list[pulumi.Resource] | None = None):
        super().__init__("gpuhosts:service:ContainerServices", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        after_container = list(depends_on or [])
        store = ModelStore(f"{name}-model-store", plan.store, connection, child, after_container) if plan.store else None

        self.envs = {service: PythonEnv(f"{name}-env-{service}", step, connection, child, after_container)
                     for service, step in plan.envs.items()}
        downloads: dict[str, list[pulumi.Resource]] = {}
        for download, step in plan.downloads:
            waits = [self.envs[download.env].command] + ([store.command] if store else [])
            token = secrets.get(HF_TOKEN) if download.gated else None
            resource = ModelDownload(f"{name}-model-{download_slug(download)}", step, connection, token, child,
                                     waits)
            for service in download.services:
                downloads.setdefault(service, []).append(resource.command)

        self.units: dict[str, InferenceService] = {}
        for service in plan.start_order:
            waits = [self.envs[service.name].command, *downloads.get(service.name, [])]
            waits += [self.units[other].command for other in plan.stopped_before(service)]
            key = secrets.get(service.api_key_secret) if service.api_key_secret else None
            self.units[service.name] = InferenceService(f"{name}-{service.name}", plan.units[service.name], connection,
                                                        key, child, waits)
        self.gates = {service: DeployGate(f"{name}-gate-{service}", step, connection, child,
                                          [self.units[service].command])
                      for service, step in plan.gates.items()}
        self.results = {service: gate.results for service, gate in self.gates.items()}
        self.register_outputs({"gates": self.results})
