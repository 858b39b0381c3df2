"""`make verify-engines`: the rendered command lines against the engines' own parsers, in their locked environments.

For the engines of the committed stacks at their pinned releases and at the newest releases of compat-rules.yaml
(`newest`; the service with only `engine.version` changed, as a bump would be), this:

1. installs the release's committed lock (locks/) into build/engines/<lock name> with a Python 3.12 (`uv pip sync
   --require-hashes`; skipped when that lock is already installed there);
2. renders each invocation from the typed stack (`engine_args`, `engine_environment`, the SGLang launcher; the
   trainer's through `gpuhosts.plans.training_node.engine_invocations` where that exists);
3. runs tests/verify_engines/check_<engine>.py inside the environment, invocations as JSON on stdin, and reads its
   one `VERIFY {...}` line;
4. writes the parsers' flag tables and the engines' variable names to tests/fixtures/engines/<engine>-<version>.json
   (what tests/test_engine_argv.py checks offline);
5. ends with one line: `engines: sglang-0.5.11=ok … speculators-0.9.0=ok`, each `ok` or `FAIL:<reason>`.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gpuhosts.compat import load_rules  # noqa: E402
from gpuhosts.locks import LockSpec, lock_spec  # noqa: E402

HERE = Path(__file__).resolve().parent
FIXTURES = ROOT / "tests" / "fixtures" / "engines"
ENVS = ROOT / "build" / "engines"
PROXMOX_STACK = ROOT / "stacks" / "Pulumi.kpro5.yaml"
TRAINER_STACK = ROOT / "stacks" / "Pulumi.trainer.yaml"
# The parser each check script reads the flags from, for the fixture's "source".
PARSERS = {"sglang": "sglang.srt.server_args.ServerArgs.add_cli_args",
           "vllm": "vllm.entrypoints.openai.cli_args.make_arg_parser (the `vllm serve` parser)",
           "speculators": "speculators scripts (tests/verify_engines/check_speculators.py)"}
EXTRAS = {"sglang": "[all]"}


@dataclass
class Target:
    package: str
    version: str
    python: str
    invocations: list[dict] = field(default_factory=list)
    problem: str | None = None

    @property
    def label(self) -> str:
        return f"{self.package}-{self.version}"

    @property
    def lock(self) -> LockSpec:
        return lock_spec(f"{self.package}{EXTRAS.get(self.package, '')}=={self.version}", self.python)


def load(stack_file: Path):
    from gpuhosts.config import stack_kind, StackKind
    from gpuhosts.stacks import validate_stack
    from gpuhosts.plan import read_stack_file, stand_in_secrets
    from gpuhosts.stacks import validate_trainer_stack

    values, secure, _ = stand_in_secrets(*read_stack_file(stack_file))
    if stack_kind(values) is StackKind.TRAINER:
        return validate_trainer_stack(values, secure)
    return validate_stack(values, secure)


def service_invocation(service, stack) -> dict:
    from gpuhosts.plans.inference_service import engine_args, engine_environment, render_service, secret_variable

    files = render_service(service, stack)
    models = [service.model.path] + ([service.speculative.drafter.path] if service.speculative.drafter else [])
    return {"name": f"{service.name}@{service.engine.version}", "package": service.engine.name,
            "version": service.engine.version, "program": engine_args(service)[0], "argv": engine_args(service),
            "environment": engine_environment(service, stack), "models": models,
            "drafter": service.speculative.drafter.path if service.speculative.drafter else None,
            "launcher": files.shipped[0].content if files.shipped else None,
            "key_variable": secret_variable(service)}


def bumped_service(service, version: str):
    """The typed service with only engine.version changed: what a bump in the stack file is."""
    return service.model_copy(update={"engine": service.engine.model_copy(update={"version": version})})


def trainer_invocations(trainer, version: str | None) -> list[dict] | str:
    """The trainer's invocations (speculators and its hidden-state vLLM), or why there are none."""
    from gpuhosts.plans import training_node

    if not hasattr(training_node, "engine_invocations"):
        return "no_engine_invocations_in_training_node"
    if version is not None:
        training = trainer.training
        speculators = training.speculators.model_copy(update={"version": version})
        trainer = dataclasses.replace(trainer, training=training.model_copy(update={"speculators": speculators}))
    return list(training_node.engine_invocations(trainer))


def targets() -> list[Target]:
    newest = load_rules().newest
    proxmox, trainer = load(PROXMOX_STACK), load(TRAINER_STACK)
    found: dict[tuple[str, str], Target] = {}

    def target(package: str, version: str, python: str) -> Target:
        return found.setdefault((package, version), Target(package, version, python))

    for bump in (False, True):
        for service in proxmox.services:
            version = newest[service.engine.name] if bump else service.engine.version
            typed = bumped_service(service, version) if bump else service
            target(typed.engine.name, version, typed.python).invocations.append(service_invocation(typed, proxmox))
        spec_version = newest["speculators"] if bump else trainer.training.speculators.version
        spec_target = target("speculators", spec_version, trainer.training.python)
        invocations = trainer_invocations(trainer, spec_version if bump else None)
        if isinstance(invocations, str):
            spec_target.problem = invocations
            continue
        for invocation in invocations:
            if invocation["package"] == "speculators":
                spec_target.invocations.append(invocation)
            elif (invocation["package"], invocation["version"]) in found:
                # The hidden-state server's `vllm serve` flags, checked by that release's vLLM parser (once).
                same = found[(invocation["package"], invocation["version"])].invocations
                if invocation not in same:
                    same.append(invocation)
    order = ["sglang", "vllm", "speculators"]
    pinned = [t for t in found.values() if newest.get(t.package) != t.version]
    bumped = [t for t in found.values() if newest.get(t.package) == t.version]
    return sorted(pinned, key=lambda t: order.index(t.package)) + sorted(bumped, key=lambda t: order.index(t.package))


def install(target: Target, python: str, uv: str) -> Path:
    lock = target.lock.path()
    if not lock.is_file():
        raise RuntimeError(f"no_lock_{lock.name}")
    return sync_lock(lock, ENVS / target.lock.name, python, uv)


def sync_lock(lock: Path, venv: Path, python: str, uv: str) -> Path:
    """The hashed lock installed into venv, skipped when venv already holds exactly that lock."""
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()
    marker = venv / ".gpuhosts-lock"
    if marker.is_file() and marker.read_text().strip() == digest:
        return venv
    if not (venv / "bin" / "python").exists():
        subprocess.run([uv, "venv", "--quiet", "--python", python, str(venv)], check=True)
    marker.unlink(missing_ok=True)
    subprocess.run([uv, "pip", "sync", "--quiet", "--python", str(venv / "bin" / "python"), "--require-hashes",
                    str(lock)], check=True)
    marker.write_text(digest + "\n")
    return venv


def checkout(target: Target) -> list[str]:
    """speculators' scripts/ are not in its wheel: the node checks out the repository at the release's tag, and so
    does the check (SPECULATORS_REPOSITORY: another clone or mirror of it). A release whose tag that repository lacks
    is checked at SPECULATORS_FALLBACK_REF, when given, and the result says so."""
    if target.package != "speculators":
        return []
    repository = os.environ.get("SPECULATORS_REPOSITORY", "https://github.com/vllm-project/speculators")
    folder = ENVS / f"speculators-src-{target.version}"
    if (folder / "scripts").is_dir():
        return [str(folder)]
    shutil.rmtree(folder, ignore_errors=True)
    for ref in (f"v{target.version}", os.environ.get("SPECULATORS_FALLBACK_REF")):
        if not ref:
            continue
        cloned = subprocess.run(["git", "clone", "--quiet", "--depth", "1", "--branch", ref, repository, str(folder)],
                                capture_output=True, text=True)
        if cloned.returncode == 0:
            (folder / ".gpuhosts-ref").write_text(ref + "\n")
            return [str(folder)]
        shutil.rmtree(folder, ignore_errors=True)
    raise RuntimeError(f"no_checkout_of_v{target.version}")


def check(target: Target, venv: Path) -> dict:
    script = HERE / f"check_{target.package}.py"
    if not script.is_file():
        return {"ok": False, "reason": f"no_{script.name}"}
    done = subprocess.run([str(venv / "bin" / "python"), str(script), *checkout(target)],
                          input=json.dumps(target.invocations),
                          capture_output=True, text=True, cwd=ROOT, timeout=1800)
    lines = [l for l in done.stdout.splitlines() if l.startswith("VERIFY ")]
    if len(lines) != 1:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        return {"ok": False, "reason": f"{script.name} printed {len(lines)} VERIFY lines (status {done.returncode}): "
                                       + " | ".join(tail)}
    result = json.loads(lines[0].removeprefix("VERIFY "))
    if not result.get("ok"):
        sys.stderr.write(done.stderr[-4000:])
    return result


def write_fixture(target: Target, result: dict) -> None:
    """Only from a check that passed: a failed one may have seen less (a program it could not reach)."""
    if not result.get("ok") or not result.get("flags"):
        return
    FIXTURES.mkdir(parents=True, exist_ok=True)
    source = result.get("source") or PARSERS[target.package]
    fixture = {"source": f"{target.package} {target.version} (locks/{target.lock.path().name}): {source}",
               "package": target.package, "version": target.version,
               "flags": result["flags"], "environment": sorted(result.get("environment", []))}
    path = FIXTURES / f"{target.package}-{target.version}.json"
    path.write_text(json.dumps(fixture, indent=1, sort_keys=True) + "\n")


def short(reason: str) -> str:
    """The figure's reason: one word, at most 60 characters."""
    return re.sub(r"[^A-Za-z0-9_.:=<>/+-]+", "_", reason).strip("_")[:60] or "failed"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="a Python 3.12 for the environments")
    parser.add_argument("--uv", default=str(ROOT / ".tools" / "bin" / "uv"))
    parser.add_argument("--only", action="append", help="labels to run (sglang-0.5.11, …); default all")
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 when an entry fails (by default the figure, printed last, carries the verdict)")
    args = parser.parse_args(argv)
    figure = []
    for target in targets():
        if args.only and target.label not in args.only:
            continue
        if target.problem:
            figure.append(f"{target.label}=FAIL:{short(target.problem)}")
            continue
        try:
            venv = install(target, args.python, args.uv)
            result = check(target, venv)
        except (RuntimeError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
            result = {"ok": False, "reason": str(error)}
        write_fixture(target, result)
        print(f"{target.label}: {'ok' if result['ok'] else 'FAIL'} — {result['reason']}", flush=True)
        figure.append(f"{target.label}=" + ("ok" if result["ok"] else f"FAIL:{short(result['reason'])}"))
    print("engines: " + " ".join(figure))
    return 1 if args.strict and not all(entry.endswith("=ok") for entry in figure) else 0


if __name__ == "__main__":
    sys.exit(main())
