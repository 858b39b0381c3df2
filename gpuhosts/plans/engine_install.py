"""A service's engine install: the unit that puts the engine its driver names onto the container.

The driver says how (`EngineDriver.install`, a spec of gpuhosts/envspec.py); the spec's type picks the plan that
installs it. Today's engines are pip packages, installed by PythonEnv; an engine of another kind adds its spec and
its plan here, and no other plan changes: the service, its gate and the bake-off read only what every install spec
has (`EngineInstall`).
"""

from __future__ import annotations

from typing import Callable

from gpuhosts.engines import EngineDriver
from gpuhosts.envspec import EngineInstall, EnvSpec
from gpuhosts.plans.python_env import plan_env
from gpuhosts.services import ServiceConfig
from gpuhosts.units import Unit


def install_key(service: ServiceConfig) -> str:
    return f"ct{service.container}-env-{service.name}"


def _python_env(service: ServiceConfig, env: EnvSpec, needs: tuple[str, ...]) -> Unit:
    return plan_env(install_key(service), env, service.container, needs)


# The plan of each kind of install spec.
INSTALLERS: dict[type, Callable[[ServiceConfig, EngineInstall, tuple[str, ...]], Unit]] = {EnvSpec: _python_env}


def plan_engine_install(service: ServiceConfig, driver: EngineDriver, needs: tuple[str, ...]) -> Unit:
    install = driver.install(service)
    installer = INSTALLERS.get(type(install))
    if installer is None:
        raise ValueError(f"service {service.name}: the {driver.name} driver installs a {type(install).__name__}, "
                         "which no plan installs (gpuhosts/plans/engine_install.py INSTALLERS)")
    return installer(service, install, needs)
