"""What every engine driver provides; see gpuhosts/engines/__init__.py."""

from __future__ import annotations

import json
from typing import Any

from gpuhosts.compat_data import EngineFacts, ModelFacts, engine_facts, model_facts
from gpuhosts.envspec import EngineInstall, EnvSpec
from gpuhosts.facts import ADMIN_KEY_VARIABLE
from gpuhosts.hostside.gate_probe import ACCEPTANCE_KINDS
from gpuhosts.render import HostFile, render
from gpuhosts.services import EngineSpec, PackageSpec, ServiceConfig, SpecMethod


# Settings of a service that only some engines read (field: stack name); a driver lists those it reads (`settings`).
ENGINE_SETTINGS = {"mamba_scheduler_strategy": "mambaSchedulerStrategy"}


def number(value: float) -> str:
    return format(value, "g")


class Flags:
    """A command line under construction: flags by their current names, so a rename of one release is one row."""

    def __init__(self, facts: EngineFacts):
        self.facts = facts
        self.words: list[str] = []

    def add(self, flag: str, value: Any = None) -> "Flags":
        self.words.append(self.facts.flag(flag))
        if value is not None:
            self.words.append(value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
                              if isinstance(value, dict) else str(value))
        return self


class EngineDriver:
    name: str
    package: str
    extras: str = ""
    repository: str
    key_variable: str
    # (path, template) of each script the engine is started through, installed beside its unit.
    launchers: tuple[tuple[str, str], ...] = ()
    # The speculative methods the engine serves, and which of ENGINE_SETTINGS it reads.
    methods: frozenset[SpecMethod] = frozenset()
    settings: frozenset[str] = frozenset()
    # The response field of thinking text, where every release the driver supports agrees; else the compatibility
    # data's rows name it per release.
    reasoning_field: str | None = None
    # An engine whose administrative endpoints (weights, cache, profiling) take a key of their own, and one such
    # endpoint that turns away the API key once it has one: the gate asks it. None where the engine has no such key.
    admin_endpoint: str | None = None

    def facts(self, engine: EngineSpec) -> EngineFacts:
        return engine_facts(self.package, engine.version)

    def contains(self, engine: EngineSpec, pr: int) -> bool:
        """The build has pull request `pr`: its release does (compatibility data) or the stack says so."""
        return engine.contains(pr) or pr in self.facts(engine).contains_prs

    def requirement(self, engine: PackageSpec) -> str:
        source = engine.repository or self.repository
        if engine.git_ref:
            return f"{self.package}{self.extras} @ git+{source}@{engine.git_ref}"
        return f"{self.package}{self.extras}=={engine.version}"

    def release_requirement(self, engine: PackageSpec) -> str:
        """The release a build is based on: what its locked closure is resolved from."""
        return f"{self.package}{self.extras}=={engine.version}"

    def model_facts(self, service: ServiceConfig) -> ModelFacts:
        return model_facts(service.model.repo)

    def install(self, service: ServiceConfig) -> EngineInstall:
        """How the engine is installed for `service`: by default its package, pinned or built from a git ref, in a
        uv environment of the service's own. A driver of an engine that is no pip package returns a spec of
        another kind (gpuhosts/envspec.py)."""
        engine = service.engine
        return EnvSpec(name=service.name, requirement=self.requirement(engine), package=self.package,
                       release=engine.version, from_git=engine.git_ref is not None, python=service.python)

    def argv(self, service: ServiceConfig, install: EngineInstall) -> list[str]:
        """The full command line, executable first (under `install`, what `install()` returned): derived flags,
        then the service's extraArgs."""
        raise NotImplementedError

    def shipped(self) -> tuple[HostFile, ...]:
        """The files the engine needs on the host beside its unit: its launchers, rendered."""
        return tuple(HostFile(path, render(template, key_variable=self.key_variable,
                                           admin_key_variable=ADMIN_KEY_VARIABLE), "0755")
                     for path, template in self.launchers)

    def switches(self, service: ServiceConfig) -> dict[str, str]:
        """Environment variables the release needs for this service's settings (none a release has made default)."""
        return {}

    def environment(self, service: ServiceConfig) -> dict[str, str]:
        redundant = self.facts(service.engine).redundant_environment
        return {k: v for k, v in self.switches(service).items() if k not in redundant}

    def tool_call_flags(self, parser: str) -> list[str]:
        return ["--tool-call-parser", parser]

    def gate(self, service: ServiceConfig) -> dict[str, Any]:
        """What the deploy gate reads from this engine: the reasoning field and how acceptance is measured."""
        facts = self.facts(service.engine)
        reasoning_field = facts.reasoning_field or self.reasoning_field
        if reasoning_field is None:
            raise ValueError(f"the compatibility data names no reasoning field for {self.name} {service.engine.version}")
        metrics = self.acceptance_metrics()
        wanted = ACCEPTANCE_KINDS.get(metrics.get("kind"))
        if wanted is None or set(metrics) != {"kind", *wanted}:
            raise ValueError(f"the {self.name} driver's acceptance metrics {metrics} are none the gate reads: "
                             + "; ".join(f"kind {k} with {', '.join(v)}" for k, v in ACCEPTANCE_KINDS.items()))
        return {"reasoning_field": reasoning_field, "acceptance": metrics, "admin_endpoint": self.admin_endpoint}

    def acceptance_metrics(self) -> dict[str, str]:
        """Which of the engine's Prometheus metrics the gate and the bake-off read, and as what kind (the gate's
        ACCEPTANCE_KINDS): `kind` plus a metric name per role."""
        raise NotImplementedError
