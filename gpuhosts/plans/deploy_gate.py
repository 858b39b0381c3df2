"""DeployGate: after a service's step changed, run the gate probe (gpuhosts/hostside/gate_probe.py) in its container.

The probe waits for /health, sends a smoke request, times decode and reads acceptance from /metrics; it fails the
deployment below the service's `gate:` thresholds. Its measurements become the stack output `services`.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from typing import Any

from gpuhosts.engines import EngineDriver, driver_for
from gpuhosts.facts import Fact, desired
from gpuhosts.plans.gate_script import GATE_SCRIPT
from gpuhosts.plans.inference_service import environment_file, secret_variable
from gpuhosts.plans.python_env import in_container, probe_in
from gpuhosts.render import render
from gpuhosts.fields import local_address
from gpuhosts.services import ServiceConfig
from gpuhosts.units import Unit


def gate_settings(service: ServiceConfig, driver: EngineDriver | None = None) -> dict[str, Any]:
    """The gate's settings of a service and what its engine's driver says the gate reads (`reasoning_field`,
    `acceptance_metrics`), as JSON-able data (no secret: the key is read on the host)."""
    engine = (driver or driver_for(service.engine)).gate(service)
    host = local_address(service.bind)
    gate = service.gate
    return {
        "reasoning_field": engine["reasoning_field"],
        "acceptance_metrics": engine["acceptance"],
        "admin_endpoint": engine["admin_endpoint"],
        "tool_call": service.tool_call_parser is not None,
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


GATES_DIR = "/var/lib/gpuhosts/gates"
NOT_READ = "not read (the gate script did not run)"


def gate_facts(unit: str, service: ServiceConfig, python: str, settings: str, passed: str,
               env_file: str | None, key_variable: str) -> list[Fact]:
    """What a refresh re-reads of a gate that passed, without measuring again: the service still answers /health,
    still serves the model it gated, and the gate's record names the inputs it passed with. A service that stopped
    answering, or serves another model, is drift of its gate, which `up` runs again."""
    command = [f'"$root"{shlex.quote(python)}', f'"$root"{shlex.quote(GATE_SCRIPT)}', "--recheck",
               shlex.quote(settings)] + ([f'"$root"{shlex.quote(env_file)}', shlex.quote(key_variable)] if env_file
                                         else [])
    setup = (f"gate_recheck=\"$({' '.join(command)} 2>/dev/null)\" || true",)

    def read(field: str) -> str:
        return f'sed -n "s/^{field}: //p" <<<"$gate_recheck" | grep . || echo {shlex.quote(NOT_READ)}'

    record = shlex.quote(f"{GATES_DIR}/{unit}")
    return [Fact(f"health of {service.name}", read("health"), "answers", setup),
            Fact(f"model served by {service.name}", read("model"), service.model_name, setup),
            Fact(f"gate record {GATES_DIR}/{unit}", f'cat "$root"{record} || echo missing', passed)]


def plan_deploy_gate(service: ServiceConfig, service_step: Unit, driver: EngineDriver | None = None) -> Unit:
    """The gate command of an enabled service. The service step's digest is part of the script, so a changed
    service re-runs the gate and an unchanged one does not."""
    driver = driver or driver_for(service.engine)
    unit = gate_key(service)
    settings = json.dumps(gate_settings(service, driver), sort_keys=True)
    # The inputs it passed with: the service's step (a changed service is gated again) and its own settings.
    passed = "passed with inputs sha256:" + hashlib.sha256(f"{service_step.digest}\0{settings}".encode()).hexdigest()[:16]
    values = dict(unit=unit, vmid=service.container, service=service, service_digest=service_step.digest,
                  python=driver.install(service).interpreter, gate_script=GATE_SCRIPT, settings=settings,
                  env_file=environment_file(service), key_variable=secret_variable(service, driver),
                  record=f"{GATES_DIR}/{unit}", passed=passed)
    facts = gate_facts(unit, service, values["python"], settings, passed, values["env_file"], values["key_variable"])
    return Unit(key=unit, kind="DeployGate",
                ensure=in_container(unit, service.container, render("deploy_gate/gate.sh.j2", **values)),
                teardown=in_container(unit, service.container,
                                      render("deploy_gate/gate-teardown.sh.j2", **values), teardown=True),
                probe=probe_in(unit, service.container, facts),
                desired=desired(facts),
                needs=(service_step.key,),
                undoes=f"nothing: the gate of {service.name} only measures")
