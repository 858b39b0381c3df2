"""An engine that is no pip package fits the drivers' interface: its driver returns an install spec of its own
kind (here one downloaded binary, with no lock), the plan registered for that kind installs it, and the service,
its gate and the lock rule read only what every install spec has (gpuhosts/envspec.py `EngineInstall`)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from conftest import KPRO5_SECRETS, kpro5_values
from gpuhosts.config import ConfigError
from gpuhosts.engines import DRIVERS, EngineDriver
from gpuhosts.envspec import EnvSpec
from gpuhosts.locks import LockSpec
from gpuhosts.plans.engine_install import INSTALLERS, install_key, plan_engine_install
from gpuhosts.plans.proxmox_host import plan_host
from gpuhosts.services import ServiceConfig, SpecMethod
from gpuhosts.stacks import validate_stack
from gpuhosts.units import Unit


@dataclass(frozen=True)
class Binary:
    """The toy engine's install: one binary fetched by URL into the service's directory."""

    name: str
    requirement: str
    url: str

    @property
    def home(self) -> str:
        return f"/opt/toyserve/{self.name}"

    @property
    def lock(self) -> LockSpec | None:
        return None

    @property
    def interpreter(self) -> str:
        # The container's own Python runs the gate; the toy's image ships one with prometheus_client.
        return "/usr/bin/python3"


class ToyServe(EngineDriver):
    name = "toyserve"
    package = "toyserve"
    repository = "https://toyserve.invalid/releases"
    key_variable = "TOYSERVE_API_KEY"
    methods = frozenset({SpecMethod.MTP})
    reasoning_field = "reasoning"

    def install(self, service: ServiceConfig) -> Binary:
        version = service.engine.version
        return Binary(service.name, f"toyserve {version}", f"{self.repository}/toyserve-{version}")

    def argv(self, service: ServiceConfig, install: Binary) -> list[str]:
        return [f"{install.home}/toyserve", "--model", service.model.path, "--port", str(service.port),
                *service.extra_args]

    def acceptance_metrics(self) -> dict[str, str]:
        return {"kind": "gauges", "length": "toyserve:accept_length", "rate": "toyserve:accept_rate"}


def plan_binary(service: ServiceConfig, install: Binary, needs: tuple[str, ...]) -> Unit:
    key = f"ct{service.container}-binary-{service.name}"
    return Unit(key=key, kind="EngineBinary", ensure=f"fetch {install.url}", teardown="true", probe="true",
                needs=needs, container=service.container)


@pytest.fixture
def toyserve(monkeypatch):
    monkeypatch.setitem(DRIVERS, ToyServe.name, ToyServe())
    monkeypatch.setitem(INSTALLERS, Binary, plan_binary)


def toy_stack(monitoring: bool = False):
    values = kpro5_values()
    if not monitoring:
        values.pop("monitoring", None)  # the catalog knows no toy's metrics (the last test shows the refusal)
    sglang, toy = values["services"]
    # The two share their GPUs and port: the toy runs, so its gate measures it.
    sglang["enabled"] = False
    toy.update(engine={"name": "toyserve", "version": "1.0.0"}, speculative={"method": "mtp"}, enabled=True)
    return validate_stack(values, KPRO5_SECRETS)


def test_a_stack_plans_an_engine_that_is_no_pip_package(toyserve):
    config = toy_stack()  # no lock refused: the binary has none
    graph = plan_host(config)
    toy = next(s for s in config.services if s.engine.name == "toyserve")
    install = graph[f"ct{toy.container}-binary-{toy.name}"]
    assert install.kind == "EngineBinary" and install.ensure == "fetch https://toyserve.invalid/releases/toyserve-1.0.0"
    assert install_key(toy) not in graph.units  # no PythonEnv for it
    service = graph[f"ct{toy.container}-service-{toy.name}"]
    assert install.key in service.needs
    unit_file = next(f for f in service.files if f.path.endswith(toy.unit_name)).content
    assert f"/opt/toyserve/{toy.name}/toyserve" in unit_file
    assert 'program=/opt/toyserve/qwen-vllm-dflash/toyserve' in service.ensure
    assert not any(f.path.endswith("sglang-serve.py") for f in service.files)  # SGLang's launcher is SGLang's
    gate = graph[f"ct{toy.container}-gate-{toy.name}"]
    assert "python=/usr/bin/python3" in gate.ensure and "toyserve:accept_length" in gate.ensure


def test_an_install_kind_no_plan_installs_is_refused_naming_where_plans_go(toyserve, monkeypatch):
    monkeypatch.delitem(INSTALLERS, Binary)
    toy = next(s for s in toy_stack().services if s.engine.name == "toyserve")
    with pytest.raises(ValueError, match="installs a Binary, which no plan installs .*INSTALLERS"):
        plan_engine_install(toy, DRIVERS["toyserve"], ())


def test_the_engines_of_today_install_as_python_environments():
    config = validate_stack(kpro5_values(), KPRO5_SECRETS)
    for service in config.services:
        install = DRIVERS[service.engine.name].install(service)
        assert isinstance(install, EnvSpec) and install.interpreter == f"{install.venv}/bin/python"
        assert plan_engine_install(service, DRIVERS[service.engine.name], ()).kind == "PythonEnv"


def test_monitoring_an_engine_the_metric_catalog_does_not_know_is_refused_naming_the_catalog(toyserve):
    with pytest.raises(ConfigError) as raised:
        plan_host(toy_stack(monitoring=True))
    (problem,) = raised.value.problems
    assert problem.path == "gpuhosts:monitoring"
    assert "toyserve 1.0.0" in problem.message and "gpuhosts/metrics-catalog.yaml" in problem.message
