"""DeployGate: after a service's step changed, run the gate probe (gpuhosts/plans/gate_probe.py) in its container.

The probe waits for /health, sends a smoke request, times decode and reads acceptance from /metrics; it fails the
deployment below the service's `gate:` thresholds. Its measurements become the stack output `services`.
"""

from __future__ import annotations

import json

from gpuhosts.plans.gate_probe import GATE_SCRIPT, gate_settings
from gpuhosts.plans.inference_service import environment_file, secret_variable, venv_path
from gpuhosts.plans.python_env import in_container
from gpuhosts.facts import render_probe
from gpuhosts.render import render
from gpuhosts.services import ServiceConfig
from gpuhosts.units import Unit


def plan_deploy_gate(service: ServiceConfig, service_step: Unit) -> Unit:
    """The gate command of an enabled service. The service step's digest is part of the script, so a changed
    service re-runs the gate and an unchanged one does not."""
    unit = f"ct{service.container}-gate-{service.name}"
    values = dict(unit=unit, vmid=service.container, service=service, service_digest=service_step.digest,
                  venv=venv_path(service), gate_script=GATE_SCRIPT,
                  settings=json.dumps(gate_settings(service), sort_keys=True),
                  env_file=environment_file(service), key_variable=secret_variable(service))
    # A gate measures; it has no state of its own on the host to drift.
    return Unit(key=unit, kind="DeployGate",
                ensure=in_container(unit, service.container, render("container_services/gate.sh.j2", **values)),
                teardown=render("container_services/gate-teardown.sh.j2", unit=unit),
                probe=render_probe(unit, []),
                needs=(service_step.key,))
