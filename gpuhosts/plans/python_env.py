"""PythonEnv: a service's engine in a uv virtual environment inside its container; no change when already right.

uv itself is pinned and bootstrapped once per container from the container's python3; each service gets its own
environment, so two engines (or two builds of one) never share dependencies.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from gpuhosts.plans.inference_service import SERVICE_ROOT
from gpuhosts.facts import Fact, desired, render_probe
from gpuhosts.render import render
from gpuhosts.services import ServiceConfig
from gpuhosts.units import Unit

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


@dataclass(frozen=True)
class EnvSpec:
    """One uv environment: where it lives, what goes in it, and optionally a source checkout beside it (for the
    scripts a package's repository carries but its wheel does not)."""

    name: str
    requirement: str
    package: str
    release: str
    from_git: bool
    python: str
    checkout_url: str | None = None
    checkout_ref: str | None = None
    # Environments that download models carry huggingface_hub's `hf` (the engines depend on it).
    needs_hf: bool = True

    @property
    def home(self) -> str:
        return f"{SERVICE_ROOT}/{self.name}"

    @property
    def venv(self) -> str:
        return f"{self.home}/venv"

    @property
    def checkout(self) -> str:
        return f"{self.home}/src"


def service_env(service: ServiceConfig) -> EnvSpec:
    return EnvSpec(name=service.name, requirement=requirement(service), package=service.engine.name.value,
                   release=service.engine.version, from_git=service.engine.git_ref is not None, python=service.python)


def in_container(unit: str, vmid: int | None, inner: str, *, secret: str | None = None, teardown: bool = False) -> str:
    """A host command that runs `inner` inside container `vmid`, with `secret` (a name) passed on through stdin.
    Without a container (a training node) the script is the command itself and reads the secret from stdin."""
    if vmid is None:
        return inner
    return render("container_services/in-container.sh.j2", unit=unit, vmid=vmid, inner=inner.rstrip("\n"),
                  secret=secret, teardown=teardown)


def env_facts(env: EnvSpec) -> list[Fact]:
    # The requirement marker is written after a complete install and removed before a new one starts.
    marker = f"{env.venv}/.gpuhosts-requirement"
    facts = [Fact(f"environment {env.venv}",
                  f'[ -x "$root"{shlex.quote(env.venv + "/bin/python")} ] && cat "$root"{shlex.quote(marker)} || echo missing', env.requirement)]
    if env.checkout_url:
        facts.append(Fact(f"checkout {env.checkout}", f'cat "$root"{shlex.quote(env.checkout + "/.gpuhosts-ref")} || echo missing',
                          env.checkout_ref))
    return facts


def plan_env(unit: str, env: EnvSpec, vmid: int | None, needs: tuple[str, ...], kind: str = "PythonEnv") -> Unit:
    values = dict(unit=unit, vmid=vmid, env=env, uv_version=UV_VERSION, uv_home=UV_HOME, envs_root=SERVICE_ROOT)
    facts = env_facts(env)
    return Unit(
        key=unit,
        kind=kind,
        ensure=in_container(unit, vmid, render("container_services/python-env.sh.j2", **values)),
        teardown=in_container(unit, vmid, render("container_services/python-env-teardown.sh.j2", **values),
                              teardown=True),
        probe=probe_in(unit, vmid, facts),
        desired=desired(facts),
        needs=needs,
    )


def probe_in(unit: str, vmid: int | None, facts: list[Fact], host_facts: list[Fact] = (), prelude: str = "") -> str:
    """A probe whose facts are observed where the unit acts: inside container `vmid`, or on the node itself."""
    if vmid is None:
        return render_probe(unit, [*host_facts, *facts], prelude=prelude)
    return render_probe(unit, list(host_facts), vmid=vmid, container_facts=facts, container_prelude=prelude)


def plan_python_env(service: ServiceConfig, needs: tuple[str, ...]) -> Unit:
    return plan_env(f"ct{service.container}-env-{service.name}", service_env(service), service.container, needs)
