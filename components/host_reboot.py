"""HostReboot: reboots the host when an earlier step left the reboot marker, and waits for it to come back."""

from __future__ import annotations

import pulumi
from pulumi_command import local, remote

from components._command import connection_args
from gpuhosts.config import StackConfig
from gpuhosts.render import Step, render

REBOOT_DELAY_SECONDS = 5
# Long enough for the scheduled reboot to take the SSH server down before the wait dials again.
SETTLE_SECONDS = 45
# Dial attempts while the host boots: 60 × the default 15 s per dial.
DIAL_ERROR_LIMIT = 60


def plan_host_reboot(config: StackConfig) -> tuple[Step, Step]:
    host = config.host.name
    reboot = Step(
        name=f"{host}-reboot",
        create=render("host_reboot/reboot.sh.j2", unit="reboot", delay_seconds=REBOOT_DELAY_SECONDS),
        delete="true",
    )
    wait = Step(name=f"{host}-reboot-wait", create=render("host_reboot/wait.sh.j2", unit="reboot-wait"), delete="true")
    return reboot, wait


class HostReboot(pulumi.ComponentResource):
    def __init__(self, name: str, steps: tuple[Step, Step], config: StackConfig, private_key: pulumi.Input[str],
                 triggers: list[str], opts: pulumi.ResourceOptions | None = None,
                 depends_on: list[pulumi.Resource] | None = None):
        super().__init__("gpuhosts:host:HostReboot", name, None, opts)
        reboot_step, wait_step = steps
        # Replaced whenever a step that can ask for a reboot changes, so the check runs again.
        self.reboot = remote.Command(
            reboot_step.name,
            connection=connection_args(config.host, private_key),
            create=reboot_step.create,
            triggers=triggers,
            add_previous_output_in_env=False,
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends_on or []),
        )
        settle = local.Command(
            f"{config.host.name}-reboot-settle",
            create=self.reboot.stdout.apply(lambda out: f"sleep {SETTLE_SECONDS}" if "rebooting" in (out or "") else "true"),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.wait = remote.Command(
            wait_step.name,
            connection=connection_args(config.host, private_key, dial_error_limit=DIAL_ERROR_LIMIT),
            create=wait_step.create,
            triggers=[self.reboot.stdout],
            add_previous_output_in_env=False,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[settle]),
        )
        self.register_outputs({})
