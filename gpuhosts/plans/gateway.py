"""Gateway: smg, the Shepherd Model Gateway, in front of a service's replicas, and each replica's place in it.

Why smg (docs/architecture.md, "Replicas and the gateway"): it is the router SGLang's own grew into, engine-agnostic
(SGLang and vLLM workers behind one OpenAI endpoint), manages its workers at run time through `/workers` with a
drain before each removal, and its wheel needs no web framework (sglang-router 0.3.2 and vllm-router 0.1.17 pull in
FastAPI, uvicorn and aiohttp). The Rust router runs from the wheel's Python extension, started through smg's own
argparse launcher (smg/launch_router.py `parse_router_args`), which is also what the rendered command line is
checked with (tests/verify_gateway).

Units, all in the gateway's container:

* `ct<G>-env-gateway-<service>` — a PythonEnv with the committed lock of `smg==<version>`;
* `ct<G>-gateway-<service>` — the systemd unit `gpuhosts-gateway-<service>.service`; its workers are the
  service's replicas (`--worker-urls`, derived), its policy and health checks the stack's, its API key only in a
  0600 EnvironmentFile that the launcher reads;
* per replica `ct<G>-drain-<replica>` before the replica's environment and unit, and `ct<G>-admit-<replica>` after
  its deploy gate: the rollout's steps (gpuhosts/plans/container_services.py chains them one replica after the
  other). Each carries the digests of its replica's steps, so it runs exactly when the replica is about to change.
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass
from pathlib import Path

from gpuhosts.envspec import EnvSpec
from gpuhosts.facts import Fact, desired, files_facts, secret_file_fact, systemd_unit_facts
from gpuhosts.fields import local_address
from gpuhosts.hostside import gateway_workers
from gpuhosts.paths import LIB_DIR, SERVICE_ROOT
from gpuhosts.plans.python_env import in_container, plan_env, probe_in
from gpuhosts.render import HostFile, render
from gpuhosts.services import ROUTER, ServiceConfig
from gpuhosts.units import Unit

KEY_VARIABLE = "GPUHOSTS_GATEWAY_API_KEY"
LAUNCHER = f"{LIB_DIR}/smg-launch.py"
WORKERS_SCRIPT = f"{LIB_DIR}/gateway-workers.py"
ENV_DIR = "/etc/gpuhosts"


def gateway_name(service: ServiceConfig) -> str:
    return f"gateway-{service.name}"


def gateway_unit_name(service: ServiceConfig) -> str:
    return f"gpuhosts-{gateway_name(service)}.service"


def gateway_env(service: ServiceConfig) -> EnvSpec:
    gateway = service.gateway
    return EnvSpec(name=gateway_name(service), requirement=f"{ROUTER}=={gateway.version}", package=ROUTER,
                   release=gateway.version, from_git=False, python=gateway.python, needs_hf=False)


def environment_file(service: ServiceConfig) -> str:
    return f"{ENV_DIR}/{gateway_name(service)}.env"


def api_key_secret(service: ServiceConfig) -> str:
    return service.gateway.api_key_secret or service.api_key_secret


def worker_url(service: ServiceConfig, instance: ServiceConfig) -> str:
    """Where the gateway reaches `instance`: over loopback in its own container, else at the replica's address."""
    if instance.container == service.gateway_container and instance.reach_address is None:
        host = local_address(instance.bind)
    else:
        host = instance.reach_address or instance.bind
    return f"http://{host}:{instance.port}"


def worker_urls(service: ServiceConfig) -> list[str]:
    return [worker_url(service, instance) for instance in service.instances]


def gateway_base_url(service: ServiceConfig) -> str:
    bind = service.gateway.bind
    return f"http://{local_address(bind)}:{service.gateway.port}"


def router_flags(service: ServiceConfig) -> list[str]:
    """smg's flags (smg 1.13.0 router_args.py `add_cli_args`), the workers derived from the replicas."""
    gateway, health = service.gateway, service.gateway.health
    return ["--host", gateway.bind, "--port", str(gateway.port),
            "--worker-urls", *worker_urls(service),
            "--policy", gateway.policy.value,
            "--health-check-endpoint", health.endpoint,
            "--health-check-interval-secs", str(health.interval_s),
            "--health-check-timeout-secs", str(health.timeout_s),
            "--health-failure-threshold", str(health.failure_threshold),
            "--health-success-threshold", str(health.success_threshold)]


def gateway_argv(service: ServiceConfig) -> list[str]:
    return [gateway_env(service).interpreter, LAUNCHER, *router_flags(service)]


def gateway_key(service: ServiceConfig) -> str:
    return f"ct{service.gateway_container}-gateway-{service.name}"


def gateway_env_key(service: ServiceConfig) -> str:
    return f"ct{service.gateway_container}-env-{gateway_name(service)}"


def drain_key(service: ServiceConfig, instance: ServiceConfig) -> str:
    return f"ct{service.gateway_container}-drain-{instance.name}"


def admit_key(service: ServiceConfig, instance: ServiceConfig) -> str:
    return f"ct{service.gateway_container}-admit-{instance.name}"


@dataclass(frozen=True)
class _UnitView:
    """What the container's service templates read of a unit they install."""

    name: str
    unit_name: str
    enabled: bool = True


def render_gateway(service: ServiceConfig) -> tuple[HostFile, ...]:
    """The gateway's systemd unit, its launcher and the worker script its rollout steps run."""
    argv = gateway_argv(service)
    unit = render("gateway/gateway.service.j2", name=gateway_name(service), service=service, gateway=service.gateway,
                  version=service.gateway.version, workers=worker_urls(service), argv=argv,
                  workdir=gateway_env(service).home, environment_file=environment_file(service))
    launcher = render("gateway/smg-launch.py.j2", key_variable=KEY_VARIABLE)
    script = render("common/hostside-script.py.j2", path=WORKERS_SCRIPT,
                    source=Path(gateway_workers.__file__).read_text().rstrip("\n"))
    return (HostFile(f"/etc/systemd/system/{gateway_unit_name(service)}", unit),
            HostFile(LAUNCHER, launcher, "0755"), HostFile(WORKERS_SCRIPT, script, "0755"))


def plan_gateway_env(service: ServiceConfig, needs: tuple[str, ...]) -> Unit:
    return plan_env(gateway_env_key(service), gateway_env(service), service.gateway_container, needs)


def plan_gateway(service: ServiceConfig, needs: tuple[str, ...]) -> Unit:
    """Install, start, or restart after a change, the gateway's unit in its container."""
    unit = gateway_key(service)
    vmid = service.gateway_container
    files = render_gateway(service)
    view = _UnitView(gateway_name(service), gateway_unit_name(service))
    secret = api_key_secret(service)
    env_file = environment_file(service)
    values = dict(unit=unit, vmid=vmid, service=view, program=gateway_env(service).interpreter, files=list(files),
                  restart_on=[files[0].path, files[1].path], model_dirs=[], env_file=env_file,
                  key_variable=KEY_VARIABLE, admin_env_file=None, own_files=[files[0].path, env_file],
                  shared_files=[LAUNCHER, WORKERS_SCRIPT], own_dirs=[ENV_DIR, LIB_DIR])
    facts = [*files_facts(files), *systemd_unit_facts(files[0]),
             secret_file_fact(unit, env_file, secret, KEY_VARIABLE)]
    return Unit(
        key=unit, kind="Gateway",
        ensure=in_container(unit, vmid, render("common/container-service.sh.j2", **values), secret=secret),
        teardown=in_container(unit, vmid, render("common/container-service-teardown.sh.j2", **values),
                              teardown=True),
        probe=probe_in(unit, vmid, facts), desired=desired(facts), needs=needs, files=files, stdin_secret=secret,
        container=vmid,
        undoes=f"gateway {gateway_name(service)} ({gateway_unit_name(service)}) stopped and removed from CT {vmid}, "
               f"its key file {environment_file(service)} deleted; the replicas keep serving on their own ports")


def _worker_values(service: ServiceConfig, instance: ServiceConfig, action: str, steps: tuple[Unit, ...]) -> dict:
    digest = hashlib.sha256("\0".join(step.digest for step in steps).encode()).hexdigest()[:16]
    return dict(vmid=service.gateway_container, action=action, instance=instance.name,
                worker_url=worker_url(service, instance), gateway_name=gateway_name(service),
                gateway_url=gateway_base_url(service), python=gateway_env(service).interpreter,
                script=WORKERS_SCRIPT, env_file=environment_file(service), key_variable=KEY_VARIABLE,
                step_digest=digest)


def plan_drain(service: ServiceConfig, instance: ServiceConfig, steps: tuple[Unit, ...],
               needs: tuple[str, ...]) -> Unit:
    """Take the replica out of the gateway before `steps` (its environment and unit) change it."""
    unit = drain_key(service, instance)
    values = dict(unit=unit, **_worker_values(service, instance, "drain", steps))
    return Unit(key=unit, kind="GatewayDrain",
                ensure=in_container(unit, values["vmid"], render("gateway/worker.sh.j2", **values)),
                teardown=in_container(unit, values["vmid"], render("gateway/worker-teardown.sh.j2", **values),
                                      teardown=True),
                probe=probe_in(unit, values["vmid"], []), needs=needs, container=values["vmid"],
                no_facts_because=f"a drain acts only while {instance.name} changes; whether it is back in the "
                                 f"gateway is the fact of {admit_key(service, instance)}",
                undoes=f"nothing: {instance.name} goes back into the gateway with its next rollout")


def plan_admit(service: ServiceConfig, instance: ServiceConfig, steps: tuple[Unit, ...],
               needs: tuple[str, ...]) -> Unit:
    """Put the replica (back) into the gateway once its deploy gate passed."""
    unit = admit_key(service, instance)
    values = dict(unit=unit, **_worker_values(service, instance, "admit", steps))
    q = shlex.quote
    command = (f'"$root"{q(values["python"])} "$root"{q(WORKERS_SCRIPT)} state {q(values["gateway_url"])} '
               f'{q(values["worker_url"])} "$root"{q(values["env_file"])} {KEY_VARIABLE} 2>/dev/null '
               f'| sed -n "s/^worker: //p" | grep . || echo "not read"')
    facts = [Fact(f"{instance.name} in {gateway_name(service)}", command, "ready")]
    return Unit(key=unit, kind="GatewayAdmit",
                ensure=in_container(unit, values["vmid"], render("gateway/worker.sh.j2", **values)),
                teardown=in_container(unit, values["vmid"], render("gateway/worker-teardown.sh.j2", **values),
                                      teardown=True),
                probe=probe_in(unit, values["vmid"], facts), desired=desired(facts), needs=needs,
                container=values["vmid"],
                undoes=f"nothing: the gateway drops {instance.name} when its workers change")
