"""ContainerServices: the units of a GPU container's inference services and what each truly needs.

* the model store mount (weightsOn: host) comes after the container's devices: both may restart the container;
* each service's PythonEnv and each ModelDownload wait only for the container's last planned restart (a restart
  would cut them off); a download onto the host's model store runs on the host and waits for nothing;
* an InferenceService waits for its environment, its weights, the container's NVIDIA user space, and any stopped
  service it shares GPUs or a port with (sharesWith), which must let go first;
* a DeployGate per enabled service waits for that service;
* a Benchmark waits for every service on its GPUs and their gates (it stops and restarts them), and for the DDTree
  reference's checkout and drafter download when it has one.
"""

from __future__ import annotations

from gpuhosts.plans.benchmark import patch_text, plan_benchmark
from gpuhosts.plans.container_userspace import userspace_key
from gpuhosts.plans.ddtree_reference import plan_ddtree_checkout
from gpuhosts.plans.engine_install import plan_engine_install
from gpuhosts.plans.deploy_gate import plan_deploy_gate
from gpuhosts.plans.inference_service import plan_inference_service, service_key
from gpuhosts.plans.lxc_gpu_passthrough import devices_key
from gpuhosts.plans.model_download import (
    Download,
    downloads_for,
    model_store_key,
    plan_model_download,
    plan_model_store,
)
from gpuhosts.config import ContainerConfig, StackConfig
from gpuhosts.engines import driver_for
from gpuhosts.services import ServiceConfig, WeightsOn
from gpuhosts.units import Unit


def stopped_before(services: list[ServiceConfig], service: ServiceConfig) -> list[ServiceConfig]:
    """The stopped services that share GPUs or a port with `service` (a running one)."""
    if not service.enabled:
        return []
    return [other for other in services if not other.enabled and
            (other.name in service.shares_with or service.name in other.shares_with)]


def plan_container_services(config: StackConfig, container: ContainerConfig) -> list[Unit]:
    services = config.services_in(container.vmid)
    if not services:
        return []
    vmid = container.vmid
    units: list[Unit] = []
    last_restart = devices_key(vmid)
    needs_store = container.model_store is not None and any(s.weights_on is WeightsOn.HOST for s in services)
    if needs_store:
        units.append(plan_model_store(container, (devices_key(vmid),)))
        last_restart = model_store_key(vmid)
    # Each service's driver, resolved once: its install, its unit and its gate read it.
    drivers = {s.name: driver_for(s.engine) for s in services}
    envs = {s.name: plan_engine_install(s, drivers[s.name], (last_restart,)) for s in services}
    units += envs.values()
    downloads: dict[str, list[str]] = {}
    planned = downloads_for(container, services)
    known = {d.spec.path for d in planned}
    for bench in config.benchmarks_in(vmid):
        drafter = bench.ddtree.drafter if bench.ddtree is not None else None
        if drafter is not None and drafter.path not in known:
            # The reference's own drafter, when no service downloads it already.
            planned.append(Download(drafter, (f"bench:{bench.name}",), bench.ddtree.environment_of, None, {}))
            known.add(drafter.path)
    download_of: dict[str, str] = {}
    for download in planned:
        unit = plan_model_download(vmid, download, () if download.host_path else (last_restart,))
        units.append(unit)
        download_of[download.spec.path] = unit.key
        for name in download.services:
            downloads.setdefault(name, []).append(unit.key)
    service_units: dict[str, Unit] = {}
    # Stopped services first, so that the order of declaration never puts a running one before its rival stops.
    for service in sorted(services, key=lambda s: s.enabled):
        needs = [envs[service.name].key, *downloads.get(service.name, []), userspace_key(vmid)]
        if needs_store and service.weights_on is WeightsOn.HOST:
            needs.append(model_store_key(vmid))
        needs += [service_key(other) for other in stopped_before(services, service)]
        service_units[service.name] = plan_inference_service(service, config, tuple(needs), drivers[service.name])
    units += service_units.values()
    units += [plan_deploy_gate(s, service_units[s.name], drivers[s.name]) for s in services if s.enabled]
    for bench in config.benchmarks_in(vmid):
        extra: tuple[str, ...] = ()
        if bench.ddtree is not None:
            checkout = plan_ddtree_checkout(vmid, bench, patch_text(bench), (last_restart,))
            units.append(checkout)
            extra = (checkout.key, download_of[bench.ddtree.drafter.path])
        units.append(plan_benchmark(bench, config, service_units, extra))
    return units
