"""Applies a `gpuhosts plan` the way pulumi-command does, over real SSH, and keeps state the way Pulumi does.

The plan is `DIR/resources.json` (every resource: type, name, parent, dependencies, inputs). Only the command
resources act; components only pass their dependencies on to their children
(`gpuhosts.plan.effective_dependencies`). The `connection` input is secret in the plan, so the target
(host, port, user, pinned host key) comes from the stack file and the private key from the caller.

What it does, as pulumi-command and the Pulumi engine do:

* one SSH connection per command resource and operation, the command string sent as the remote command, `stdin`
  on the remote command's standard input, `environment` sent as SSH `setenv` (which sshd ignores unless `AcceptEnv`
  names the variable);
* a resource not in the state runs `create`; a change of any input but `triggers` runs `update` (`create` when
  there is none); a change of `triggers` replaces it: the new `create`, and the old stored `delete` once the
  rest has been applied; a resource in the state but gone from the plan runs its stored `delete`;
* commands run in dependency order, deletes in reverse dependency order;
* a command that fails (or whose connection drops) is not recorded: its old state stays, the run stops there;
* `destroy` runs every stored `delete` in reverse dependency order and forgets each resource whose delete ran.

The state file is JSON: per URN the type, name, dependencies, the inputs the resource was last applied with, and
the command's stdout and stderr. Every command run is appended to a log (JSON lines).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Callable

from gpuhosts.plan import Recorded, apply_order, effective_dependencies, read_stack_file
from sshhost import ACCEPT_ENV, ssh_argv

PROJECT = Path(__file__).resolve().parents[2]
# Inputs pulumi-command never diffs on the host's behalf: the connection is secret in the plan (and would
# only send the command elsewhere), the rest are defaults of the provider.
NOT_DIFFED = ("connection",)
# ssh's own failures (exit status 255) that mean the command never started on the host.
DIAL_FAILURES = ("ssh: connect to host", "Connection refused", "Connection timed out", "No route to host",
                 "Could not resolve hostname", "Host key verification failed", "Permission denied",
                 "kex_exchange_identification", "Connection reset by peer")


# --- errors --------------------------------------------------------------------------------------------------
class ApplyError(RuntimeError):
    """An operation stopped at a command; `runs` are the commands it ran, the failed one last."""

    def __init__(self, message: str, runs: list["Run"]):
        super().__init__(message)
        self.runs = runs


class CommandFailed(ApplyError):
    pass


class ConnectionLost(ApplyError):
    pass


class HostUnreachable(ApplyError):
    pass


# --- target and plan -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    host: str
    port: int
    user: str
    host_key: str
    private_key: Path
    known_hosts: Path

    @classmethod
    def from_stack_file(cls, stack_file: Path, private_key: Path, workdir: Path) -> "Target":
        values, _secure = read_stack_file(Path(stack_file))
        # A Proxmox host's stack names it gpuhosts:host, a training node's gpuhosts:node.
        ssh = (values.get("host") or values["node"])["ssh"]
        host, port, host_key = ssh["host"], int(ssh.get("port", 22)), ssh["hostKey"]
        workdir.mkdir(parents=True, exist_ok=True)
        known_hosts = workdir / "known_hosts"
        name = host if port == 22 else f"[{host}]:{port}"
        known_hosts.write_text(f"{name} {host_key}\n")
        return cls(host, port, ssh.get("user", "root"), host_key, Path(private_key), known_hosts)


def write_plan(stack: str, stack_file: Path, out: Path, project: Path = PROJECT) -> Path:
    """The real `gpuhosts plan`, as a separate process."""
    result = subprocess.run([sys.executable, "-m", "gpuhosts.cli", "plan", stack, "--stack-file", str(stack_file),
                             "--out", str(out)], cwd=project, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"gpuhosts plan failed:\n{result.stdout}{result.stderr}")
    return out


def read_plan(plan_dir: Path) -> list[Recorded]:
    """The command resources of a plan, each with the command resources it waits for."""
    resources = [Recorded(r["urn"], r["type"], r["name"], r["parent"], r["dependencies"], r["inputs"])
                 for r in json.loads((Path(plan_dir) / "resources.json").read_text())]
    return apply_order(effective_dependencies(resources))


def stdin_secret_names(plan_dir: Path) -> dict[str, str]:
    """Per command: the name of the secret it gets on stdin (commands/NN-name/resource.json says "[secret ns:key]")."""
    names = {}
    for path in (Path(plan_dir) / "hosts").glob("*/commands/*/resource.json"):
        stdin = json.loads(path.read_text()).get("stdin")
        if stdin:
            names[path.parent.name.split("-", 1)[1]] = stdin.removeprefix("[secret ").removesuffix("]").split(":", 1)[1]
    return names


def _comparable(inputs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in inputs.items() if k not in NOT_DIFFED and k != "triggers"}


def diff(old: dict[str, Any], new: dict[str, Any]) -> str:
    """'same', 'update' or 'replace', as pulumi-command decides for a Command."""
    if old.get("triggers") != new.get("triggers"):
        return "replace"
    return "same" if _comparable(old) == _comparable(new) else "update"


# --- runs ----------------------------------------------------------------------------------------------------
@dataclass
class Run:
    urn: str
    name: str
    operation: str          # create, update, delete
    outcome: str = ""       # ok, failed, lost, unreachable
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0
    fault: str = ""

    @property
    def changed(self) -> bool:
        return self.stdout.rstrip().endswith("done: changed")


@dataclass
class Fault:
    """Drop the connection of the `at`-th command an operation runs (1-based), mid-command.

    It fires after `after_lines` lines of the command's output or `after_seconds`, whichever comes first (at least
    one must be given); `action` does the dropping (kill the client, the host's side of the connection, ...) and gets the ssh
    client process. `fired` tells whether the command was still running when it fired.
    """

    at: int
    action: Callable[[subprocess.Popen], None]
    after_lines: int | None = None
    after_seconds: float | None = None
    label: str = "drop"
    fired: bool = False


@dataclass
class Executor:
    target: Target
    state_file: Path
    log_file: Path
    local_env: dict[str, str] | None = None
    dial_attempts: int = 1
    runs: list[Run] = field(default_factory=list)
    # Values of the stack's secrets by key name (`hfToken`), as the engine decrypts them for a command's stdin.
    secrets: dict[str, str] = field(default_factory=dict)
    stdin_secrets: dict[str, str] = field(default_factory=dict)

    # --- state ------------------------------------------------------------------------------------------------
    def state(self) -> dict[str, dict[str, Any]]:
        if not self.state_file.exists():
            return {}
        return json.loads(self.state_file.read_text())["resources"]

    def _save(self, resources: dict[str, dict[str, Any]]) -> None:
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"version": 1, "resources": resources}, indent=2, sort_keys=True) + "\n")
        tmp.replace(self.state_file)

    def stack_rm(self) -> None:
        """`pulumi stack rm --force`: forget every resource, touching nothing on the host."""
        self.state_file.unlink(missing_ok=True)

    # --- operations -------------------------------------------------------------------------------------------
    def preview(self, plan_dir: Path) -> dict[str, str]:
        """Per resource name: create, update, replace, delete or same."""
        stored = self.state()
        wanted = read_plan(plan_dir)
        steps = {r.name: ("create" if r.urn not in stored else diff(stored[r.urn]["inputs"], r.inputs)) for r in wanted}
        urns = {r.urn for r in wanted}
        steps.update({s["name"]: "delete" for urn, s in stored.items() if urn not in urns})
        return steps

    def up(self, plan_dir: Path, fault: Fault | None = None, targets: list[str] | None = None,
           on_applied: Callable[[Run], None] | None = None) -> list[Run]:
        """`pulumi up`; with `targets` (resource names) `pulumi up --target`: only those, nothing else touched."""
        stored = self.state()
        wanted = read_plan(plan_dir)
        self.stdin_secrets = stdin_secret_names(plan_dir)
        if targets is not None:
            unknown = set(targets) - {r.name for r in wanted}
            if unknown:
                raise ValueError(f"no such resource in the plan: {sorted(unknown)}")
            wanted = [r for r in wanted if r.name in targets]
        runs: list[Run] = []
        pending_deletes: dict[str, dict[str, Any]] = {}
        for resource in wanted:
            old = stored.get(resource.urn)
            step = "create" if old is None else diff(old["inputs"], resource.inputs)
            if step == "same":
                # The engine writes the new registration (dependencies, parent) without running anything.
                old.update(dependencies=resource.dependencies, parent=resource.parent)
                continue
            operation = "update" if step == "update" else "create"
            text = resource.inputs.get("update") if step == "update" else None
            if text is None:
                text = resource.inputs.get("create")
            previous = old["stdout"] if old else None
            run = self._execute(resource, operation, text, resource.inputs, runs, fault, previous)
            if step == "replace":
                pending_deletes[resource.urn + "#replaced"] = old
            stored[resource.urn] = {
                "type": resource.type, "name": resource.name, "parent": resource.parent,
                "dependencies": resource.dependencies, "inputs": resource.inputs,
                "stdout": run.stdout, "stderr": run.stderr,
            }
            self._save(stored)
            if on_applied is not None:
                on_applied(run)
        if targets is not None:
            self._save(stored)
            return runs
        urns = {r.urn for r in wanted}
        for urn in [u for u in stored if u not in urns]:
            pending_deletes[urn] = stored[urn]
        for key in _reverse_order(pending_deletes):
            entry = pending_deletes[key]
            self._run_delete(key.split("#", 1)[0], entry, runs, fault)
            if "#" not in key:
                del stored[key]
            self._save(stored)
        self._save(stored)
        return runs

    def destroy(self, continue_on_error: bool = False) -> list[Run]:
        stored = self.state()
        runs: list[Run] = []
        errors: list[ApplyError] = []
        kept: set[str] = set()
        for urn in _reverse_order(stored):
            entry = stored[urn]
            if any(urn in stored[k]["dependencies"] for k in kept):
                kept.add(urn)  # something that depends on it is still there
                continue
            try:
                self._run_delete(urn, entry, runs, None)
            except ApplyError as error:
                if not continue_on_error:
                    raise self._destroy_error(error, runs) from None
                errors.append(error)
                kept.add(urn)
                continue
            del stored[urn]
            self._save(stored)
        self._save(stored)
        if errors:
            raise ApplyError(f"destroy left {len(kept)} resource(s) in the state:\n"
                             + "\n".join(str(e) for e in errors) + "\n" + self._gone_for_good(), runs)
        return runs

    def _destroy_error(self, error: ApplyError, runs: list[Run]) -> ApplyError:
        if isinstance(error, HostUnreachable):
            return HostUnreachable(f"{error}\n{self._gone_for_good()}", runs)
        return type(error)(str(error), runs)

    def _gone_for_good(self) -> str:
        return ("Nothing was removed from the state for the resources above. If the host is gone for good, run "
                "`pulumi destroy --continue-on-error`, then `pulumi stack rm` to forget it.")

    # --- one command ------------------------------------------------------------------------------------------
    def _run_delete(self, urn: str, entry: dict[str, Any], runs: list[Run], fault: Fault | None) -> None:
        text = entry["inputs"].get("delete")
        if text is None:
            return
        resource = Recorded(urn, entry["type"], entry["name"], entry.get("parent"), entry["dependencies"],
                            entry["inputs"])
        self._execute(resource, "delete", text, entry["inputs"], runs, fault, entry.get("stdout"))

    def _execute(self, resource: Recorded, operation: str, text: str | None, inputs: dict[str, Any],
                 runs: list[Run], fault: Fault | None, previous_stdout: str | None) -> Run:
        run = Run(resource.urn, resource.name, operation)
        if text is None:
            run.outcome = "ok"
            return run
        environment = dict(inputs.get("environment") or {})
        if inputs.get("addPreviousOutputInEnv", True) and previous_stdout is not None and operation != "create":
            environment["PULUMI_COMMAND_STDOUT"] = previous_stdout
        stdin = inputs.get("stdin")
        if stdin == "[secret]":
            # The plan keeps only the name of the secret a command reads; the engine would send its value.
            stdin = self.secrets[self.stdin_secrets[resource.name]] + "\n"
        runs.append(run)
        refused = refused_variables(environment) if resource.type == "command:remote:Command" else []
        if refused:
            # pulumi-command asks for each variable and fails when sshd says no; the system client does not tell.
            run.outcome, run.stderr = "failed", (
                f"Unable to set '{refused[0]}'. This is most likely because the SSH server's AcceptEnv "
                f"({' '.join(ACCEPT_ENV)}) does not allow it\n")
            self._log(run)
            raise CommandFailed(f"{resource.name}: {operation}: {run.stderr.strip()}", runs)
        this_fault = fault if fault is not None and len(runs) == fault.at else None
        if resource.type == "command:local:Command":
            argv = [*(inputs.get("interpreter") or ["/bin/sh", "-c"]), text]
            env = dict(self.local_env if self.local_env is not None else os.environ)
            env.update(environment)
        else:
            options: list[str] = []
            for name, value in environment.items():
                options += ["-o", f"SetEnv={name}={value}"]
            argv = ssh_argv(self.target.host, self.target.port, self.target.user, self.target.known_hosts,
                            self.target.private_key, text, *options)
            env = None
        started = time.monotonic()
        for attempt in range(max(1, self.dial_attempts)):
            self._spawn(run, argv, env, stdin, this_fault)
            if not (resource.type != "command:local:Command" and self._dial_failed(run)):
                break
            run.outcome = "unreachable"
            if attempt + 1 < self.dial_attempts:
                time.sleep(1)
        run.seconds = time.monotonic() - started
        self._log(run)
        if run.outcome == "unreachable":
            raise HostUnreachable(
                f"{resource.name}: {operation} could not reach {self.target.user}@{self.target.host}:{self.target.port}: "
                f"{run.stderr.strip()}", runs)
        if run.outcome == "lost":
            raise ConnectionLost(f"{resource.name}: {operation}: the connection dropped mid-command "
                                 f"({run.fault or 'status ' + str(run.returncode)})\n{_tail(run)}", runs)
        if run.returncode != 0:
            run.outcome = "failed"
            raise CommandFailed(f"{resource.name}: {operation} exited with status {run.returncode}\n{_tail(run)}", runs)
        run.outcome = "ok"
        return run

    def _spawn(self, run: Run, argv: list[str], env: dict[str, str] | None, stdin: str | None,
               fault: Fault | None) -> None:
        process = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        out: list[str] = []
        err: list[str] = []
        readers = [threading.Thread(target=_drain, args=(process.stdout, out), daemon=True),
                   threading.Thread(target=_drain, args=(process.stderr, err), daemon=True)]
        for reader in readers:
            reader.start()
        if stdin is not None:
            try:
                process.stdin.write(stdin.encode())
                process.stdin.close()
            except BrokenPipeError:
                pass
        started = time.monotonic()
        dropped = False
        while process.poll() is None:
            if fault is not None and not fault.fired and (
                    (fault.after_lines is not None and len(out) >= fault.after_lines)
                    or (fault.after_seconds is not None and time.monotonic() - started >= fault.after_seconds)):
                fault.fired = dropped = True
                fault.action(process)
            time.sleep(0.005)
        process.wait()
        for reader in readers:
            reader.join(timeout=10)
        run.returncode = process.returncode
        run.stdout, run.stderr = "".join(out), "".join(err)
        if dropped:
            run.outcome, run.fault = "lost", f"{fault.label} after {time.monotonic() - started:.2f}s"
        elif process.returncode != 0 and process.returncode < 0:
            run.outcome = "lost"

    @staticmethod
    def _dial_failed(run: Run) -> bool:
        return run.returncode == 255 and not run.stdout and any(m in run.stderr for m in DIAL_FAILURES)

    def _log(self, run: Run) -> None:
        self.runs.append(run)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        record = asdict(run)
        record["time"] = time.strftime("%Y-%m-%dT%H:%M:%S")
        with self.log_file.open("a") as log:
            log.write(json.dumps(record, sort_keys=True) + "\n")


def refused_variables(environment: dict[str, str]) -> list[str]:
    """The variables a Debian sshd ignores when a client sends them (not named by its AcceptEnv)."""
    return [n for n in environment if not any(fnmatchcase(n, p) for p in ACCEPT_ENV)]


def _drain(stream, sink: list[str]) -> None:
    for line in iter(stream.readline, b""):
        sink.append(line.decode(errors="replace"))
    stream.close()


def _tail(run: Run, lines: int = 20) -> str:
    text = (run.stdout + run.stderr).rstrip().splitlines()
    return "\n".join(text[-lines:])


def _reverse_order(entries: dict[str, dict[str, Any]]) -> list[str]:
    """Keys in reverse dependency order: whatever depends on a resource goes before it."""
    base = {k: k.split("#", 1)[0] for k in entries}
    remaining = sorted(entries, key=lambda k: entries[k]["name"])
    ordered: list[str] = []
    while remaining:
        # ready: nothing still remaining depends on it
        ready = [k for k in remaining
                 if not any(base[k] in entries[o]["dependencies"] for o in remaining if o != k)]
        if not ready:
            ready = remaining[:1]
        ordered.append(ready[0])
        remaining.remove(ready[0])
    return ordered
