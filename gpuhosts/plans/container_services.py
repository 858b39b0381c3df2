"""ContainerServices: the units of a GPU container's inference services and what each truly needs.

* the model store mount (weightsOn: host) comes after the container's devices: both may restart the container;
* each service's PythonEnv and each ModelDownload wait only for the container's last planned restart (a restart
  would cut them off); a download onto the host's model store runs on the host and waits for nothing;
* an InferenceService waits for its environment, its weights, the container's NVIDIA user space, and any stopped
  service it shares GPUs or a port with (sharesWith), which must let go first;
* a DeployGate per enabled service waits for that service;
* a Benchmark waits for every service on its GPUs and their gates (it stops and restarts them), and for the DDTree
  reference's checkout and drafter download when it has one.

In the resource tree each service holds its environment, its unit, its gate and the weights only it reads; each
benchmark its checkout and a drafter only it reads; weights that several read stay with the container.
"""

from __future__ import annotations

from dataclasses import replace

from gpuhosts.benchmarks import BenchmarkConfig
from gpuhosts.plans.benchmark import benchmark_key, patch_text, plan_benchmark, results_dir
from gpuhosts.plans.container_userspace import userspace_key
from gpuhosts.plans.ddtree_reference import plan_ddtree_checkout, plan_ddtree_env
from gpuhosts.plans.engine_install import plan_engine_install
from gpuhosts.plans.gateway import (
    admit_key,
    drain_key,
    gateway_key,
    gateway_name,
    plan_admit,
    plan_drain,
    plan_gateway,
    plan_gateway_env,
)
from gpuhosts.plans.deploy_gate import gate_key, plan_deploy_gate
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
from gpuhosts.units import Group, GroupPath, Report, Unit, within


def container_at(vmid: int) -> GroupPath:
    return (("LxcContainer", f"ct{vmid}"),)


def service_at(service: ServiceConfig) -> GroupPath:
    return container_at(service.container) + (("InferenceServiceStack", service.name),)


def benchmark_at(bench: BenchmarkConfig) -> GroupPath:
    return container_at(bench.container) + (("BenchmarkStack", bench.name),)


def gateway_at(service: ServiceConfig) -> GroupPath:
    return container_at(service.gateway_container) + (("ModelGateway", gateway_name(service)),)


def rollout_after(config: StackConfig, instance: ServiceConfig) -> str | None:
    """What a replica's first step waits for: the previous replica back in the gateway (or past its deploy gate,
    without a gateway), so that a change goes through the replicas one at a time; replica 0 waits for the gateway."""
    family = next(s for s in config.services if s.name == instance.family)
    if instance.replica == 0:
        return gateway_key(family) if family.gateway is not None else None
    previous = family.instances[instance.replica - 1]
    if family.gateway is not None:
        return admit_key(family, previous)
    return gate_key(previous) if previous.enabled else None


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
        units += within(container_at(vmid), [plan_model_store(container, (devices_key(vmid),))])
        last_restart = model_store_key(vmid)
    # Each service's driver, resolved once: its install, its unit and its gate read it.
    drivers = {s.name: driver_for(s.engine) for s in services}
    # The gateways this container runs, before the replicas they front.
    fronted = {s.name: s for s in config.services if s.gateway is not None}
    for family in fronted.values():
        if family.gateway_container == vmid:
            env = replace(plan_gateway_env(family, (last_restart,)), group=gateway_at(family))
            units += [env, replace(plan_gateway(family, (env.key,)), group=gateway_at(family))]
    # A replica's environment waits for its turn in the rollout (its drain, with a gateway): it is rewritten in
    # place under a running engine otherwise.
    first_step: dict[str, tuple[str, ...]] = {}
    for s in services:
        after = rollout_after(config, s)
        first_step[s.name] = (drain_key(fronted[s.family], s),) if s.family in fronted else ((after,) if after else ())
    envs = {s.name: replace(plan_engine_install(s, drivers[s.name], (last_restart, *first_step[s.name])),
                            group=service_at(s))
            for s in services}
    units += envs.values()
    downloads: dict[str, list[str]] = {}
    planned = downloads_for(container, services)
    known = {d.spec.path for d in planned}
    for bench in config.benchmarks_in(vmid):
        drafter = bench.ddtree.drafter if bench.ddtree is not None else None
        if drafter is not None and drafter.path not in known:
            # The reference's own drafter, when no service downloads it already.
            planned.append(Download(drafter, (f"bench:{bench.name}",), bench.ddtree.environment_of or "downloads",
                                    None, {}))
            known.add(drafter.path)
    download_of: dict[str, str] = {}
    for download in planned:
        group = download_at(vmid, download, services, config.benchmarks_in(vmid))
        before = _reader_group(vmid, download, services, config.benchmarks_in(vmid))
        unit = replace(plan_model_download(vmid, download, () if download.host_path else (last_restart,)),
                       group=group, formerly=((None, before),) if before != group else ())
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
        service_units[service.name] = replace(
            plan_inference_service(service, config, tuple(needs), drivers[service.name]), group=service_at(service))
    units += service_units.values()
    gates = {s.name: replace(plan_deploy_gate(s, service_units[s.name], drivers[s.name]), group=service_at(s))
             for s in services if s.enabled}
    units += gates.values()
    for s in services:
        if s.family not in fronted:
            continue
        family, steps = fronted[s.family], (envs[s.name], service_units[s.name])
        after = rollout_after(config, s)
        units += [replace(plan_drain(family, s, steps, (after,) if after else ()), group=service_at(s)),
                  replace(plan_admit(family, s, steps, (gates[s.name].key, gateway_key(family))), group=service_at(s))]
    for bench in config.benchmarks_in(vmid):
        extra: tuple[str, ...] = ()
        if bench.ddtree is not None:
            checkout = plan_ddtree_checkout(vmid, bench, patch_text(bench), (last_restart,))
            units.append(replace(checkout, group=benchmark_at(bench)))
            extra = (checkout.key, download_of[bench.ddtree.drafter.path])
            env = plan_ddtree_env(vmid, bench, (last_restart,))
            if env is not None:
                units.append(replace(env, group=benchmark_at(bench)))
                extra += (env.key,)
        units.append(replace(plan_benchmark(bench, config, service_units, extra), group=benchmark_at(bench)))
    return units


def download_at(vmid: int, download: Download, services: list[ServiceConfig],
                benchmarks: list[BenchmarkConfig]) -> GroupPath:
    """A download read by one service or one benchmark alone belongs to it; one that a service and a benchmark's
    reference both read, or several services, to the container."""
    readers = set(download.services) | {f"bench:{b.name}" for b in benchmarks if b.ddtree is not None
                                        and b.ddtree.drafter is not None and b.ddtree.drafter.path == download.spec.path}
    if len(readers) > 1:
        return container_at(vmid)
    return _reader_group(vmid, download, services, benchmarks)


def _reader_group(vmid: int, download: Download, services: list[ServiceConfig],
                  benchmarks: list[BenchmarkConfig]) -> GroupPath:
    """Where a download stood while only the services that download it counted as its readers."""
    if len(download.services) == 1:
        (reader,) = download.services
        if reader.startswith("bench:"):
            bench = next(b for b in benchmarks if b.name == reader.removeprefix("bench:"))
            return benchmark_at(bench)
        return service_at(next(s for s in services if s.name == reader))
    return container_at(vmid)


def plan_container_groups(config: StackConfig, container: ContainerConfig) -> list[Group]:
    """What a container's services and benchmarks offer to read: where each service listens and what its gate
    measured (a stopped service has no gate), and each benchmark's table and where its files are."""
    vmid = container.vmid
    return [
        *(Group(service_at(s), {"listen": f"{s.bind}:{s.port}", "gate": Report(gate_key(s)) if s.enabled else None})
          for s in config.services_in(vmid)),
        *(Group(benchmark_at(b), {"results": results_dir(b), "table": Report(benchmark_key(b))})
          for b in config.benchmarks_in(vmid)),
    ]
