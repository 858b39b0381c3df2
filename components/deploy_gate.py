"""DeployGate: after a service's step changed, run the gate probe (components/gate_probe.py) in its container.

The probe waits for /health, sends a smoke request, times decode and reads acceptance from /metrics; it fails the
deployment below the service's `gate:` thresholds. Its measurements become the stack output `services`.
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
from pulumi_command import remote

from components._command import step_command
from components.gate_probe import GATE_SCRIPT, gate_settings
from components.inference_service import environment_file, secret_variable, venv_path
from components.python_env import in_container
from gpuhosts.render import Step, render
from gpuhosts.services import ServiceConfig

GATE_MARKER = "GPUHOSTS_GATE "


def plan_deploy_gate(host: str, service: ServiceConfig, service_step: Step) -> Step:
    """The gate command of an enabled service. The service step's digest is part of the script, so a changed
    service re-runs the gate and an unchanged one does not."""
    unit = f"ct{service.container}-gate-{service.name}"
    values = dict(unit=unit, vmid=service.container, service=service, service_digest=service_step.digest,
                  venv=venv_path(service), gate_script=GATE_SCRIPT,
                  settings=json.dumps(gate_settings(service), sort_keys=True),
                  env_file=environment_file(service), key_variable=secret_variable(service))
    return Step(name=f"{host}-{unit}",
                create=in_container(unit, service.container, render("container_services/gate.sh.j2", **values)),
                delete=render("container_services/gate-teardown.sh.j2", unit=unit))


def parse_gate_output(stdout: str | None) -> dict[str, Any] | None:
    """The measurements a gate printed (its GPUHOSTS_GATE line), None when it printed none."""
    for line in (stdout or "").splitlines():
        if line.startswith(GATE_MARKER):
            return json.loads(line[len(GATE_MARKER):])
    return None


class DeployGate(pulumi.ComponentResource):
    """Fails `pulumi up` when the service does not serve or speculative decoding does not pay."""

    def __init__(self, name: str, step: Step, connection: remote.ConnectionArgs,
                 opts: pulumi.ResourceOptions | None = None, depends_on: list[pulumi.Resource] | None = None):
        super().__init__("gpuhosts:service:DeployGate", name, None, opts)
        self.command = step_command(step, connection, self, depends_on or [])
        self.results = self.command.stdout.apply(parse_gate_output)
        self.register_outputs({"results": self.results})
