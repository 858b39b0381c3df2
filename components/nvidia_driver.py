"""NvidiaDriver: the exact NVIDIA driver on the host — headers, DKMS, nouveau off, persistence daemon."""

from __future__ import annotations

import pulumi
from pulumi_command import remote

from components._command import reboot_required, step_command
from gpuhosts.config import StackConfig
from gpuhosts.render import HostFile, Step, render

UNIT = "nvidia-driver"
PERSISTENCED_UNIT = "gpuhosts-nvidia-persistenced.service"


def render_files(config: StackConfig) -> dict[str, HostFile]:
    nvidia = config.nvidia
    return {
        "nouveau_blacklist": HostFile("/etc/modprobe.d/gpuhosts-nouveau.conf",
                                      render("nvidia_driver/nouveau-blacklist.conf.j2", version=nvidia.version)),
        "persistenced_unit": HostFile(f"/etc/systemd/system/{PERSISTENCED_UNIT}",
                                      render("nvidia_driver/nvidia-persistenced.service.j2", version=nvidia.version)),
    }


def plan_nvidia_driver(config: StackConfig) -> Step:
    files = render_files(config)
    values = dict(unit=UNIT, nvidia=config.nvidia, persistenced_unit_name=PERSISTENCED_UNIT,
                  nvidia_gpus=[gpu.address for gpu in config.nvidia_gpus], **files)
    return Step(
        name=f"{config.host.name}-{UNIT}",
        create=render("nvidia_driver/ensure.sh.j2", **values),
        delete=render("nvidia_driver/teardown.sh.j2", **values),
        files=tuple(files.values()),
    )


class NvidiaDriver(pulumi.ComponentResource):
    def __init__(self, name: str, step: Step, connection: remote.ConnectionArgs,
                 opts: pulumi.ResourceOptions | None = None, depends_on: list[pulumi.Resource] | None = None):
        super().__init__("gpuhosts:host:NvidiaDriver", name, None, opts)
        self.command = step_command(step, connection, self, depends_on or [])
        self.reboot_required = reboot_required(self.command)
        self.register_outputs({"rebootRequired": self.reboot_required})
