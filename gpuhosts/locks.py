"""Locked environments: every uv environment a stack installs comes from a committed lock in `locks/`.

A top-level pin is not a pinned install (sglang[all]==0.5.11 resolves a `kernels` that breaks its own import), so
each environment installs the full resolved closure, with hashes, of one (requirement, Python) pair:
`locks/<name>-<version>-py<python>.txt`. The lock is resolved by `uv pip compile` for x86_64 Linux with glibc 2.34
(`PLATFORM`; SGLang publishes manylinux_2_34 wheels only) under the constraints of the compatibility data
(`engines[].lockConstraints` of compat-rules.yaml) and carries the hashes of exactly the distributions uv selects
for that platform (uv's pylock.toml of the same resolution names them), which keeps a lock within what a
`pct exec … bash -c` argument may hold. Its header names the requirement, Python and constraints; a lock whose
header disagrees with what a stack needs counts as missing, and the plan refuses it naming the field.

`make locks` (`python -m gpuhosts.locks`) writes the lock of every environment the committed stacks need
(found by planning them) and of the newest releases in compat-rules.yaml (`newest`), which `make verify-engines`
checks.
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import hashlib
import re
import subprocess
import sys
import tempfile
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterator

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

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


def lock_spec(requirement: str, python: str) -> LockSpec:
    """The lock of `requirement` (an exact pin) for `python`, its constraints from the compatibility data."""
    from gpuhosts.compat import engine_facts

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


def lock_text(spec: LockSpec, locks_dir: Path | None = None) -> str:
    """The committed lock of `spec`; LockError when it is missing or its header is of another lock."""
    text = _read(spec.path(locks_dir))
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


def service_lock_problems(services) -> list[Problem]:
    """Each service whose engine environment (the base release of a git-ref build) has no committed lock."""
    from gpuhosts.plans.python_env import env_lock, service_env

    found = []
    for index, service in services:
        problem = lock_problem(env_lock(service_env(service)), f"services[{index}].engine.version",
                               f"services[{index}].python")
        if problem:
            found.append(problem)
    return found


def training_lock_problems(training) -> list[Problem]:
    """The trainer's speculators, hidden-state vLLM and monitor environments without a committed lock."""
    from gpuhosts.plans.training_node import FLASK_VERSION

    wanted = [(f"speculators=={training.speculators.version}", "training.speculators.version"),
              (f"vllm=={training.vllm.version}", "training.vllm.version"),
              (f"flask=={FLASK_VERSION}", "training.python")]
    problems = [lock_problem(lock_spec(requirement, training.python), path, "training.python")
                for requirement, path in wanted]
    return [p for p in problems if p]


def require_locks(stack):
    """`stack` (a validated StackConfig or TrainerStack), or ConfigError naming each field whose environment has no
    committed lock — before any unit is planned."""
    from gpuhosts.config import ConfigError

    if hasattr(stack, "training"):
        problems = training_lock_problems(stack.training)
    else:
        problems = service_lock_problems(list(enumerate(stack.services)))
    if problems:
        raise ConfigError(problems)
    return stack


# --- what the committed stacks need --------------------------------------------------------------------------------

def stack_files(project_root: Path = PROJECT_ROOT) -> list[Path]:
    return sorted((project_root / "stacks").glob("Pulumi.*.yaml"))


def stack_locks(stack_file: Path) -> list[LockSpec]:
    """Every lock the plan of `stack_file` asks for, in plan order."""
    from gpuhosts.plan import load_stack, read_stack_file, stand_in_secrets

    other: list[str] = []
    values, secure, _warnings = stand_in_secrets(*read_stack_file(stack_file, other))
    with collecting() as found:
        load_stack(values, secure, other)
    return found


def newest_locks(specs: list[LockSpec]) -> list[LockSpec]:
    """The newest releases of compat-rules.yaml (`newest`), for each package and Python the stacks lock."""
    from gpuhosts.compat import load_rules

    newest = load_rules().newest
    out = []
    for spec in specs:
        version = newest.get(spec.package)
        if version and version != spec.version:
            candidate = spec.with_version(version)
            if candidate not in out and candidate not in specs:
                out.append(candidate)
    return out


def needed_locks(project_root: Path = PROJECT_ROOT) -> list[LockSpec]:
    """The locks of every committed stack, then those of the newest releases."""
    specs: list[LockSpec] = []
    for path in stack_files(project_root):
        specs += [s for s in stack_locks(path) if s not in specs]
    return specs + newest_locks(specs)


# --- writing locks ---------------------------------------------------------------------------------------------

def _hash_lines(line: str) -> bool:
    return line.strip().startswith("--hash=")


def select_hashes(requirements_txt: str, pylock: str) -> str:
    """uv's requirements.txt with, per package, only the hashes of the distributions uv's pylock.toml (the same
    resolution) selects for the platform; refused when the two resolutions differ."""
    selected: dict[str, set[str]] = {}
    for package in tomllib.loads(pylock).get("packages", []):
        key = f"{canonicalize_name(package['name'])}=={package['version']}"
        dists = list(package.get("wheels", [])) + ([package["sdist"]] if "sdist" in package else [])
        selected[key] = {d["hashes"]["sha256"] for d in dists}
    out, current, seen = [], None, set()
    for line in requirements_txt.splitlines():
        pin = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", line)
        if pin:
            current = f"{canonicalize_name(pin[1])}=={pin[2]}"
            if current not in selected:
                raise LockError(f"uv's requirements.txt pins {current}, which its pylock.toml does not")
            seen.add(current)
            out.append(line)
        elif _hash_lines(line):
            digest = line.strip().removeprefix("--hash=sha256:").rstrip(" \\")
            if digest in selected[current]:
                out.append(line)
        else:
            out.append(line)
    for pin in seen:
        if not selected[pin]:
            raise LockError(f"uv's pylock.toml names no distribution of {pin} for {PLATFORM}")
    if seen != set(selected):
        raise LockError(f"uv's two resolutions differ: {sorted(set(selected) ^ seen)}")
    # A pin's last kept hash ends the requirement: no continuation backslash after it.
    text = "\n".join(out) + "\n"
    return re.sub(r" \\\n(?!\s*--hash=)", "\n", text)


def compile_lock(spec: LockSpec, uv: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "requirements.in").write_text(spec.requirement + "\n")
        (work / "constraints.txt").write_text("".join(c + "\n" for c in spec.constraints))
        # Relative names, so that the annotations (`# via -r requirements.in`) do not name a temporary folder.
        base = [str(Path(uv).resolve()), "pip", "compile", "--quiet", "requirements.in", "-c", "constraints.txt",
                "--generate-hashes", "--python-version", spec.python, "--python-platform", PLATFORM, "--no-header"]
        subprocess.run([*base, "-o", "lock.txt"], check=True, cwd=work)
        subprocess.run([*base, "--format", "pylock.toml", "-o", "pylock.lock.toml"], check=True, cwd=work)
        body = select_hashes((work / "lock.txt").read_text(), (work / "pylock.lock.toml").read_text())
    return spec.header() + body


def write_locks(specs: list[LockSpec], uv: str, locks_dir: Path = LOCKS_DIR, jobs: int = 4) -> list[Path]:
    locks_dir.mkdir(parents=True, exist_ok=True)

    def one(spec: LockSpec) -> Path:
        path = spec.path(locks_dir)
        path.write_text(compile_lock(spec, uv))
        print(f"locks: {path.relative_to(locks_dir.parent)} ({path.stat().st_size // 1024} KiB)", flush=True)
        return path

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        written = list(pool.map(one, specs))
    _read.cache_clear()
    return written


def prune(keep: list[LockSpec], locks_dir: Path = LOCKS_DIR) -> None:
    names = {spec.path(locks_dir).name for spec in keep}
    for stale in sorted(locks_dir.glob("*.txt")):
        if stale.name not in names:
            print(f"locks: removing {stale.name} (no stack and no newest release needs it)")
            stale.unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuhosts.locks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--uv", default=str(PROJECT_ROOT / ".tools/bin/uv"), help="the uv that resolves")
    parser.add_argument("--list", action="store_true", help="print the locks the stacks need and exit")
    parser.add_argument("--missing", action="store_true", help="write only the locks that are missing or stale")
    args = parser.parse_args(argv)
    specs = needed_locks()
    if args.list:
        for spec in specs:
            print(f"{spec.path().relative_to(PROJECT_ROOT)}  {spec.requirement}  python {spec.python}  "
                  f"constraints: {', '.join(spec.constraints) or 'none'}")
        return 0
    todo = specs
    if args.missing:
        todo = [s for s in specs if _read(s.path()) is None or header_problem(s, _read(s.path()))]
    write_locks(todo, args.uv)
    prune(specs)
    return 0


if __name__ == "__main__":
    # The plans import gpuhosts.locks; run that module's main, not this copy's (`-m` loads the file as __main__).
    from gpuhosts.locks import main as _main

    sys.exit(_main())
