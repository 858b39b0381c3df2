"""PythonEnv: a service's engine in a uv virtual environment inside its container; no change when already right.

uv itself is pinned and bootstrapped once per container from the container's python3; each service gets its own
environment, so two engines (or two builds of one) never share dependencies.
"""

from __future__ import annotations

import pulumi
from pulumi_command import remote

from components._command import step_command
from components.inference_service import SERVICE_ROOT, venv_path
from gpuhosts.render import Step, render
from gpuhosts.services import ServiceConfig

UV_VERSION = "0.13.9"
UV_HOME = f"{SERVICE_ROOT}/.uv"
# SGLang's "all" extra carries its serving dependencies (the attention kernels among them).
PACKAGE_EXTRAS = {"sglang": "[all]", "vllm": ""}


def requirement(service: ServiceConfig) -> str:
    """What `uv pip install` gets: the pinned release, or the engine built from a git ref of its repository."""
    engine = service.engine
    name = engine.name.value
    if engine.git_ref:
        return f"{name}{PACKAGE_EXTRAS[name]} @ git+{engine.source_repository}@{engine.git_ref}"
    return f"{name}{PACKAGE_EXTRAS[name]}=={engine.version}"


def in_container(unit: str, vmid: int, inner: str, *, secret: str | None = None, teardown: bool = False) -> str:
    """A host command that runs `inner` inside container `vmid`, with `secret` (a name) passed on through stdin."""
    return render("container_services/in-container.sh.j2", unit=unit, vmid=vmid, inner=inner.rstrip("\n"),
                  secret=secret, teardown=teardown)


def plan_python_env(host: str, service: ServiceConfig) -> Step:
    unit = f"ct{service.container}-env-{service.name}"
    values = dict(unit=unit, vmid=service.container, service=service.name, venv=venv_path(service),
                  requirement=requirement(service), package=service.engine.name.value,
                  release=service.engine.version, from_git=service.engine.git_ref is not None,
                  python_version=service.python, uv_version=UV_VERSION, uv_home=UV_HOME,
                  service_dir=f"{SERVICE_ROOT}/{service.name}", envs_root=SERVICE_ROOT)
    return Step(
        name=f"{host}-{unit}",
        create=in_container(unit, service.container, render("container_services/python-env.sh.j2", **values)),
        delete=in_container(unit, service.container, render("container_services/python-env-teardown.sh.j2", **values),
                            teardown=True),
    )


class PythonEnv(pulumi.ComponentResource):
    def __init__(self, name: str, step: Step, connection: remote.ConnectionArgs,
                 opts: pulumi.ResourceOptions | None = None, depends_on: list[pulumi.Resource] | None = None):
        super().__init__("gpuhosts:service:PythonEnv", name, None, opts)
        self.command = step_command(step, connection, self, depends_on or [])
        self.register_outputs({"stdout": self.command.stdout})
