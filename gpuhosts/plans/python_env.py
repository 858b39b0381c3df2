"""PythonEnv: a service's engine in a uv virtual environment inside its container; no change when already right.

uv itself is pinned and bootstrapped once per container from the container's python3; each service gets its own
environment, so two engines (or two builds of one) never share dependencies. An environment installs the locked
closure of its release (gpuhosts/locks.py): the lock goes to the host beside the venv and `uv pip sync
--require-hashes` installs exactly it; a git-ref build then replaces the package itself with `--no-deps`.
The probe reads what the venv holds from the venv itself (each distribution's dist-info), not from a marker gpuhosts
wrote: a release installed over the lock by hand (`uv pip install sglang==0.5.9`) is drift that names it, and the
ensure syncs the lock back.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from gpuhosts.envspec import EnvSpec, env_lock
from gpuhosts.facts import Fact, desired, files_facts, render_probe
from gpuhosts.locks import lock_digest, lock_text, locked_pins
from gpuhosts.paths import SERVICE_ROOT
from gpuhosts.render import HostFile, render
from gpuhosts.units import Unit

# uv as every machine installs it, pinned by the sha256 of each wheel of its release (the file `make` installs too).
UV_REQUIREMENT = "".join(line for line in (Path(__file__).resolve().parent.parent / "uv-requirements.txt")
                         .read_text().splitlines(keepends=True) if not line.startswith("#"))
UV_VERSION = re.search(r"^uv==(\S+)", UV_REQUIREMENT, re.M)[1]
UV_HOME = f"{SERVICE_ROOT}/.uv"
# `pct exec VMID -- bash -c SCRIPT` passes the script as one argument, and Linux takes at most 32 pages (128 KiB)
# in one argument string (MAX_ARG_STRLEN, execve(2)): a larger script would fail with "Argument list too long".
MAX_INNER_SCRIPT = 131072 - 1


def lock_file(env: EnvSpec) -> HostFile:
    """The environment's committed lock, as the file it installs from (gpuhosts.locks.LockError when missing)."""
    return HostFile(env.lock_path, lock_text(env_lock(env)))


def env_marker(env: EnvSpec, lock: HostFile) -> str:
    """What the venv's marker holds after a complete install: the requirement and the lock it came from, so that a
    changed lock (a new constraint, a regenerated closure) reinstalls."""
    return f"{env.requirement} lock:{lock_digest(lock.content)}"


def in_container(unit: str, vmid: int | None, inner: str, *, secret: str | None = None, teardown: bool = False) -> str:
    """A host command that runs `inner` inside container `vmid`, with `secret` (a name) passed on through stdin.
    Without a container (a training node) the script is the command itself and reads the secret from stdin."""
    if vmid is None:
        return inner
    size = len(inner.encode())
    if size > MAX_INNER_SCRIPT:
        raise ValueError(f"unit {unit}: its script inside container {vmid} is {size} bytes; `pct exec -- bash -c` takes "
                         f"at most {MAX_INNER_SCRIPT} (MAX_ARG_STRLEN)")
    return render("common/in-container.sh.j2", unit=unit, vmid=vmid, inner=inner.rstrip("\n"),
                  secret=secret, teardown=teardown)


def distributions_desired(pins: list[str]) -> str:
    """What `distributions_state` (templates/python_env/distributions.sh.j2) prints for a venv holding
    exactly `pins`."""
    digest = hashlib.sha256("".join(f"{pin}\n" for pin in pins).encode()).hexdigest()[:16]
    return f"{len(pins)} distributions sha256:{digest}"


def package_desired(env: EnvSpec) -> str:
    """What `package_state` prints for the environment's own package: its release, or the git URL it was built
    from."""
    package = canonicalize_name(env.package)
    if env.from_git:
        return f"{package} from {env.requirement.split(' @ ', 1)[1].strip()}"
    return f"{package} {env.release}"


@dataclass(frozen=True)
class Distributions:
    """What a venv must hold, as the probe and the ensure read it from its dist-info: the lock's pins (less the
    package itself for a git build, whose version the build decides) and the package."""

    venv: str
    package: str
    skip: str
    pins: tuple[str, ...]

    @property
    def setup(self) -> tuple[str, ...]:
        wanted = "\n".join(self.pins)
        return (render("python_env/distributions.sh.j2").rstrip("\n"),
                f"distributions_wanted[{shlex.quote(self.venv)}]={shlex.quote(wanted)}")

    def facts(self, env: EnvSpec) -> list[Fact]:
        venv = shlex.quote(self.venv)
        return [Fact(f"distributions in {self.venv}", f"distributions_state {venv} {shlex.quote(self.skip)}",
                     distributions_desired(list(self.pins)), self.setup),
                Fact(f"{self.package} in {self.venv}", f"package_state {venv} {shlex.quote(self.package)}",
                     package_desired(env), self.setup)]


def distributions(env: EnvSpec, lock: HostFile) -> Distributions:
    package = canonicalize_name(env.package)
    skip = package if env.from_git else ""
    return Distributions(env.venv, package, skip,
                         tuple(pin for pin in locked_pins(lock.content) if not skip or pin.split("==")[0] != skip))


def env_facts(env: EnvSpec, lock: HostFile) -> list[Fact]:
    # What the environment holds, read from it: a distribution installed by hand beside or over the lock shows.
    facts = [*files_facts([lock]), *distributions(env, lock).facts(env)]
    if env.checkout_url and re.fullmatch(r"[0-9a-f]{40}", env.checkout_ref or ""):
        # pinned by a commit: the files themselves are read against it
        facts.append(Fact(f"checkout {env.checkout}", f'checkout_state "$root"{shlex.quote(env.checkout)}',
                          f"{env.checkout_ref}, unmodified", (render("common/checkout.sh.j2"),)))
    elif env.checkout_url:
        facts.append(Fact(f"checkout {env.checkout}", f'cat "$root"{shlex.quote(env.checkout + "/.gpuhosts-ref")} || echo missing',
                          env.checkout_ref))
    return facts


def plan_env(unit: str, env: EnvSpec, vmid: int | None, needs: tuple[str, ...], kind: str = "PythonEnv") -> Unit:
    lock = lock_file(env)
    facts = env_facts(env, lock)
    wanted = distributions(env, lock)
    values = dict(unit=unit, vmid=vmid, env=env, uv_version=UV_VERSION, uv_requirement=UV_REQUIREMENT, uv_home=UV_HOME, envs_root=SERVICE_ROOT,
                  lock=lock, marker=env_marker(env, lock), wanted=wanted, desired=desired(facts))
    return Unit(
        key=unit,
        kind=kind,
        ensure=in_container(unit, vmid, render("python_env/python-env.sh.j2", **values)),
        teardown=in_container(unit, vmid, render("python_env/python-env-teardown.sh.j2", **values),
                              teardown=True),
        probe=probe_in(unit, vmid, facts),
        desired=desired(facts),
        needs=needs,
        files=(lock,),
        container=vmid,
        undoes=(f"uv environment {env.venv} ({env.requirement}) removed from "
                f"{f'CT {vmid}' if vmid is not None else 'the node'}; uv too when no environment uses it"),
    )


def probe_in(unit: str, vmid: int | None, facts: list[Fact], host_facts: list[Fact] = (), prelude: str = "") -> str:
    """A probe whose facts are observed where the unit acts: inside container `vmid`, or on the node itself."""
    if vmid is None:
        return render_probe(unit, [*host_facts, *facts], prelude=prelude)
    return render_probe(unit, list(host_facts), vmid=vmid, container_facts=facts, container_prelude=prelude)
