"""What a Python environment is: the requirement it installs, the committed lock it installs from, the Python it
runs and where it lives on a host. Pure data, with no notion of a container or of how it is installed: the
PythonEnv unit that makes one is gpuhosts/plans/python_env.py, and the config checks read the same specs to name a
missing lock before anything is planned.

An engine's driver says how its engine is installed for a service (`EngineDriver.install`) with a spec that has
the shape of `EngineInstall`. An EnvSpec (the engine's package in a uv environment of its own) is the one kind
the engines of today need; an engine that is no pip package (a container image, a downloaded binary) brings a spec
of its own kind and the plan that installs it (gpuhosts/plans/engine_install.py `INSTALLERS`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from gpuhosts.locks import LockSpec, RequirementsLock, lock_spec
from gpuhosts.paths import SERVICE_ROOT

LOCK_NAME = "requirements.lock"


class EngineInstall(Protocol):
    """What the plans read of any engine install: `name` (the service's), `requirement` (what is installed, as a
    summary shows it), `home` (its directory on the host), `lock` (the committed lock it installs from, or None:
    the lock rule asks only installs that have one) and `interpreter` (the Python the deploy gate and the bake-off's
    client run with, beside the engine)."""

    name: str
    requirement: str

    @property
    def home(self) -> str: ...

    @property
    def lock(self) -> LockSpec | None: ...

    @property
    def interpreter(self) -> str: ...


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
    # A lock resolved from a requirements file (DDTree's own environment) instead of that of `locked_requirement`.
    requirements_lock: RequirementsLock | None = None

    @property
    def home(self) -> str:
        return f"{SERVICE_ROOT}/{self.name}"

    @property
    def venv(self) -> str:
        return f"{self.home}/venv"

    @property
    def checkout(self) -> str:
        return f"{self.home}/src"

    @property
    def lock_path(self) -> str:
        return f"{self.home}/{LOCK_NAME}"

    @property
    def locked_requirement(self) -> str:
        """The release whose locked closure the environment installs: the requirement itself, or for a git-ref
        build the base release (`sglang[all] @ git+…` → `sglang[all]==0.5.11`)."""
        if not self.from_git:
            return self.requirement
        return f"{self.requirement.split(' @ ', 1)[0].strip()}=={self.release}"

    @property
    def lock(self) -> LockSpec:
        return lock_spec(self.locked_requirement, self.python)

    @property
    def interpreter(self) -> str:
        return f"{self.venv}/bin/python"


def env_lock(env: EnvSpec) -> LockSpec | RequirementsLock:
    return env.requirements_lock or env.lock
