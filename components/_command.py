"""The one way gpuhosts turns a rendered Step into a pulumi-command resource."""

from __future__ import annotations

from typing import Sequence

import pulumi
from pulumi_command import remote

from gpuhosts.config import HostConfig
from gpuhosts.render import Step

REBOOT_MARKER = "reboot required"


def connection_args(host: HostConfig, private_key: pulumi.Input[str], *, dial_error_limit: int | None = None) -> remote.ConnectionArgs:
    ssh = host.ssh
    return remote.ConnectionArgs(
        host=ssh.host,
        port=ssh.port,
        user=ssh.user,
        private_key=private_key,
        # Without host_key pulumi-command does not check the host at all; config validation demands one.
        host_key=ssh.host_key,
        dial_error_limit=dial_error_limit,
    )


def step_command(step: Step, connection: remote.ConnectionArgs, parent: pulumi.Resource,
                 depends_on: Sequence[pulumi.Resource] = (), stdin: pulumi.Input[str] | None = None) -> remote.Command:
    """create = the idempotent ensure script (re-run on any change of it); delete = its teardown, from state.

    `stdin` carries the step's secret: a failed command's error repeats the whole command string, never its stdin.
    """
    if (stdin is None) != (step.stdin_secret is None):
        raise ValueError(f"{step.name}: expects {step.stdin_secret or 'no secret'} on stdin")
    return remote.Command(
        step.name,
        connection=connection,
        create=step.create,
        delete=step.delete,
        # Environment would travel as SSH setenv, which sshd refuses without AcceptEnv.
        add_previous_output_in_env=False,
        stdin=stdin,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on)),
    )


def reboot_required(command: remote.Command) -> pulumi.Output[bool]:
    return command.stdout.apply(lambda out: REBOOT_MARKER in (out or ""))
