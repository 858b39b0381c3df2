"""Locked environments: every uv environment a stack installs comes from a committed lock in `locks/`.

A top-level pin is not a pinned install (sglang[all]==0.5.11 resolves a `kernels` that breaks its own import), so
each environment installs the full resolved closure, with hashes, of one (requirement, Python) pair:
`locks/<name>-<version>-py<python>.txt`. The lock is resolved by `uv pip compile` for x86_64 Linux with glibc 2.34
(`PLATFORM`; SGLang publishes manylinux_2_34 wheels only) under the constraints of the compatibility data
(`engines[].lockConstraints` of compat-rules.yaml) and carries the hashes of exactly the distributions uv selects
for that platform (uv's pylock.toml of the same resolution names them), which keeps a lock within what a
`pct exec … bash -c` argument may hold. Its header names the requirement, Python and constraints; a lock whose
header disagrees with what a stack needs counts as missing, and the plan refuses it naming the field.

`make locks` (`python -m gpuhosts.lock_tool`) writes the lock of every environment the committed stacks need
(found by planning them) and of the newest releases in compat-rules.yaml (`newest`), which `make verify-engines`
checks.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterator

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from gpuhosts.compat_data import engine_facts
from gpuhosts.config import NAMESPACE, Problem
from gpuhosts.render import PROJECT_ROOT

# An installed wheel carries the locks inside the package, as it does the templates; a checkout has them at its root.
_PACKAGED = Path(__file__).resolve().parent / "locks"
LOCKS_DIR = _PACKAGED if _PACKAGED.is_dir() else PROJECT_ROOT / "locks"
PLATFORM = "x86_64-manylinux_2_34"
HEADER_MARK = "# managed by gpuhosts"
FIX = "run `make locks` and commit locks/"


class LockError(ValueError):
    pass


@dataclass(frozen=True)
class LockSpec:
    """What one lock resolves: a requirement `name[extras]==version` for a Python, under constraints."""

    requirement: str
    python: str
    constraints: tuple[str, ...] = ()

    @property
    def package(self) -> str:
        return canonicalize_name(Requirement(self.requirement).name)

    @property
    def version(self) -> str:
        return next(iter(Requirement(self.requirement).specifier)).version

    @property
    def name(self) -> str:
        extras = "".join(f"-{e}" for e in sorted(Requirement(self.requirement).extras))
        return f"{self.package}{extras}-{self.version}-py{self.python}"

    def path(self, locks_dir: Path | None = None) -> Path:
        return (locks_dir or LOCKS_DIR) / f"{self.name}.txt"

    def with_version(self, version: str) -> LockSpec:
        req = Requirement(self.requirement)
        extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
        return lock_spec(f"{req.name}{extras}=={version}", self.python)

    def header(self) -> str:
        return (f"{HEADER_MARK}: `make locks` writes this file (gpuhosts/locks.py); do not edit.\n"
                f"# requirement: {self.requirement}\n"
                f"# python: {self.python}\n"
                f"# platform: {PLATFORM}\n"
                f"# constraints: {', '.join(self.constraints) or 'none'}\n"
                f"# resolved by: uv pip compile --generate-hashes --python-version {self.python} "
                f"--python-platform {PLATFORM} --no-header (hashes of the distributions uv selects for that platform)\n")


@dataclass(frozen=True)
class RequirementsLock:
    """A committed lock resolved from a requirements file of the project rather than from one requirement, which
    `make locks` therefore does not write: DDTree's own environment, `locks/ddtree/<commit[:7]>-py<python>.txt`
    from `locks/ddtree/requirements.in` (`python tests/verify_ddtree/run.py --lock` writes it). Its header names
    the requirements file's sha256, so an edited requirements file makes the lock stale."""

    name: str  # under locks/, e.g. ddtree/c96427a-py3.12.txt
    requirements: str  # under locks/, e.g. ddtree/requirements.in
    python: str
    writer: str  # the command that writes it

    def path(self, locks_dir: Path | None = None) -> Path:
        return (locks_dir or LOCKS_DIR) / self.name

    def missing(self, text: str | None) -> str | None:
        """Why `text` (None: no file) is not the current lock of the requirements file, or None."""
        if text is None:
            return f"no lock locks/{self.name} (resolved from locks/{self.requirements} for Python {self.python})"
        requirements = _read(LOCKS_DIR / self.requirements)
        if requirements is None:
            return f"locks/{self.requirements} does not exist"
        digest = hashlib.sha256(requirements.encode()).hexdigest()
        header = {key: value for key, _, value in (line[1:].strip().partition(": ") for line in
                                                   text.splitlines() if line.startswith("#"))}
        wanted = {"requirements": f"locks/{self.requirements} (sha256 {digest})", "python": self.python,
                  "platform": PLATFORM}
        wrong = [f"{key} {header.get(key, '(none)')!r} instead of {value!r}" for key, value in wanted.items()
                 if header.get(key) != value]
        return f"locks/{self.name} is stale: its header says " + ", ".join(wrong) if wrong else None


def lock_spec(requirement: str, python: str) -> LockSpec:
    """The lock of `requirement` (an exact pin) for `python`, its constraints from the compatibility data."""
    req = Requirement(requirement)
    pins = [s for s in req.specifier if s.operator == "=="]
    if req.url or len(pins) != 1 or len(req.specifier) != 1:
        raise LockError(f"{requirement!r} is not an exact release (name==version); only those are locked")
    facts = engine_facts(canonicalize_name(req.name), pins[0].version)
    return LockSpec(requirement=requirement, python=python, constraints=tuple(facts.lock_constraints))


def parse_header(text: str) -> dict[str, str]:
    fields = {}
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        key, sep, value = line[1:].strip().partition(": ")
        if sep and key in ("requirement", "python", "platform", "constraints"):
            fields[key] = value
    return fields


def header_problem(spec: LockSpec, text: str) -> str | None:
    """Why the lock text is not the lock of `spec`, or None."""
    want = parse_header(spec.header())
    have = parse_header(text)
    wrong = [f"{key} {have.get(key, '(none)')!r} instead of {value!r}" for key, value in want.items()
             if have.get(key) != value]
    return "its header says " + ", ".join(wrong) if wrong else None


# --- collecting: the environments a plan needs, without their locks ----------------------------------------------

_COLLECTING: contextvars.ContextVar[list[LockSpec] | None] = contextvars.ContextVar("gpuhosts_locks", default=None)


@contextlib.contextmanager
def collecting() -> Iterator[list[LockSpec]]:
    """Within: every lock a plan asks for is recorded instead of required (a stand-in answers a missing one), so
    that `make locks` can plan a stack whose locks are not written yet."""
    found: list[LockSpec] = []
    token = _COLLECTING.set(found)
    try:
        yield found
    finally:
        _COLLECTING.reset(token)


@lru_cache(maxsize=64)
def _read(path: Path) -> str | None:
    return path.read_text() if path.is_file() else None


def lock_text(spec: LockSpec | RequirementsLock, locks_dir: Path | None = None) -> str:
    """The committed lock of `spec`; LockError when it is missing or its header is of another lock."""
    text = _read(spec.path(locks_dir))
    if isinstance(spec, RequirementsLock):
        # Not `make locks`' to resolve, so never collected: its own writer makes it.
        reason = spec.missing(text)
        if reason:
            raise LockError(f"{reason}; {spec.writer}")
        return text
    found = _COLLECTING.get()
    if found is not None:
        if spec not in found:
            found.append(spec)
        if text is None or header_problem(spec, text):
            return spec.header() + "# (stand-in: not locked yet)\n"
    reason = lock_missing(spec, text)
    if reason:
        raise LockError(f"{reason}; {FIX}")
    return text


def lock_missing(spec: LockSpec, text: str | None) -> str | None:
    """Why `text` (None: no file) is not a usable lock of `spec`, or None."""
    name = spec.path().name
    if text is None:
        return f"no lock for {spec.requirement} on Python {spec.python} (locks/{name} does not exist)"
    problem = header_problem(spec, text)
    return f"locks/{name} is stale: {problem}" if problem else None


def lock_digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def locked_pins(text: str) -> list[str]:
    """The lock's distributions as `name==version`, names normalised (PEP 503), sorted bytewise: what a venv that
    `uv pip sync` made from it holds (its requirement lines start with the pin; hashes and comments follow)."""
    pins = {canonicalize_name(name): version for name, version in
            re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", text, re.M)}
    return sorted(f"{name}=={version}" for name, version in pins.items())


def lock_problem(spec: LockSpec, path: str, python_path: str) -> Problem | None:
    """A plan-time problem naming the field when the lock of `spec` is missing or stale: `python_path` when a lock
    of the same release exists only for other Pythons, else `path` (the version field)."""
    if _COLLECTING.get() is not None:
        return None
    reason = lock_missing(spec, _read(spec.path()))
    if reason is None:
        return None
    others = sorted(p.name for p in LOCKS_DIR.glob(f"{spec.name.rsplit('-py', 1)[0]}-py*.txt"))
    where = python_path if others and spec.path().name not in others else path
    also = f" (locked for: {', '.join(others)})" if where == python_path else ""
    return Problem(path=f"{NAMESPACE}:{where}",
                   message=f"{reason}{also}; every environment installs a locked closure — after changing this "
                           "value run `make locks` and commit locks/")
