"""InferenceService: one engine as a systemd unit inside its GPU container.

Every flag is derived from the typed service settings (`gpuhosts.services`) and the model facts of
`gpuhosts/compat-rules.yaml` by the engine's driver (gpuhosts/engines/); `extraArgs` are appended after them. The
API key never appears in the unit or on a command line: the unit names a 0600 EnvironmentFile that sets the
variable the driver names, which the engine reads itself or through a launcher the driver ships (SGLang's:
templates/inference_service/sglang-serve.py.j2).

The plans of one service resolve its driver once (gpuhosts/plans/container_services.py) and hand it down; the
helpers below resolve it themselves only when called without one.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuhosts.config import StackConfig
from gpuhosts.engines import EngineDriver, driver_for, shipped_paths
from gpuhosts.facts import ADMIN_KEY_LINE, ADMIN_KEY_VARIABLE, admin_key_file_fact, desired, files_facts, secret_file_fact, systemd_unit_facts
from gpuhosts.plans.gate_script import render_gate_script
from gpuhosts.paths import SERVICE_ROOT
from gpuhosts.plans.python_env import in_container, probe_in
from gpuhosts.render import HostFile, render, systemd_command, systemd_value
from gpuhosts.units import Unit
from gpuhosts.services import ServiceConfig

ENV_DIR = "/etc/gpuhosts"


def venv_path(service: ServiceConfig) -> str:
    return f"{SERVICE_ROOT}/{service.name}/venv"


def environment_file(service: ServiceConfig) -> str | None:
    return f"{ENV_DIR}/{service.name}.env" if service.api_key_secret else None


def admin_environment_file(service: ServiceConfig, driver: EngineDriver | None = None) -> str | None:
    """Where the engine's admin key lives, for an engine that has one: made in the container, known to no client."""
    return f"{ENV_DIR}/{service.name}.admin.env" if (driver or driver_for(service.engine)).admin_endpoint else None


def secret_variable(service: ServiceConfig, driver: EngineDriver | None = None) -> str:
    """The variable the EnvironmentFile sets to the API key."""
    return (driver or driver_for(service.engine)).key_variable


def engine_args(service: ServiceConfig, driver: EngineDriver | None = None) -> list[str]:
    """The engine's full command line, executable first; derived, then extraArgs."""
    driver = driver or driver_for(service.engine)
    return driver.argv(service, driver.install(service))


def engine_environment(service: ServiceConfig, stack: StackConfig | None = None,
                       driver: EngineDriver | None = None) -> dict[str, str]:
    """The engine's environment (no secret): GPU selection, the switches its release needs, then the configured
    environment."""
    env: dict[str, str] = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "HF_HUB_OFFLINE": "1"}
    if stack is not None:
        # Inside the container the nvidia devices count in PCI bus order over the container's own GPUs.
        owned = [g.address for g in stack.container_gpus(service.container)]
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(owned.index(a)) for a in service.gpus if a in owned)
    env.update((driver or driver_for(service.engine)).environment(service))
    env.update(service.environment)
    return dict(sorted(env.items()))


def systemd_word(arg: str, purpose: str = "a word of ExecStart=") -> str:
    """One word of a systemd command line: quoted where needed, `%` and `$` escaped (gpuhosts.render)."""
    return systemd_value(arg, purpose, "exec")


def exec_start(argv: list[str], purpose: str = "ExecStart=") -> str:
    """ExecStart's value, one flag (with its value) per continued line."""
    return systemd_command(argv, purpose)


@dataclass(frozen=True)
class ServiceFiles:
    unit: HostFile
    # What the driver ships beside the unit (its launchers).
    shipped: tuple[HostFile, ...]
    argv: tuple[str, ...]
    environment: dict[str, str]


def render_service(service: ServiceConfig, stack: StackConfig | None = None,
                   driver: EngineDriver | None = None) -> ServiceFiles:
    driver = driver or driver_for(service.engine)
    argv = engine_args(service, driver)
    environment = engine_environment(service, stack, driver)
    build = f"{service.engine.version}" + (f" + {service.engine.git_ref}" if service.engine.git_ref else "")
    unit = render("inference_service/service.j2", service=service, engine_build=build,
                  workdir=f"{SERVICE_ROOT}/{service.name}",
                  environment=environment, environment_file=environment_file(service),
                  admin_environment_file=admin_environment_file(service, driver), argv=argv)
    return ServiceFiles(unit=HostFile(f"/etc/systemd/system/{service.unit_name}", unit), shipped=driver.shipped(),
                        argv=tuple(argv), environment=environment)


def service_key(service: ServiceConfig) -> str:
    return f"ct{service.container}-service-{service.name}"


def plan_inference_service(service: ServiceConfig, stack: StackConfig, needs: tuple[str, ...],
                           driver: EngineDriver | None = None) -> Unit:
    """Install the unit (and what the driver ships, the gate script, the key file) in the container; start, restart
    or stop it."""
    driver = driver or driver_for(service.engine)
    files = render_service(service, stack, driver)
    gate_script = render_gate_script()
    installed = [files.unit, *files.shipped, gate_script]
    shared = [*shipped_paths(), gate_script.path]
    model_dirs = [service.model.path] + ([service.speculative.drafter.path] if service.speculative.drafter else [])
    unit = service_key(service)
    secret = service.api_key_secret
    admin_file = admin_environment_file(service, driver)
    values = dict(unit=unit, vmid=service.container, service=service, program=files.argv[0], files=installed,
                  restart_on=[f.path for f in installed if f is not gate_script], model_dirs=model_dirs,
                  env_file=environment_file(service), key_variable=secret_variable(service, driver),
                  admin_env_file=admin_file, admin_key_variable=ADMIN_KEY_VARIABLE,
                  admin_key_line=ADMIN_KEY_LINE,
                  own_files=[files.unit.path] + ([environment_file(service)] if secret else [])
                  + ([admin_file] if admin_file else []),
                  shared_files=shared, own_dirs=[ENV_DIR, *dict.fromkeys(path.rsplit("/", 1)[0] for path in shared)])
    facts = [*files_facts(installed), *systemd_unit_facts(files.unit, enabled=service.enabled, active=service.enabled)]
    if secret:
        # The key file's content is a secret: a digest keyed by the unit is the fact, compared by the provider.
        facts.append(secret_file_fact(unit, environment_file(service), secret, secret_variable(service, driver)))
    if admin_file:
        facts.append(admin_key_file_fact(admin_file))
    return Unit(
        key=unit,
        kind="InferenceService",
        ensure=in_container(unit, service.container, render("common/container-service.sh.j2", **values), secret=secret),
        teardown=in_container(unit, service.container, render("common/container-service-teardown.sh.j2", **values),
                              teardown=True),
        probe=probe_in(unit, service.container, facts),
        desired=desired(facts),
        needs=needs,
        files=tuple(installed),
        stdin_secret=secret,
        container=service.container,
        undoes=(f"service {service.name} ({service.unit_name}) stopped and removed from CT {service.container}"
                + (f", its key file {environment_file(service)} deleted" if secret else "")
                + (f", its admin key {admin_file} deleted" if admin_file else "")
                + "; weights and environment kept by their own units"),
    )
