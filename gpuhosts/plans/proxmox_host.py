"""The pure plan of a Proxmox VE host as a unit graph, and its summary; components/proxmox_host.py materialises it."""

from __future__ import annotations
from gpuhosts.compat_data import model_facts
from gpuhosts.engines import driver_for
from gpuhosts.plans.benchmark import summarize_benchmark
from gpuhosts.plans.container_services import container_at, plan_container_groups, plan_container_services
from gpuhosts.plans.deploy_gate import gate_settings
from gpuhosts.hostside.drafter_config import target_layer_ids
from gpuhosts.plans.inference_service import engine_args, engine_environment, environment_file, venv_path
from gpuhosts.plans.container_userspace import plan_container_userspace
from gpuhosts.plans.host_reboot import plan_host_reboot
from gpuhosts.plans.monitoring_files import plan_monitoring
from gpuhosts.plans.lxc_gpu_passthrough import (UVM_AT_BOOT, container_nodes, devices_key, plan_container_devices,
                                                plan_uvm_at_boot)
from gpuhosts.plans.nvidia_driver import UNIT as DRIVER, plan_nvidia_driver
from gpuhosts.plans.vfio_binding import UNIT as VFIO, plan_vfio_binding
from gpuhosts.config import GpuUse, StackConfig
from gpuhosts.observability import watch_proxmox
from gpuhosts.units import Group, Unit, UnitGraph, within


def plan_host(config: StackConfig) -> UnitGraph:
    """Every unit the host receives and what each needs; the components and the offline plan both read it."""
    # vfio first: it frees the GPUs meant for nvidia, and the driver's installer loads its module only when there
    # is a GPU left for it to take.
    units: list[Unit] = [plan_vfio_binding(config)]
    gpu_ready = host_ready = VFIO
    if config.nvidia_gpus:
        units.append(plan_nvidia_driver(config, (VFIO,)))
        gpu_ready = DRIVER
    if config.host.allow_reboot:
        units.append(plan_host_reboot(config, tuple(u.key for u in units)))
        gpu_ready = host_ready = units[-1].key
    containers = [c for c in config.containers if config.container_gpus(c.vmid)]
    if containers:
        units.append(plan_uvm_at_boot(config, (gpu_ready,)))
    groups: list[Group] = []
    for container in containers:
        # The host's side of a container's devices is the container's too: the tree shows them under it.
        units += within(container_at(container.vmid), [
            plan_container_devices(config, container, (UVM_AT_BOOT,)),
            plan_container_userspace(config, container, (devices_key(container.vmid),))])
        units += plan_container_services(config, container)
        groups += plan_container_groups(config, container)
    if config.monitoring is not None:
        # After the host's first unit, whose refusal leaves the host untouched, and after a reboot, which would cut
        # an install short; DCGM waits for the driver (and the reboot that loads it).
        units += plan_monitoring(watch_proxmox(config, config.host.name, config.monitoring), (host_ready,),
                                 (gpu_ready,) if config.nvidia is not None and config.nvidia_gpus else None)
    return UnitGraph(units, groups)


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
                + list(container_nodes(c)),
                "userspace": driver.version if driver else None,
                "modelStore": None if c.model_store is None else {"hostPath": c.model_store.host_path,
                                                                  "path": c.model_store.path},
                "services": {service.name: summarize_service(service, config) for service in config.services_in(c.vmid)},
                "benchmarks": {bench.name: summarize_benchmark(bench) for bench in config.benchmarks_in(c.vmid)},
            }
            for c in config.containers
        },
    }


def summarize_service(service, config: StackConfig) -> dict:
    """A service as a reviewer checks it: the derived command line and environment, not the settings."""
    drafter = service.speculative.drafter
    driver = driver_for(service.engine)
    summary = {
        "enabled": service.enabled,
        "engine": driver.install(service).requirement,
        "unit": service.unit_name,
        "listen": f"{service.bind}:{service.port}",
        "gpus": list(service.gpus),
        "venv": venv_path(service),
        "argv": engine_args(service, driver),
        "environment": engine_environment(service, config, driver),
        "apiKey": None if service.api_key_secret is None else
        f"gpuhosts:{service.api_key_secret} in {environment_file(service)} (0600)",
        "weights": {spec.path: f"{spec.repo}@{spec.revision}" + (" (gated: gpuhosts:hfToken)" if getattr(spec, "gated", False) else "")
                    for spec in (service.model, drafter) if spec is not None},
        "weightsOn": service.weights_on.value,
        "sharesWith": list(service.shares_with),
        "gate": {k: v for k, v in gate_settings(service, driver).items() if k != "base_url"} if service.enabled else None,
    }
    if drafter is not None and service.speculative.method.value == "dflash":
        target = service.model.num_layers or model_facts(service.model.repo).num_layers
        layers = drafter.num_layers or model_facts(drafter.repo).num_layers
        summary["drafterTargetLayerIds"] = list(drafter.target_layer_ids or
                                                (target_layer_ids(target, layers) if target and layers else []))
    return summary
