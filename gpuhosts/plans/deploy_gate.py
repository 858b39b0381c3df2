"""DeployGate: after a service's step changed, run the gate probe (gpuhosts/hostside/gate_probe.py) in its container.

The probe waits for /health, sends a smoke request, times decode and reads acceptance from /metrics; it fails the
deployment below the service's `gate:` thresholds. Its measurements become the stack output `services`.
"""

from __future__ import annotations

import json
from typing import Any

from gpuhosts.engines import EngineDriver, driver_for
from gpuhosts.facts import render_probe
from gpuhosts.plans.gate_script import GATE_SCRIPT
from gpuhosts.plans.inference_service import environment_file, secret_variable
from gpuhosts.plans.python_env import in_container
from gpuhosts.render import render
from gpuhosts.services import ServiceConfig
from gpuhosts.units import Unit


def gate_settings(service: ServiceConfig, driver: EngineDriver | None = None) -> dict[str, Any]:
    """The gate's settings of a service and what its engine's driver says the gate reads (`reasoning_field`,
    `acceptance_metrics`), as JSON-able data (no secret: the key is read on the host)."""
    engine = (driver or driver_for(service.engine)).gate(service)
    host = "127.0.0.1" if service.bind in ("0.0.0.0", "::") else service.bind
    gate = service.gate
    return {
        "reasoning_field": engine["reasoning_field"],
        "acceptance_metrics": engine["acceptance"],
        "base_url": f"http://{host}:{service.port}",
        "model": service.model_name,
        "engine": service.engine.name,
        "speculative": service.speculative.method.value != "none",
        "min_acceptance_length": gate.min_acceptance_length,
        "min_acceptance_rate": gate.min_acceptance_rate,
        "min_decode_tokens_per_s": gate.min_decode_tokens_per_s,
        "max_tokens": gate.max_tokens,
        "ready_timeout_s": gate.ready_timeout_s,
    }


def gate_command(service: ServiceConfig, driver: EngineDriver | None = None) -> list[str]:
    """How the host runs the gate of one service (inside its container, with the Python of its engine's install):
    no secret in it."""
    driver = driver or driver_for(service.engine)
    command = [driver.install(service).interpreter, GATE_SCRIPT,
               json.dumps(gate_settings(service, driver), sort_keys=True)]
    env_file = environment_file(service)
    if env_file:
        command += [env_file, secret_variable(service, driver)]
    return command


def gate_key(service: ServiceConfig) -> str:
    return f"ct{service.container}-gate-{service.name}"


def plan_deploy_gate(service: ServiceConfig, service_step: Unit, driver: EngineDriver | None = None) -> Unit:
    """The gate command of an enabled service. The service step's digest is part of the script, so a changed
    service re-runs the gate and an unchanged one does not."""
    driver = driver or driver_for(service.engine)
    unit = gate_key(service)
    values = dict(unit=unit, vmid=service.container, service=service, service_digest=service_step.digest,
                  python=driver.install(service).interpreter, gate_script=GATE_SCRIPT,
                  settings=json.dumps(gate_settings(service, driver), sort_keys=True),
                  env_file=environment_file(service), key_variable=secret_variable(service, driver))
    # A gate measures; it has no state of its own on the host to drift.
    return Unit(key=unit, kind="DeployGate",
                ensure=in_container(unit, service.container, render("container_services/gate.sh.j2", **values)),
                teardown=render("container_services/gate-teardown.sh.j2", unit=unit),
                probe=render_probe(unit, []),
                needs=(service_step.key,),
                undoes=f"nothing: the gate of {service.name} only measures")
