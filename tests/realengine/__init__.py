"""The real Pulumi CLI (built by `make pulumi` into .tools/pulumi) running gpuhosts, as an operator runs it.

A ``Project`` is a checkout of the product in a folder of its own (the files a user's clone has, its own `.venv`
synced from uv.lock, offline), with the file backend, a `PULUMI_HOME` and a passphrase of its own, so that tests
never touch the repository's stack files and run side by side. A ``Stack`` is `pulumi stack init` of a committed
stack file whose values the test aims at a simulated host, exactly as an operator edits a stack file, and whose
secrets go in through `pulumi config set --secret`, so the file carries real `secure:` values.

Every operation is the CLI's own: `preview --json` (its steps, detailed diffs and diagnostics), `up --json` (the
engine's event stream: each resource's operation), `refresh`, `destroy`, `stack export`, `stack output`. The
provider's per-operation lines go to the file GPUHOSTS_PROVIDER_LOG names (gpuhosts/oplog.py): what ran on the
host, unit by unit, beside what the host itself shows (its tree's digest).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

PROJECT = Path(__file__).resolve().parents[2]
PULUMI_TOOLS = PROJECT / ".tools" / "pulumi"
UV = PROJECT / ".tools" / "bin" / "uv"
# What a clone of the product holds that a `pulumi up` reads: the project, its locked environment, its code,
# templates and locks, and the patches its stack files name.
PRODUCT = ("Pulumi.yaml", "__main__.py", "pyproject.toml", "uv.lock", "README.md", "gpuhosts", "components",
           "gpuhosts_monitor", "templates", "locks", "stacks/patches")
PASSPHRASE = "gpuhosts real-engine tier"
# A cap that reports a hang, never a verdict: a converge of kpro5 with its services takes well under a minute.
COMMAND_CAP_S = 900
UNIT_LINE = re.compile(r"^gpuhosts-unit: (?P<unit>\S+) (?P<script>ensure|teardown|probe) status=")


class CliFailed(AssertionError):
    def __init__(self, run: "Run"):
        super().__init__(f"pulumi {' '.join(run.args)} exited {run.returncode}:\n{run.stdout[-6000:]}\n"
                         f"{run.stderr[-6000:]}")
        self.run = run


@dataclass
class Run:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    host_operations: list[tuple[str, str]] = field(default_factory=list)  # (unit, ensure|teardown) that ran
    provider_lines: list[str] = field(default_factory=list)  # the provider's log lines of this run (gpuhosts/oplog.py)

    @property
    def events(self) -> list[dict[str, Any]]:
        """`pulumi up/destroy/refresh --json`: one engine event per line."""
        return [json.loads(line) for line in self.stdout.splitlines() if line.startswith("{")]

    def operations(self) -> dict[str, str]:
        """Each resource's step (create, update, delete, same, refresh, …) by its name, from the event stream."""
        ops = {}
        for event in self.events:
            outputs = event.get("resOutputsEvent") or event.get("resOpFailedEvent")
            if outputs:
                metadata = outputs["metadata"]
                ops[urn_name(metadata["urn"])] = metadata["op"] if "resOutputsEvent" in event else "failed"
        return ops

    def changed(self) -> dict[str, str]:
        return {name: op for name, op in self.operations().items() if op not in ("same", "refresh", "read")}

    def errors(self) -> dict[str, str]:
        """Each failed resource's error, by name, as the engine reported it (its error diagnostics, joined)."""
        found: dict[str, str] = {}
        for event in self.events:
            diagnostic = event.get("diagnosticEvent")
            if diagnostic and diagnostic.get("severity") == "error" and diagnostic.get("urn"):
                name = urn_name(diagnostic["urn"])
                found[name] = found.get(name, "") + diagnostic.get("message", "")
        return found

    def error_text(self) -> str:
        """Every error the run reported: its resources' and its own."""
        return "\n".join(self.diagnostics("error"))

    def dials(self) -> int:
        """The SSH dials the provider made in this run (gpuhosts/ssh.py logs each one)."""
        return sum(line.startswith("gpuhosts-ssh: dial ") for line in self.provider_lines)

    def diagnostics(self, severity: str | None = None) -> list[str]:
        found = []
        for event in self.events:
            diagnostic = event.get("diagnosticEvent")
            if diagnostic and (severity is None or diagnostic.get("severity") == severity):
                found.append(diagnostic.get("message", ""))
        return found


@dataclass
class Preview:
    run: Run
    steps: list[dict[str, Any]]
    diagnostics: list[dict[str, Any]]

    def changed(self) -> dict[str, tuple[str, list[str]]]:
        """What the preview would do, per resource name: its operation and the changed property paths."""
        return {urn_name(step["urn"]): (step["op"], sorted((step.get("detailedDiff") or {}).keys()))
                for step in self.steps if step["op"] not in ("same", "refresh", "read")}

    def errors(self) -> dict[str, str]:
        """Each resource's error diagnostics, by name, joined."""
        found: dict[str, str] = {}
        for diagnostic in self.diagnostics:
            if diagnostic.get("severity") == "error" and diagnostic.get("urn"):
                name = urn_name(diagnostic["urn"])
                found[name] = found.get(name, "") + diagnostic.get("message", "")
        return found

    def error_text(self) -> str:
        return "\n".join(d.get("message", "") for d in self.diagnostics if d.get("severity") == "error")

    def facts(self, name: str) -> dict[str, Any]:
        """The refreshed facts of a unit: the old inputs its update step compared with the program's (its refresh
        step's old state is the state before the refresh)."""
        for step in self.steps:
            if urn_name(step["urn"]) == name and step["op"] not in ("refresh", "read"):
                return ((step.get("oldState") or {}).get("inputs") or {}).get("facts") or {}
        raise KeyError(name)


def urn_name(urn: str) -> str:
    return urn.rsplit("::", 1)[-1]


def cli_available() -> str:
    """Why the tier cannot run here, or '' when it can."""
    if not (PULUMI_TOOLS / "pulumi").is_file():
        return f"the Pulumi CLI is not built: run `make pulumi` (it builds into {PULUMI_TOOLS})"
    if not UV.is_file():
        return f"uv is not bootstrapped: run `make pulumi` ({UV})"
    return ""


def pulumi_version() -> str:
    return subprocess.run([str(PULUMI_TOOLS / "pulumi"), "version"], capture_output=True, text=True,
                          check=True).stdout.strip()


class Project:
    """A checkout of the product in `root`, with a file backend, a PULUMI_HOME and a passphrase of its own."""

    def __init__(self, root: Path):
        problem = cli_available()
        if problem:
            raise RuntimeError(problem)
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        for name in PRODUCT:
            source, target = PROJECT / name, self.root / name
            if source.is_dir():
                shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
        (self.root / "stacks").mkdir(exist_ok=True)
        # The CLI `make pulumi` built, where the preview workflow's step finds it ($PWD/.tools/pulumi).
        (self.root / ".tools").symlink_to(PROJECT / ".tools")
        self.backend = self.root.parent / f"{self.root.name}-backend"
        self.home = self.root.parent / f"{self.root.name}-pulumi-home"
        self.provider_log = self.root.parent / f"{self.root.name}-provider.log"
        for folder in (self.backend, self.home):
            folder.mkdir(parents=True, exist_ok=True)
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("PULUMI_", "UV_", "VIRTUAL_ENV"))},
            "PATH": f"{PULUMI_TOOLS}{os.pathsep}{os.environ.get('PATH', '')}",
            "PULUMI_HOME": str(self.home),
            "PULUMI_BACKEND_URL": f"file://{self.backend}",
            "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
            # The update check is the one outbound call of a file backend; plugins are bundled, never downloaded.
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            # The uv toolchain runs `uv sync --inexact` before each program run: locked and offline.
            "UV_FROZEN": "1", "UV_OFFLINE": "1", "UV_PYTHON_DOWNLOADS": "never",
            "GPUHOSTS_PROVIDER_LOG": str(self.provider_log),
        }
        synced = subprocess.run([str(UV), "sync", "--frozen", "--offline", "--quiet", "--python",
                                 str(Path(os.path.realpath(PROJECT / ".venv" / "bin" / "python")))],
                                cwd=self.root, env=self.env, capture_output=True, text=True)
        if synced.returncode != 0:
            raise RuntimeError(f"uv sync of the project copy failed:\n{synced.stderr}")

    def pulumi(self, *args: str, stack: str | None = None, input: str | None = None, check: bool = True,
               timeout: float = COMMAND_CAP_S, cwd: Path | None = None) -> Run:
        argv = [str(PULUMI_TOOLS / "pulumi"), *args, "--non-interactive", *(["--stack", stack] if stack else [])]
        log_start = self.provider_log.stat().st_size if self.provider_log.exists() else 0
        started = time.monotonic()
        result = subprocess.run(argv, cwd=cwd or self.root, env=self.env, input=input, capture_output=True, text=True,
                                timeout=timeout)
        lines = self.provider_lines(log_start)
        run = Run(list(args), result.returncode, result.stdout, result.stderr, time.monotonic() - started,
                  host_operations(lines), lines)
        if check and run.returncode != 0:
            raise CliFailed(run)
        return run

    def start(self, *args: str, stack: str) -> subprocess.Popen:
        """A CLI command left running, in a process group of its own (for interrupting it)."""
        argv = [str(PULUMI_TOOLS / "pulumi"), *args, "--non-interactive", "--stack", stack]
        return subprocess.Popen(argv, cwd=self.root, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)

    def provider_lines(self, offset: int = 0) -> list[str]:
        if not self.provider_log.exists():
            return []
        with self.provider_log.open(encoding="utf-8") as log:
            log.seek(offset)
            return log.read().splitlines()


def host_operations(lines: list[str]) -> list[tuple[str, str]]:
    return [(m["unit"], m["script"]) for m in map(UNIT_LINE.match, lines) if m and m["script"] != "probe"]


def committed_stack(name: str) -> dict[str, Any]:
    """A committed stack file as a new operator copies it: its config, without another machine's secrets."""
    document = yaml.safe_load((PROJECT / "stacks" / f"Pulumi.{name}.yaml").read_text())
    document.pop("encryptionsalt", None)
    document["config"] = {k: v for k, v in document["config"].items()
                          if not (isinstance(v, dict) and set(v) == {"secure"})}
    return document


class Stack:
    """`pulumi stack init NAME` of the committed stack file `source`, its values replaced by `values`
    (`{key without the gpuhosts: prefix: value}`), its secrets set with `pulumi config set --secret`."""

    def __init__(self, project: Project, name: str, source: str, values: dict[str, Any], secrets: dict[str, str]):
        self.project, self.name = project, name
        document = committed_stack(source)
        document["config"] = {f"gpuhosts:{k}": v for k, v in values.items()}
        self.file.write_text(yaml.safe_dump(document, sort_keys=False))
        self.pulumi("stack", "init", name, stacked=False)
        for key, value in secrets.items():
            self.set_secret(key, value)

    @property
    def file(self) -> Path:
        return self.project.root / "stacks" / f"Pulumi.{self.name}.yaml"

    def pulumi(self, *args: str, stacked: bool = True, **options) -> Run:
        return self.project.pulumi(*args, stack=self.name if stacked else None, **options)

    def set_values(self, values: dict[str, Any]) -> None:
        """The stack file's plain values replaced, as an operator edits the file; its secrets and salt stay."""
        document = yaml.safe_load(self.file.read_text())
        secure = {k: v for k, v in document["config"].items() if isinstance(v, dict) and set(v) == {"secure"}}
        document["config"] = {**{f"gpuhosts:{k}": v for k, v in values.items()}, **secure}
        self.file.write_text(yaml.safe_dump(document, sort_keys=False))

    def set_secret(self, key: str, value: str) -> None:
        self.pulumi("config", "set", "--secret", f"gpuhosts:{key}", input=value)

    def set_path(self, path: str, value: Any) -> None:
        """`pulumi config set --path gpuhosts:PATH VALUE`: "true", "false" and integers are typed by the CLI itself,
        a float is saved with --type float."""
        text = str(value).lower() if isinstance(value, bool) else str(value)
        typed = ["--type", "float"] if isinstance(value, float) else []
        self.pulumi("config", "set", "--path", *typed, f"gpuhosts:{path}", text)

    # --- the lifecycle --------------------------------------------------------------------------------------------
    def preview(self, *extra: str, check: bool = True) -> Preview:
        run = self.pulumi("preview", "--json", "--diff", *extra, check=check)
        try:
            document = json.loads(run.stdout)
        except json.JSONDecodeError:
            if check:
                raise CliFailed(run) from None
            return Preview(run, [], [])
        return Preview(run, document.get("steps", []), document.get("diagnostics", []))

    def up(self, *extra: str, check: bool = True) -> Run:
        return self.pulumi("up", "--yes", "--skip-preview", "--json", *extra, check=check)

    def refresh(self, *extra: str, check: bool = True) -> Run:
        return self.pulumi("refresh", "--yes", "--skip-preview", "--json", *extra, check=check)

    def destroy(self, *extra: str, check: bool = True) -> Run:
        return self.pulumi("destroy", "--yes", "--skip-preview", "--json", *extra, check=check)

    def export(self) -> dict[str, Any]:
        return json.loads(self.pulumi("stack", "export").stdout)

    def outputs(self) -> dict[str, Any]:
        return json.loads(self.pulumi("stack", "output", "--json", "--show-secrets").stdout)

    def resources(self) -> dict[str, dict[str, Any]]:
        """The state's resources by name (the stack and the providers keyed by their type)."""
        found = {}
        for entry in self.export()["deployment"].get("resources", []):
            found[urn_name(entry["urn"]) if entry.get("parent") else entry["type"]] = entry
        return found

    def urn(self, name: str) -> str:
        for entry in self.export()["deployment"]["resources"]:
            if urn_name(entry["urn"]) == name:
                return entry["urn"]
        raise KeyError(name)

    def interrupt(self, process: subprocess.Popen, first: int = signal.SIGINT) -> str:
        os.killpg(process.pid, first)
        return process.communicate(timeout=COMMAND_CAP_S)[0]


FLOOR_PROGRAM = '''"""The real engine's own floor: one dynamic-provider resource whose provider does nothing."""
import pulumi
from pulumi.dynamic import CreateResult, ReadResult, Resource, ResourceProvider


class Nothing(ResourceProvider):
    def create(self, props):
        return CreateResult("one", props)

    def read(self, id, props):
        return ReadResult(id, props)


class One(Resource):
    def __init__(self, name):
        super().__init__(Nothing(), name, {"value": 1})


One("one")
'''


def floor_noop_up(project: Project) -> float:
    """`pulumi up` with nothing to do of a one-resource dynamic-provider stack, beside the project and with its
    environment, its refresh on as gpuhosts' is: what the engine costs before gpuhosts adds anything."""
    root = project.root.parent / f"{project.root.name}-floor"
    root.mkdir(exist_ok=True)
    (root / "__main__.py").write_text(FLOOR_PROGRAM)
    (root / "Pulumi.yaml").write_text(yaml.safe_dump({
        "name": "floor", "runtime": {"name": "python", "options": {
            "toolchain": "uv", "virtualenv": str(project.root / ".venv")}}, "options": {"refresh": "always"}}))
    if not (root / ".floor-up").exists():  # once per project: a second case measures the same stack again
        project.pulumi("stack", "init", "floor", cwd=root)
        project.pulumi("up", "--yes", "--skip-preview", stack="floor", cwd=root)
        (root / ".floor-up").write_text("")
    return project.pulumi("up", "--yes", "--skip-preview", "--json", stack="floor", cwd=root).seconds


WORKFLOW = PROJECT / ".github" / "workflows" / "preview.yml"


def run_workflow_preview(project: Project, stack: str) -> Run:
    """The pull request workflow's live `pulumi preview` step, its `run:` as written, in the project copy."""
    job = yaml.safe_load(WORKFLOW.read_text())["jobs"]["pulumi-preview"]
    (step,) = [s for s in job["steps"] if s.get("name") == "pulumi preview"]
    literal = {k: str(v) for k, v in step.get("env", {}).items() if "${{" not in str(v)}
    started = time.monotonic()
    result = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=project.root,
                            env={**project.env, **literal, "STACK": stack}, capture_output=True, text=True,
                            timeout=COMMAND_CAP_S)
    return Run(["workflow: pulumi preview"], result.returncode, result.stdout, result.stderr,
               time.monotonic() - started)
