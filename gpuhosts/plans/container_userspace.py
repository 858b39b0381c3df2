"""ContainerUserspace: the host's own `.run` with --no-kernel-modules inside a container, checked equal to the host module."""

from __future__ import annotations

from gpuhosts.config import ContainerConfig, StackConfig
from gpuhosts.facts import Fact, desired, render_probe
from gpuhosts.render import render
from gpuhosts.units import Unit


def userspace_key(vmid: int) -> str:
    return f"ct{vmid}-nvidia-userspace"


def plan_container_userspace(config: StackConfig, container: ContainerConfig, needs: tuple[str, ...]) -> Unit:
    unit = userspace_key(container.vmid)
    version = config.nvidia.version
    values = dict(
        unit=unit,
        vmid=container.vmid,
        allow_restart=container.allow_restart,
        nvidia=config.nvidia,
        gpu_count=len(config.container_gpus(container.vmid)),
    )
    # NVML refuses a user space that differs from the loaded module by as much as a patch level.
    host_facts = [Fact("host module", "module_version", version)]
    container_facts = [Fact(f"user space in ct{container.vmid}", "userspace_version", version)]
    return Unit(
        key=unit,
        kind="ContainerUserspace",
        ensure=render("container_userspace/ensure.sh.j2", **values),
        teardown=render("container_userspace/teardown.sh.j2", **values),
        probe=render_probe(unit, host_facts, vmid=container.vmid, container_facts=container_facts),
        desired=desired(host_facts + container_facts),
        needs=needs,
        undoes=f"NVIDIA user space {version} uninstalled from CT {container.vmid} (only if gpuhosts installed it)",
    )
