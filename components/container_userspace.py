"""ContainerUserspace: the host's own `.run` with --no-kernel-modules inside a container, checked equal to the host module."""

from __future__ import annotations

import pulumi
from pulumi_command import remote

from components._command import step_command
from gpuhosts.config import ContainerConfig, StackConfig
from gpuhosts.render import Step, render


def plan_container_userspace(config: StackConfig, container: ContainerConfig) -> Step:
    unit = f"ct{container.vmid}-nvidia-userspace"
    values = dict(
        unit=unit,
        vmid=container.vmid,
        allow_restart=container.allow_restart,
        nvidia=config.nvidia,
        gpu_count=len(config.container_gpus(container.vmid)),
    )
    return Step(
        name=f"{config.host.name}-{unit}",
        create=render("container_userspace/ensure.sh.j2", **values),
        delete=render("container_userspace/teardown.sh.j2", **values),
    )


class ContainerUserspace(pulumi.ComponentResource):
    def __init__(self, name: str, step: Step, connection: remote.ConnectionArgs,
                 opts: pulumi.ResourceOptions | None = None, depends_on: list[pulumi.Resource] | None = None):
        super().__init__("gpuhosts:host:ContainerUserspace", name, None, opts)
        self.command = step_command(step, connection, self, depends_on or [])
        self.register_outputs({"stdout": self.command.stdout})
