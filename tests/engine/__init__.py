"""An apply harness that drives the real host-unit provider the way Pulumi's engine does.

The provider runs in Pulumi's own dynamic-provider server (`python -m pulumi.dynamic`, started with this
project's interpreter, as the `toolchain: uv` shim does: pulumi sdk/python/dist/pulumi-resource-pulumi-python)
and is spoken to over gRPC: Configure, Check, Diff, Create, Read, Update, Delete. The resources are those the real
`__main__.py` registers under the mock runtime (tests/engine/program.py). What the engine does, and where:

* Configure gets every stack config key as `namespace:key`, secrets decrypted (pkg/resource/deploy/target.go
  `GetPackageConfig`; the Python server unwraps them: sdk/python/lib/pulumi/dynamic/__main__.py `Configure`);
* `refresh` (Pulumi.yaml `options.refresh: always`) reads every resource in the state before the program's
  diff, only the targets under `--target` (pkg/resource/deploy/deployment_executor.go `refresh`: "If they did
  provider --target's then only create refresh steps for those specific targets"); Read's `inputs` replace the
  stored inputs (pkg/resource/deploy/step.go `RefreshStep.Apply`);
* `pulumi up` and `pulumi destroy` preview first and then run the update, each a deployment of its own with its
  own provider processes (pkg/backend/apply.go `PreviewThenPromptThenExecute`, unless `--skip-preview`;
  pkg/engine/deployment.go `newDeployment` makes a plugin context per deployment), so under `refresh: always`
  every unit is read twice: in the preview, whose refresh is never saved, and in the update; `destroy` refreshes
  too (pkg/cmd/pulumi/operations/destroy.go passes `getRefreshOption` as for `up`; `--refresh=false` turns it
  off);
* a resource whose URN is not in the state but one of whose aliases is takes over that entry, under its new URN,
  type and parent; an old entry two resources claim is an error (pkg/resource/deploy/step_generator.go
  `generateSteps`: the olds are looked up by the URN, then by each alias in turn, and `sg.aliased` records the
  claim, so the aliased entry is no delete);
* each resource is Checked, then Diffed; the Python server answers DIFF_UNKNOWN for an empty DiffResult, and the
  engine then compares the stored inputs with the checked new ones, naming each changed leaf
  (pkg/resource/deploy/step_generator.go `diffResource`: `oldInputs.Diff(new)` over every key), the pickled
  provider `__provider` as any other (the server puts it into Check's inputs: sdk/python/lib/pulumi/dynamic/
  __main__.py `Check`), so a provider that pickles differently is an update of every unit;
* creates and updates run as soon as what a resource depends on is done, at most `parallel` at once, by default
  GOMAXPROCS × 4 (pkg/cmd/pulumi/operations/up.go `defaultParallel`); the Python server itself serves 4 calls
  at a time (`futures.ThreadPoolExecutor(max_workers=4)`);
* a replaced resource is created first and its old self deleted at the end (`delete-replaced`), as are resources
  gone from the program: in reverse dependency levels, a level in parallel (pkg/resource/deploy/step_executor.go);
* a failed step stops the scheduling of new steps; the steps in flight finish and are recorded; under
  `--continue-on-error` only the steps that depend on a failed one are skipped, every other runs, and the update
  still fails naming each failed step (pkg/resource/deploy/step_executor.go: `continueOnError`, and the blog post
  "Continue on Error in the Pulumi CLI", 2024-05-09).

Host units are the dynamic resources (`pulumi-python:dynamic…`: one type per unit kind, `…:Resource` before); the
others are components, which only the state records. State is JSON: per URN the type, name, parent, dependencies,
id, inputs and outputs. The provider's log (its stderr) is kept: one line per operation (`gpuhosts-unit: …`) and
per dial (`gpuhosts-ssh: …`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from pulumi.runtime import proto, rpc
from pulumi.runtime.proto import provider_pb2_grpc

from gpuhosts.oplog import DESTINATION_VARIABLE

PROJECT = Path(__file__).resolve().parents[2]
HOST_UNIT_PREFIX = "pulumi-python:dynamic"
PROVIDER_KEY = "__provider"
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
UNIT_LOG = re.compile(r"^gpuhosts-unit: (?P<unit>\S+) (?P<script>ensure|teardown|probe) "
                      r"(?:changed=(?P<changed>true|false)|status=\S+ (?:lock_waits=(?P<waits>\d+) )?seconds=\S+)$")


def is_host_unit(entry: dict[str, Any]) -> bool:
    return entry["type"].startswith(HOST_UNIT_PREFIX)


def default_parallel() -> int:
    return (os.cpu_count() or 1) * 4


# --- errors ------------------------------------------------------------------------------------------------------
class ApplyError(RuntimeError):
    def __init__(self, message: str, ops: list["Op"]):
        super().__init__(message)
        self.ops = ops


# --- records -----------------------------------------------------------------------------------------------------
@dataclass
class Op:
    name: str
    operation: str          # create, update, delete, read
    urn: str = ""
    outcome: str = ""       # ok, failed
    error: str = ""
    seconds: float = 0.0
    started: float = 0.0
    # From the provider's log: whether the unit's script reported a change, and its waits for host locks.
    changed: bool | None = None
    lock_waits: int = 0


@dataclass
class Change:
    operation: str                      # create, update, replace, delete, same
    diffs: list[str] = field(default_factory=list)


@dataclass
class Preview:
    changes: dict[str, Change]
    refreshed: dict[str, list[str]]     # per resource name: the input paths a refresh changed
    # Per host unit's name: its facts as the preview's refresh read them (the values the display shows).
    facts: dict[str, dict[str, Any]] = field(default_factory=dict)

    def changed(self) -> dict[str, Change]:
        return {name: change for name, change in self.changes.items() if change.operation != "same"}


def property_diff(old: Any, new: Any, path: str = "") -> list[str]:
    """The leaves that differ, named as the engine's display names them (`facts["file /etc/x"]`, `host.port`)."""
    if isinstance(old, dict) and isinstance(new, dict):
        found: list[str] = []
        for key in sorted(set(old) | set(new)):
            step = (f"{path}.{key}" if path else key) if IDENTIFIER.match(key) else f'{path}["{key}"]'
            found += property_diff(old.get(key), new.get(key), step)
        return found
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        found = []
        for index, (a, b) in enumerate(zip(old, new)):
            found += property_diff(a, b, f"{path}[{index}]")
        return found
    return [] if old == new else [path or "(root)"]


def _struct(values: dict[str, Any]):
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(rpc.serialize_properties(values, {}))
    finally:
        loop.close()


def _plain(struct) -> dict[str, Any]:
    return {k: rpc.unwrap_rpc_secret(v) for k, v in rpc.deserialize_properties(struct, True).items()}


# --- the provider process ------------------------------------------------------------------------------------------
class ProviderServer:
    """`python -m pulumi.dynamic`, configured with the stack's config; its stderr is the provider's log."""

    def __init__(self, config: dict[str, str], env: dict[str, str] | None = None):
        environment = dict(env or os.environ)
        environment["PYTHONPATH"] = os.pathsep.join([str(PROJECT), environment.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        environment.setdefault("PULUMI_PROJECT", "gpuhosts")
        # The provider's per-operation lines (gpuhosts/oplog.py), onto the stderr this harness reads.
        environment[DESTINATION_VARIABLE] = "/dev/stderr"
        self.process = subprocess.Popen([sys.executable, "-u", "-m", "pulumi.dynamic"], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, env=environment, cwd=PROJECT)
        port = self.process.stdout.readline().decode().strip()
        if not port.isdigit():
            raise RuntimeError(f"the dynamic provider server did not start: {self.process.stderr.read().decode()}")
        self.log: list[str] = []
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.stub = provider_pb2_grpc.ResourceProviderStub(self.channel)
        self.stub.Configure(proto.ConfigureRequest(args=_struct(config), variables=config))

    def _drain(self) -> None:
        for line in iter(self.process.stderr.readline, b""):
            self.log.append(line.decode(errors="replace").rstrip("\n"))

    def close(self) -> None:
        self.channel.close()
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self._reader.join(timeout=5)


# --- the engine ------------------------------------------------------------------------------------------------------
class Engine:
    def __init__(self, state_file: Path, config: dict[str, str], *, parallel: int | None = None,
                 env: dict[str, str] | None = None):
        self.state_file = Path(state_file)
        self.config = dict(config)
        self.parallel = parallel or default_parallel()
        self.env = env
        self.ops: list[Op] = []
        self.log: list[str] = []
        self.max_concurrent = 0
        self._running = 0
        self._lock = threading.Lock()
        self._server: ProviderServer | None = None

    # --- the provider process: one per engine operation, as the CLI starts plugins per run -----------------------
    def _start(self) -> ProviderServer:
        self._server = ProviderServer(self.config, self.env)
        return self._server

    def _stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        log, self._server = self._server.log, None
        self.log += log
        self._annotate(log)

    def _annotate(self, log: list[str]) -> None:
        """Attach the provider's per-operation log lines to this run's ops, in order per unit and script."""
        changed: dict[tuple[str, str], list[bool]] = {}
        waits: dict[tuple[str, str], list[int]] = {}
        for line in log:
            match = UNIT_LOG.match(line)
            if not match:
                continue
            key = (match["unit"], match["script"])
            if match["changed"]:
                changed.setdefault(key, []).append(match["changed"] == "true")
            if match["waits"]:
                waits.setdefault(key, []).append(int(match["waits"]))
        for op in self.ops:
            if op.changed is not None or op.operation == "read":
                continue
            key = (op.name, "teardown" if op.operation == "delete" else "ensure")
            if changed.get(key):
                op.changed = changed[key].pop(0)
            if waits.get(key):
                op.lock_waits = waits[key].pop(0)

    def connections(self) -> int:
        return sum(line.startswith("gpuhosts-ssh: dial ") for line in self.log)

    # --- state -------------------------------------------------------------------------------------------------
    def state(self) -> dict[str, dict[str, Any]]:
        if not self.state_file.exists():
            return {}
        return json.loads(self.state_file.read_text())["resources"]

    def _save(self, resources: dict[str, dict[str, Any]]) -> None:
        with self._lock:
            self.state_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.state_file.with_suffix(".tmp")
            tmp.write_text(json.dumps({"version": 1, "resources": resources}, indent=2, sort_keys=True) + "\n")
            tmp.replace(self.state_file)

    def stack_rm(self) -> None:
        self.state_file.unlink(missing_ok=True)

    # --- operations ------------------------------------------------------------------------------------------------
    def refresh(self, stored: dict[str, dict[str, Any]] | None = None,
                targets: list[str] | None = None) -> dict[str, list[str]]:
        """Read every host unit in the state (`targets`: only those); stored inputs and outputs become what Read
        returned."""
        own = stored is None
        if own:
            self._start()
        try:
            stored = self.state() if stored is None else stored
            changed: dict[str, list[str]] = {}

            def read(urn: str) -> None:
                entry = stored[urn]
                op = self._begin(entry["name"], "read", urn)
                try:
                    response = self._server.stub.Read(proto.ReadRequest(
                        id=entry["id"], urn=urn, properties=_struct(entry["outputs"]), inputs=_struct(entry["inputs"])))
                except grpc.RpcError as error:
                    self._end(op, error)
                    raise ApplyError(f"{entry['name']}: refresh: {_details(error)}", list(self.ops)) from None
                self._end(op)
                outputs = _plain(response.properties)
                inputs = _plain(response.inputs) if response.HasField("inputs") else entry["inputs"]
                diffs = property_diff(entry["inputs"], inputs)
                if diffs:
                    changed[entry["name"]] = diffs
                entry.update(outputs=outputs, inputs=inputs)

            urns = [urn for urn, entry in stored.items() if is_host_unit(entry)
                    and (targets is None or entry["name"] in targets)]
            self._parallel_map(read, urns)
            if own:
                self._save(stored)
            return changed
        finally:
            if own:
                self._stop()

    def preview(self, program: list[dict[str, Any]], refresh: bool = True,
                targets: list[str] | None = None) -> Preview:
        """`pulumi preview`: the refresh and the steps, in a provider process of its own; nothing is saved."""
        self._check_targets(program, targets)
        first = len(self.ops)
        with self._this_run(first):
            return self._preview(program, refresh, targets)

    def _preview(self, program: list[dict[str, Any]], refresh: bool, targets: list[str] | None) -> Preview:
        self._start()
        try:
            stored = self.state()
            refreshed = self.refresh(stored, targets) if refresh else {}
            adopt_aliased(program, stored)
            steps = self._steps(program, stored)
            facts = {entry["name"]: entry["inputs"].get("facts") or {} for entry in stored.values()
                     if is_host_unit(entry)}
            return Preview(by_name(program, stored, {urn: change for urn, (change, _checked) in steps.items()}),
                           refreshed, facts)
        finally:
            self._stop()

    def up(self, program: list[dict[str, Any]], refresh: bool = True, targets: list[str] | None = None,
           replace: list[str] = (), skip_preview: bool = False, continue_on_error: bool = False) -> list[Op]:
        """`pulumi up --yes`: its preview, then the update; `targets`: `--target` (only those, refreshed and
        applied), `replace`: `--replace` (those replaced, create first), `skip_preview`: `--skip-preview`,
        `continue_on_error`: `--continue-on-error`. The ops are the preview's reads and the update's."""
        self._check_targets(program, targets)
        first = len(self.ops)
        with self._this_run(first):
            if not skip_preview:
                self.preview(program, refresh=refresh, targets=targets)
            return self._update(program, refresh, targets, replace, first, continue_on_error)

    def _update(self, program: list[dict[str, Any]], refresh: bool, targets: list[str] | None, replace: list[str],
                first: int, continue_on_error: bool = False) -> list[Op]:
        self._start()
        try:
            stored = self.state()
            if refresh:
                self.refresh(stored, targets)
                self._save(stored)
            adopt_aliased(program, stored)
            steps = self._steps(program, stored)
            urn_of = {r["name"]: r["urn"] for r in program}
            for name in replace:
                change, checked = steps[urn_of[name]]
                steps[urn_of[name]] = (Change("replace", ["--replace"]), checked)
            wanted = {r["urn"]: r for r in program}
            replaced: dict[str, dict[str, Any]] = {}
            errors: list[str] = []

            def apply(urn: str) -> None:
                resource = wanted[urn]
                change, checked = steps[urn]
                old = stored.get(urn)
                if change.operation == "same" or (targets is not None and resource["name"] not in targets):
                    if old is not None:
                        old.update(dependencies=resource["dependencies"], parent=resource["parent"])
                    return
                if not is_host_unit(resource):
                    stored[urn] = {"type": resource["type"], "name": resource["name"], "parent": resource["parent"],
                                   "dependencies": resource["dependencies"], "id": "", "inputs": checked,
                                   "outputs": checked}
                    return
                operation = "update" if change.operation == "update" else "create"
                op = self._begin(resource["name"], operation, urn)
                try:
                    if operation == "update":
                        response = self._server.stub.Update(proto.UpdateRequest(
                            id=old["id"], urn=urn, olds=_struct(old["outputs"]), news=_struct(checked)))
                        resource_id = old["id"]
                    else:
                        response = self._server.stub.Create(proto.CreateRequest(urn=urn, properties=_struct(checked)))
                        resource_id = response.id
                except grpc.RpcError as error:
                    self._end(op, error)
                    errors.append(f"{resource['name']}: {operation}: {_details(error)}")
                    raise
                self._end(op)
                if change.operation == "replace":
                    replaced[urn] = old
                with self._lock:
                    stored[urn] = {"type": resource["type"], "name": resource["name"], "parent": resource["parent"],
                                   "dependencies": resource["dependencies"], "id": resource_id, "inputs": checked,
                                   "outputs": _plain(response.properties)}
                self._save(stored)

            order = {r["urn"]: [d for d in r["dependencies"] if d in wanted] for r in program}
            self._schedule(apply, order, continue_on_error)
            if errors:
                raise ApplyError("\n".join(errors), self.ops[first:])
            if targets is None:
                deletes = {f"{urn}#replaced": entry for urn, entry in replaced.items()}
                deletes.update({urn: entry for urn, entry in stored.items() if urn not in wanted})
                self._delete_all(deletes, stored)
            self._save(stored)
            return self.ops[first:]
        finally:
            self._stop()

    def destroy(self, refresh: bool = True, continue_on_error: bool = False, skip_preview: bool = False) -> list[Op]:
        """`pulumi destroy --yes`: its preview (the refresh, never saved), then the refresh and the deletes;
        refresh=False is `--refresh=false`, the deletes planned from the state alone."""
        first = len(self.ops)
        with self._this_run(first):
            if refresh and not skip_preview:
                # The preview of a destroy plans a delete per resource; only its refresh touches the host.
                self._start()
                try:
                    self.refresh(self.state())
                finally:
                    self._stop()
            self._start()
            try:
                stored = self.state()
                if refresh:
                    self.refresh(stored)
                    self._save(stored)
                self._delete_all(dict(stored), stored, continue_on_error=continue_on_error)
                self._save(stored)
                return self.ops[first:]
            finally:
                self._stop()

    @contextlib.contextmanager
    def _this_run(self, first: int):
        """An error of this command carries its own ops (from its preview on), not the engine's earlier ones."""
        try:
            yield
        except ApplyError as error:
            raise ApplyError(str(error), self.ops[first:]) from None

    @staticmethod
    def _check_targets(program: list[dict[str, Any]], targets: list[str] | None) -> None:
        if targets is not None:
            unknown = set(targets) - {r["name"] for r in program}
            if unknown:
                raise ValueError(f"no such resource in the program: {sorted(unknown)}")

    # --- steps --------------------------------------------------------------------------------------------------------
    def _steps(self, program: list[dict[str, Any]], stored: dict[str, dict[str, Any]]) -> dict[str, tuple[Change, dict]]:
        """Per URN, the program's resources' steps, then a delete per entry of the state the program has not."""
        steps: dict[str, tuple[Change, dict]] = {}
        for resource in program:
            urn, news = resource["urn"], resource["inputs"]
            old = stored.get(urn)
            if not is_host_unit(resource):
                steps[urn] = (Change("same" if old else "create"), news)
                continue
            checked = _plain(self._server.stub.Check(proto.CheckRequest(
                urn=urn, olds=_struct(old["inputs"] if old else {}), news=_struct(news))).inputs)
            if old is None:
                steps[urn] = (Change("create"), checked)
                continue
            response = self._server.stub.Diff(proto.DiffRequest(id=old["id"], urn=urn, olds=_struct(old["outputs"]),
                                                                news=_struct(checked)))
            diffs = property_diff(old["inputs"], checked)
            if response.replaces:
                steps[urn] = (Change("replace", list(response.replaces)), checked)
            elif response.changes == proto.DiffResponse.DIFF_SOME or (
                    response.changes == proto.DiffResponse.DIFF_UNKNOWN and diffs):
                steps[urn] = (Change("update", diffs), checked)
            else:
                steps[urn] = (Change("same"), checked)
        for urn in stored:
            if urn not in steps:
                steps[urn] = (Change("delete"), {})
        return steps

    def _delete_all(self, deletes: dict[str, dict[str, Any]], stored: dict[str, dict[str, Any]],
                    continue_on_error: bool = False) -> None:
        """Deletes in reverse dependency levels, each level in parallel."""
        base = {key: key.split("#", 1)[0] for key in deletes}
        # A child goes before its parent, as a dependent goes before what it depends on.
        after = {key: set(entry["dependencies"]) | ({entry["parent"]} if entry.get("parent") else set())
                 for key, entry in deletes.items()}
        remaining = set(deletes)
        errors: list[str] = []
        kept: set[str] = set()
        while remaining:
            level = [k for k in remaining if not any(base[k] in after[o] for o in remaining if o != k)] or \
                sorted(remaining)[:1]

            def delete(key: str) -> None:
                entry = deletes[key]
                if any(base[key] in after[k] for k in kept):
                    kept.add(key)  # something that depends on it is still there
                    return
                if is_host_unit(entry):
                    op = self._begin(entry["name"], "delete", base[key])
                    try:
                        self._server.stub.Delete(proto.DeleteRequest(id=entry["id"], urn=base[key],
                                                                     properties=_struct(entry["outputs"])))
                    except grpc.RpcError as error:
                        self._end(op, error)
                        errors.append(f"{entry['name']}: delete: {_details(error)}")
                        kept.add(key)
                        return
                    self._end(op)
                with self._lock:
                    if "#" not in key:
                        stored.pop(key, None)
                self._save(stored)

            self._parallel_map(delete, sorted(level, key=lambda k: deletes[k]["name"]), raise_first=False)
            remaining -= set(level)
            if errors and not continue_on_error:
                break
        if errors:
            suffix = ("" if not continue_on_error else
                      "\nIf the host is gone for good: `pulumi destroy --continue-on-error`, then `pulumi stack rm`.")
            raise ApplyError("\n".join(errors) + suffix, list(self.ops))

    # --- scheduling --------------------------------------------------------------------------------------------------
    def _schedule(self, work, order: dict[str, list[str]], continue_on_error: bool = False) -> None:
        """Run `work(urn)` for every urn once its dependencies are done, `parallel` at a time; stop scheduling on
        the first failure and let what is in flight finish, or with `continue_on_error` skip only what depends on a
        failed step."""
        done: set[str] = set()
        pending = dict(order)
        running: dict[Future, str] = {}
        failed = False
        lost: set[str] = set()      # failed, or skipped because something they depend on is
        with ThreadPoolExecutor(max_workers=self.parallel) as pool:
            while pending or running:
                if continue_on_error:
                    while skipped := [urn for urn, deps in pending.items() if any(d in lost for d in deps)]:
                        for urn in skipped:
                            del pending[urn]
                            lost.add(urn)
                if not failed or continue_on_error:
                    ready = sorted(urn for urn, deps in pending.items() if all(d in done for d in deps))
                    for urn in ready:
                        del pending[urn]
                        running[pool.submit(work, urn)] = urn
                if not running:
                    if pending:
                        raise RuntimeError("dependency cycle among: " + ", ".join(sorted(pending)))
                    break
                finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
                for future in finished:
                    urn = running.pop(future)
                    if future.exception() is not None:
                        failed = True
                        lost.add(urn)
                    else:
                        done.add(urn)
                if failed and not running and not continue_on_error:
                    break

    def _parallel_map(self, work, items: list[str], raise_first: bool = True) -> None:
        with ThreadPoolExecutor(max_workers=self.parallel) as pool:
            futures = [pool.submit(work, item) for item in items]
            for future in futures:
                error = future.exception()
                if error is not None and raise_first:
                    raise error

    def _begin(self, name: str, operation: str, urn: str) -> Op:
        op = Op(name, operation, urn, started=time.monotonic())
        with self._lock:
            self._running += 1
            self.max_concurrent = max(self.max_concurrent, self._running)
        return op

    def _end(self, op: Op, error: grpc.RpcError | None = None) -> None:
        op.seconds = time.monotonic() - op.started
        op.outcome = "ok" if error is None else "failed"
        op.error = "" if error is None else _details(error)
        with self._lock:
            self._running -= 1
            self.ops.append(op)


def adopt_aliased(program: list[dict[str, Any]], stored: dict[str, dict[str, Any]]) -> None:
    """Move each entry of the state that a resource of the program claims through an alias to that resource's URN,
    as the engine does before it plans the steps (pkg/resource/deploy/step_generator.go `generateSteps`: the old
    state is looked up by the URN and then by each alias, first found wins, and an alias two resources claim is the
    error "Duplicate resource alias"). The entry keeps its id, inputs and outputs; its type, parent and name become
    the resource's."""
    wanted = {r["urn"] for r in program}
    claimed: dict[str, str] = {}
    for resource in program:
        urn = resource["urn"]
        if urn in stored:
            continue
        for alias in resource.get("aliases") or ():
            if alias in stored and alias not in wanted:
                if alias in claimed:
                    raise ValueError(f"Duplicate resource alias '{alias}' applied to resource with URN '{urn}' "
                                     f"conflicting with resource with URN '{claimed[alias]}'")
                claimed[alias] = urn
                break
    for alias, urn in claimed.items():
        resource = next(r for r in program if r["urn"] == urn)
        entry = stored.pop(alias)
        # The new URN names it: its name too, when the alias was of another name.
        entry.update(type=resource["type"], parent=resource["parent"], name=resource["name"])
        stored[urn] = entry
    # What the moved entries' dependents recorded: the new URNs, as the engine rewrites them in the snapshot.
    for entry in stored.values():
        entry["dependencies"] = [claimed.get(d, d) for d in entry["dependencies"]]
        if entry.get("parent") in claimed:
            entry["parent"] = claimed[entry["parent"]]


def by_name(program: list[dict[str, Any]], stored: dict[str, dict[str, Any]], changes: dict[str, Change]) -> dict[str, Change]:
    """The steps by resource name, as the preview lists them; a delete whose name the program also has is told
    apart by its URN."""
    names = {r["urn"]: r["name"] for r in program}
    found: dict[str, Change] = {}
    for urn, change in changes.items():
        name = names.get(urn) or stored[urn]["name"]
        found[name if name not in found else f"{name} ({urn})"] = change
    return found


def _details(error: grpc.RpcError) -> str:
    text = error.details() if hasattr(error, "details") else str(error)
    # The server aborts with the provider's traceback; the last line is the exception and its message.
    lines = [line for line in (text or "").rstrip().splitlines()]
    for index, line in enumerate(lines):
        if line.startswith(("gpuhosts.provider.UnitFailed: ", "UnitFailed: ")):
            return "\n".join([line.split(": ", 1)[1], *lines[index + 1:]])
    return "\n".join(lines[-20:])
