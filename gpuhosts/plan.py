"""Offline plan: run the real Pulumi program under the SDK's mock runtime and write what it would apply.

Nothing here talks to a host or to a Pulumi backend. The program (`__main__.py`) runs unchanged; a mock monitor
records every resource it registers — type, name, parent, dependencies, inputs, aliases — and the stack outputs.
"""

from __future__ import annotations

import json
import logging
import runpy
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuhosts.benchmarks import referenced_benchmark_secrets
from gpuhosts.config import NAMESPACE, ConfigError, Problem, StackKind, stack_kind
from gpuhosts.fields import did_you_mean
from gpuhosts.fleet import NAME_SEPARATOR, is_fleet, referenced_fleet_secrets, validate_fleet
from gpuhosts.plans.proxmox_host import plan_host
from gpuhosts.plans.training_node import plan_training_node
from gpuhosts.resource_tree import render_tree
from gpuhosts.services import referenced_secrets
from gpuhosts.stacks import require_locks, validate_stack, validate_trainer_stack
from gpuhosts.training import referenced_training_secrets

SECRET = "[secret]"
# How the SDK marks a secret value inside deserialized properties.
SECRET_SIGNATURE = "4dabf18193072939515e22adb298388d"
# Stands in for secrets the CLI would decrypt; it must never reach a plan file.
SECRET_PLACEHOLDER = "gpuhosts-plan-secret-placeholder"
# Every unit is a dynamic resource of the one provider, of the type its kind names (components/host_units.py);
# `pulumi-python:dynamic:Resource` is what every unit was before kinds had types.
HOST_UNIT_PREFIX = "pulumi-python:dynamic"
UNIT_TYPE = "pulumi-python:dynamic/gpuhosts:{kind}"
# Written into every plan folder: only a folder that holds it may be replaced by the next plan.
PLAN_MARKER = ".gpuhosts-plan"
SCRIPTS = ("ensure", "teardown", "probe")


# The program's warnings under mocks: the plan reports them already, from the stack it validated, so the SDK's mock
# engine, which would print each a second time through the root logger, gets a logger that keeps them to itself.
PROGRAM_LOG = logging.getLogger("gpuhosts.plan.program")
PROGRAM_LOG.addHandler(logging.NullHandler())
PROGRAM_LOG.propagate = False


class PlanError(Exception):
    pass


@dataclass
class Recorded:
    urn: str
    type: str
    name: str
    parent: str | None
    dependencies: list[str]
    inputs: dict[str, Any]
    # The URNs the resource was known by before, as the engine resolves its aliases.
    aliases: list[str] = field(default_factory=list)


@dataclass
class ProgramRun:
    resources: list[Recorded] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    stack_urn: str = ""
    # Per component, the outputs it registered (`register_outputs`).
    component_outputs: dict[str, dict[str, Any]] = field(default_factory=dict)


def is_host_unit(type_: str) -> bool:
    return type_.startswith(HOST_UNIT_PREFIX)


ROOT_STACK_TYPE = "pulumi:pulumi:Stack"


def engine_urn(stack: str, project: str, parent: str, type_: str, name: str) -> str:
    """A resource's URN as the engine makes it (pkg/resource/deploy/step_generator.go `generateURN`,
    pkg/resource/urn.go `NewURN`): the whole chain of the parent's types, without the root stack's, then its own.
    The SDK's mock monitor puts only the parent's last type there, so a re-nested unit's URN would not change."""
    qualified = type_
    if parent:
        parent_type = parent.split("::")[2]
        if parent_type != ROOT_STACK_TYPE:
            qualified = f"{parent_type}${type_}"
    return f"urn:pulumi:{stack}::{project}::{qualified}::{name}"


# The top-level keys of a Pulumi stack file; anything else there is ignored by the CLI, so a value meant for the
# program that sits beside `config:` instead of under it would never reach it.
STACK_FILE_KEYS = ("config", "secretsprovider", "encryptedkey", "encryptionsalt", "environment")


class _StackFileLoader(yaml.SafeLoader):
    """YAML as the stack file's reader must take it: a key given twice is refused, not silently the last one."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            first: dict[Any, Any] = {}
            for key_node, _value in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    earlier = first.setdefault(key, key_node.start_mark)
                except TypeError:
                    continue  # an unhashable key: the base class names it
                if earlier is not key_node.start_mark:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} is given twice (first on line {earlier.line + 1}); YAML would keep "
                        "only the last one: merge the two or remove one", key_node.start_mark)
        return super().construct_mapping(node, deep)


def _file_problem(where: str, message: str) -> ConfigError:
    return ConfigError([Problem(path=where, message=message)])


def read_stack_file(path: Path, other_keys: list[str] | None = None) -> tuple[dict[str, Any], set[str]]:
    """The stack's gpuhosts:* values (namespace stripped) and which of them are secure (encrypted) values; the keys
    of other namespaces go to `other_keys`. A file that is not a stack file is a ConfigError naming the file, line
    and key: an invalid stack, as a wrong value is."""
    if not path.is_file():
        raise PlanError(f"stack file {path} does not exist; create it or pass --stack-file")
    try:
        document = yaml.load(path.read_bytes().decode("utf-8"), Loader=_StackFileLoader)
    except UnicodeDecodeError as error:
        raise _file_problem(str(path), f"is not UTF-8 text (byte {error.start}: {error.reason}); save it as UTF-8") \
            from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        reason = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise _file_problem(where, f"not valid YAML: {reason}") from None
    document = {} if document is None else document
    if not isinstance(document, dict) or not isinstance(document.get("config") or {}, dict):
        raise _file_problem(str(path), "a stack file is a mapping with a `config:` mapping of `gpuhosts:KEY: value` "
                                       "entries")
    problems = [Problem(path=f"{path}: {key}", message=(
        "is at the top level of the stack file, where Pulumi hands nothing to the program; every key sits under "
        "`config:`: add a `config:` line above the keys and indent them under it"))
        for key in map(str, document) if key not in STACK_FILE_KEYS]
    values: dict[str, Any] = {}
    secure: set[str] = set()
    for key, value in (document.get("config") or {}).items():
        namespace, colon, name = str(key).partition(":")
        if not colon:
            problems.append(Problem(path=f"{path}: config.{key}", message=(
                f"has no namespace; every key under `config:` is NAMESPACE:NAME, so write {NAMESPACE}:{key}")))
            continue
        if namespace != NAMESPACE:
            if other_keys is not None:
                other_keys.append(str(key))
            continue
        if isinstance(value, dict) and set(value) == {"secure"}:
            secure.add(name)
            value = SECRET_PLACEHOLDER
        values[name] = value
    if problems:
        raise ConfigError(problems)
    return values, secure


def stand_in_secrets(values: dict[str, Any], secure: set[str]) -> tuple[dict[str, Any], set[str], list[str]]:
    """Values with a placeholder for every secret the stack needs but the file does not hold, all secret keys, and a
    warning per stand-in. A stack file cannot carry a placeholder `secure:` value (the CLI would fail to decrypt
    it), so secrets set only at deploy time are declared by being named (sshPrivateKey, apiKeySecret, hfToken)."""
    needed = ({"sshPrivateKey"} | referenced_secrets(values.get("services")) | referenced_training_secrets(values.get("training"))
              | referenced_benchmark_secrets(values.get("benchmarks")) | referenced_fleet_secrets(values.get("hosts")))
    missing = sorted(needed - set(values))
    # Names a stack file declares only by naming them: two that differ by a slip are one key misspelt, and the
    # plan cannot tell which one is meant, so it names both places.
    known = needed | set(values) | {"sshPrivateKey", "hfToken"}
    typos, reported = [], set()
    for name in missing:
        likely = did_you_mean(name, known - {name})
        if likely is None or frozenset((name, likely)) in reported:
            continue
        reported.add(frozenset((name, likely)))
        places = ", ".join(secret_reference_paths(values, name) + secret_reference_paths(values, likely))
        typos.append(Problem(path=secret_reference_paths(values, name)[0], message=(
            f"names {NAMESPACE}:{name} where {places} name {name} and {likely}, which differ by a slip: name one "
            f"secret key in every place, then set it with `pulumi config set --secret {NAMESPACE}:KEY`")))
    if typos:
        raise ConfigError(typos)
    # One line for all of them: a committed stack file holds none, and a line each drowned the warning that matters.
    warnings = [f"{', '.join(f'{NAMESPACE}:{name}' for name in missing)}: not set in the stack file; the plan stands "
                "in for them, and `pulumi up` needs each: pulumi config set --secret KEY"] if missing else []
    return {**values, **{name: SECRET_PLACEHOLDER for name in missing}}, secure | set(missing), warnings


def secret_reference_paths(values: dict[str, Any], name: str) -> list[str]:
    """Where a raw stack names the secret key `name`: the services' (and a fleet's hosts' services') apiKeySecret and
    gateway.apiKeySecret, and the training monitor's tokenSecret; the key itself when nothing names it."""
    paths = []

    def services(raw: Any, prefix: str) -> None:
        for index, entry in enumerate(raw if isinstance(raw, list) else []):
            if isinstance(entry, dict):
                if entry.get("apiKeySecret") == name:
                    paths.append(f"{prefix}services[{index}].apiKeySecret")
                if isinstance(entry.get("gateway"), dict) and entry["gateway"].get("apiKeySecret") == name:
                    paths.append(f"{prefix}services[{index}].gateway.apiKeySecret")

    services(values.get("services"), f"{NAMESPACE}:")
    for index, host in enumerate(values.get("hosts") if isinstance(values.get("hosts"), list) else []):
        if isinstance(host, dict):
            services(host.get("services"), f"{NAMESPACE}:hosts[{index}].")
    monitor = (values.get("training") or {}).get("monitor") if isinstance(values.get("training"), dict) else None
    if isinstance(monitor, dict) and monitor.get("tokenSecret") == name:
        paths.append(f"{NAMESPACE}:training.monitor.tokenSecret")
    return paths or [f"{NAMESPACE}:{name}"]


def _scrub(value: Any) -> Any:
    # The wire format has only doubles: a port comes back as 22.0.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        if value.get(SECRET_SIGNATURE) is not None:
            return SECRET
        return {k: _scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


def _unwrap(value: Any) -> Any:
    if isinstance(value, dict):
        if value.get(SECRET_SIGNATURE) is not None:
            return _unwrap(value.get("value"))
        return {k: _unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unwrap(v) for v in value]
    return value


def run_program(project_root: Path, stack: str, values: dict[str, Any], secret_keys: set[str] = frozenset(),
                *, reveal_secrets: bool = False, extra_config: dict[str, Any] | None = None) -> ProgramRun:
    """Run __main__.py under mocks with `values` as the stack's config; `secret_keys` (and sshPrivateKey) are
    secrets and stay marked secret. With `reveal_secrets` the recorded inputs keep secret values (unwrapped), as
    the engine holds them: only for a harness that plays the engine, never for a plan file."""
    import pulumi
    from pulumi.runtime import mocks as pulumi_mocks
    from pulumi.runtime import rpc
    from pulumi.runtime.sync_await import _sync_await

    run = ProgramRun()

    class Mocks(pulumi.runtime.Mocks):
        def new_resource(self, args: pulumi.runtime.MockResourceArgs):
            return f"{args.name}-id", args.inputs

        def call(self, args: pulumi.runtime.MockCallArgs):
            return {}

    class RecordingMonitor(pulumi_mocks.MockMonitor):
        def make_urn(self, parent: str, type_: str, name: str) -> str:
            return engine_urn(stack, NAMESPACE, parent, type_, name)

        def RegisterResource(self, request):
            response = super().RegisterResource(request)
            if request.type == "pulumi:pulumi:Stack":
                run.stack_urn = response.urn
            else:
                run.resources.append(Recorded(
                    urn=response.urn,
                    type=request.type,
                    name=request.name,
                    parent=request.parent or None,
                    dependencies=sorted(set(request.dependencies)),
                    inputs=(_unwrap if reveal_secrets else _scrub)(rpc.deserialize_properties(request.object)),
                    aliases=[self.alias_urn(request, alias) for alias in request.aliases]
                    + list(getattr(request, "aliasURNs", [])),
                ))
            return response

        def RegisterResourceOutputs(self, request):
            outputs = (_unwrap if reveal_secrets else _scrub)(rpc.deserialize_properties(request.outputs))
            if outputs:
                run.component_outputs[request.urn] = outputs
            return super().RegisterResourceOutputs(request)

        def alias_urn(self, request, alias) -> str:
            """An alias as the engine resolves it (pkg/resource/deploy/source_eval.go RegisterResource, then
            resource.Alias.GetURN): a URN as given; a spec's unset name, type, parent, stack and project are the
            resource's own, and its URN is made as a resource's is."""
            if not alias.HasField("spec"):
                return alias.urn
            spec = alias.spec
            parent = "" if spec.noParent else (spec.parentUrn or request.parent)
            return engine_urn(spec.stack or stack, spec.project or NAMESPACE, parent, spec.type or request.type,
                              spec.name or request.name)

    config = {f"{NAMESPACE}:{k}": v if isinstance(v, str) else json.dumps(v) for k, v in values.items()}
    # Keys of other namespaces, as a stack file may hold them.
    config.update({k: v if isinstance(v, str) else json.dumps(v) for k, v in (extra_config or {}).items()})
    secret_names = sorted(set(secret_keys) | {"sshPrivateKey"})
    for name in secret_names:
        config.setdefault(f"{NAMESPACE}:{name}", SECRET_PLACEHOLDER)
    pulumi.runtime.set_all_config(config, [f"{NAMESPACE}:{name}" for name in secret_names])
    # A fresh root stack per run, so that several runs in one process do not share resources.
    pulumi.runtime.settings.ROOT.set(None)
    mocks = Mocks()
    pulumi.runtime.set_mocks(mocks, project=NAMESPACE, stack=stack, preview=False, logger=PROGRAM_LOG,
                             monitor=RecordingMonitor(mocks))
    runpy.run_path(str(project_root / "__main__.py"), run_name="__main__")
    _sync_await(pulumi.runtime.stack.wait_for_rpcs())
    # Stack outputs are only sent to the engine when a real program finishes; read them off the root resource.
    for name, value in pulumi.runtime.get_root_resource().outputs.items():
        output = pulumi.Output.from_input(value)
        run.outputs[name] = SECRET if _sync_await(output.is_secret()) else _sync_await(output.future())
    return run


def load_stack(values: dict[str, Any], secure: set[str], other_keys=()):
    """A stack's host name, its unit graph, and its warnings — a Proxmox host or a training node."""
    if stack_kind(values) is StackKind.TRAINER:
        trainer = require_locks(validate_trainer_stack(values, secure, other_keys))
        return trainer.node.name, plan_training_node(trainer).graph, list(trainer.warnings)
    config = require_locks(validate_stack(values, secure, other_keys))
    return config.host.name, plan_host(config), config.warnings()


def load_hosts(values: dict[str, Any], secure: set[str], other_keys=()) -> tuple[list[tuple[str, Any, str]], list[str]]:
    """Each host of a stack — its name, its unit graph, and what its resources' names begin with (empty for a stack
    of one host) — and the stack's warnings."""
    if stack_kind(values) is StackKind.PROXMOX and is_fleet(values):
        fleet = validate_fleet(values, secure, other_keys)
        return [(host.name, plan_host(host.config), host.prefix) for host in fleet.hosts], fleet.warnings()
    host, graph, warnings = load_stack(values, secure, other_keys)
    return [(host, graph, "")], warnings


def check_materialized(graph, resources: list[Recorded], prefix: str = "") -> None:
    """The program registered one host unit per unit of the graph, waiting for exactly what the unit needs; in a
    stack of several hosts, those whose names begin with the host's `prefix`."""
    units = {r.urn: r for r in resources if is_host_unit(r.type) and r.name.startswith(prefix)}
    by_name = {r.name[len(prefix):]: r for r in units.values()}
    if set(by_name) != set(graph.units):
        raise PlanError(f"the program's host units {sorted(by_name)} differ from the plan's {sorted(graph.units)}")
    by_urn = {r.urn: r for r in resources}
    for unit in graph:
        resource = by_name[unit.key]
        waits = {units[urn].name[len(prefix):] for urn in resource.dependencies if urn in units}
        if waits != set(unit.needs):
            raise PlanError(f"{unit.key} waits for {sorted(waits)} in the program but needs {sorted(unit.needs)}")
        if resource.type != UNIT_TYPE.format(kind=unit.kind):
            raise PlanError(f"{unit.key} is a {resource.type} in the program, not a {UNIT_TYPE.format(kind=unit.kind)}")
        # Up the tree, the components the plan puts the unit in, innermost first, then the host's.
        parent = by_urn.get(resource.parent)
        for kind, name in reversed(unit.group):
            if parent is None or (parent.type.rsplit(":", 1)[-1], parent.name) != (kind, prefix + name):
                raise PlanError(f"{unit.key} is not under the {kind} {name} of the plan in the program")
            parent = by_urn.get(parent.parent)
        if parent is None or is_host_unit(parent.type) or by_urn.get(parent.parent) is not None:
            raise PlanError(f"{unit.key}'s components in the program are not those of the plan")


def _resource_view(r: Recorded) -> dict[str, Any]:
    """A resource as resources.json shows it: scripts by reference (they are under commands/), not inline."""
    inputs = dict(r.inputs)
    if is_host_unit(r.type):
        host, separator, unit = r.name.rpartition(NAME_SEPARATOR)
        # A host of several has its commands in its own folder (hosts/<host>/commands/<unit>).
        folder = f"hosts/{host}/commands/{unit}" if separator else f"commands/{r.name}"
        for name in SCRIPTS:
            if isinstance(inputs.get(name), str):
                inputs[name] = f"[{folder}/{name}.sh sha256:{_sha(inputs[name])}]"
        if isinstance(inputs.get("__provider"), str):
            inputs["__provider"] = f"[pickled gpuhosts.provider.HostUnitProvider sha256:{_sha(inputs['__provider'])}]"
    return {"urn": r.urn, "type": r.type, "name": r.name, "parent": r.parent, "dependencies": r.dependencies,
            "inputs": inputs, "aliases": r.aliases}


def _sha(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _dump(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def secret_versions(stack_file: Path) -> dict[str, str]:
    """Per secret the stack file holds encrypted, a keyed digest of its ciphertext (never of a value: the plan has
    none). A re-encrypted value is a new version; a secret set only at deploy time has none."""
    config = (yaml.safe_load(stack_file.read_bytes().decode("utf-8")) or {}).get("config") or {}
    versions = {}
    for key, value in config.items():
        namespace, _, name = str(key).partition(":")
        if namespace == NAMESPACE and isinstance(value, dict) and set(value) == {"secure"}:
            versions[name] = "v:" + _sha(f"gpuhosts-secret-version\0{name}\0{value['secure']}")
    return versions


def check_out(out: Path) -> None:
    """`--out` is replaced whole, so it must be a folder a plan wrote (its marker says so), empty, or absent."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise PlanError(f"--out {out} is not a folder; give a folder for the plan")
    if out.is_dir() and any(out.iterdir()) and not (out / PLAN_MARKER).is_file():
        raise PlanError(f"--out {out} holds files that no gpuhosts plan wrote (no {PLAN_MARKER}); a plan replaces its "
                        "folder whole, so give an empty or new folder")


def _write_host(host_dir: Path, graph, versions: dict[str, str]) -> None:
    """A host's folder of the plan: the files its units install, and each unit's scripts and record."""
    for container, file in graph.files():
        base = host_dir if container is None else host_dir / "containers" / str(container)
        target = base / file.path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(file.content)
        target.chmod(int(file.mode, 8))
    for index, unit in enumerate(graph.apply_order, start=1):
        folder = host_dir / "commands" / unit.key
        folder.mkdir(parents=True)
        for name in SCRIPTS:
            text = getattr(unit, name)
            (folder / f"{name}.sh").write_text(text if text.endswith("\n") else text + "\n")
        _dump(folder / "unit.json", {
            "kind": unit.kind,
            "applyOrder": index,
            "needs": list(unit.needs),
            "neededBy": graph.needed_by(unit.key),
            "desired": unit.desired,
            # Which secret travels on stdin, by name; its value is never in the plan.
            "stdin": f"[secret {NAMESPACE}:{unit.stdin_secret}]" if unit.stdin_secret else None,
            # A keyed digest of the secret's encrypted stack-file value: a rotation shows, the value never does.
            "stdinVersion": versions.get(unit.stdin_secret) if unit.stdin_secret else None,
            "undoes": unit.undoes,
            "effects": {"rebootOn": list(unit.reboot_on), "restartsContainer": unit.restarts,
                        "restartAllowed": unit.restart_allowed},
        })
    _dump(host_dir / "graph.json", {"waves": graph.waves(), "teardownOrder": [u.key for u in graph.teardown_order]})


def write_plan(project_root: Path, stack: str, stack_file: Path, out: Path) -> dict[str, Any]:
    """Validate, run the program, and write the plan into `out` (replaced whole; untouched on any error)."""
    check_out(out)
    other_keys: list[str] = []
    values, secure, secret_warnings = stand_in_secrets(*read_stack_file(stack_file, other_keys))
    hosts, stack_warnings = load_hosts(values, secure, other_keys)
    run = run_program(project_root, stack, values, secure)
    for _host, graph, prefix in hosts:
        check_materialized(graph, run.resources, prefix)

    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        resources = sorted(run.resources, key=lambda r: r.urn)
        _dump(staging / "resources.json", [_resource_view(r) for r in resources])
        rank = {prefix + unit.key: index for _host, graph, prefix in hosts
                for index, unit in enumerate(graph.apply_order)}
        (staging / "tree.txt").write_text(render_tree(run.stack_urn, resources, rank))
        versions = secret_versions(stack_file)
        for host, graph, _prefix in hosts:
            _write_host(staging / "hosts" / host, graph, versions)

        desired = run.outputs.get("desired")
        if desired is None:
            raise PlanError("the program exported no 'desired' output")
        # A stack of several hosts exports its desired state per host already.
        by_host = desired if hosts[0][2] else {hosts[0][0]: desired}
        summary = {"stack": stack, "hosts": by_host, "warnings": secret_warnings + stack_warnings}
        _dump(staging / "summary.json", summary)
        # Every warning in full, once each: the command line shows each one's first clause.
        warnings = list(dict.fromkeys(summary["warnings"]))
        (staging / "warnings.txt").write_text("".join(f"warning: {w}\n" for w in warnings))

        if SECRET_PLACEHOLDER in "".join(p.read_text() for p in staging.rglob("*") if p.is_file()):
            raise PlanError("a secret value reached the plan output; refusing to write it")
        (staging / PLAN_MARKER).write_text("a gpuhosts plan: `gpuhosts plan` replaces this folder whole\n")
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return summary
