"""What every engine driver provides; see gpuhosts/engines/__init__.py."""

from __future__ import annotations

import json
from typing import Any

from gpuhosts.compat_data import EngineFacts, ModelFacts, engine_facts, model_facts
from gpuhosts.services import EngineSpec, ServiceConfig


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

    def facts(self, engine: EngineSpec) -> EngineFacts:
        return engine_facts(self.package, engine.version)

    def contains(self, engine: EngineSpec, pr: int) -> bool:
        """The build has pull request `pr`: its release does (compatibility data) or the stack says so."""
        return engine.contains(pr) or pr in self.facts(engine).contains_prs

    def requirement(self, engine: EngineSpec) -> str:
        source = engine.repository or self.repository
        if engine.git_ref:
            return f"{self.package}{self.extras} @ git+{source}@{engine.git_ref}"
        return f"{self.package}{self.extras}=={engine.version}"

    def release_requirement(self, engine: EngineSpec) -> str:
        """The release a build is based on: what its locked closure is resolved from."""
        return f"{self.package}{self.extras}=={engine.version}"

    def model_facts(self, service: ServiceConfig) -> ModelFacts:
        return model_facts(service.model.repo)

    def argv(self, service: ServiceConfig, venv: str) -> list[str]:
        """The full command line, executable first: derived flags, then the service's extraArgs."""
        raise NotImplementedError

    def switches(self, service: ServiceConfig) -> dict[str, str]:
        """Environment variables the release needs for this service's settings (none a release has made default)."""
        return {}

    def environment(self, service: ServiceConfig) -> dict[str, str]:
        redundant = self.facts(service.engine).redundant_environment
        return {k: v for k, v in self.switches(service).items() if k not in redundant}

    def launcher(self) -> tuple[str, str] | None:
        """(path, template) of a launcher script the engine starts through, if any."""
        return None

    def tool_call_flags(self, parser: str) -> list[str]:
        return ["--tool-call-parser", parser]

    def gate(self, service: ServiceConfig) -> dict[str, Any]:
        """What the deploy gate reads from this engine: the reasoning field and how acceptance is measured."""
        facts = self.facts(service.engine)
        if facts.reasoning_field is None:
            raise ValueError(f"the compatibility data names no reasoning field for {self.name} {service.engine.version}")
        return {"reasoning_field": facts.reasoning_field, "acceptance": self.acceptance_metrics()}

    def acceptance_metrics(self) -> dict[str, str]:
        raise NotImplementedError
