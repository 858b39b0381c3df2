"""The host-unit provider: a Pulumi dynamic provider whose resources are units on a host, read through their probes.

pulumi-command has no Read (pulumi-command #432), so a host changed by hand would look in sync. A host unit's
`read` runs the unit's probe and returns the observed facts as the refreshed inputs (`ReadResult(inputs=…)`,
pulumi SDK ≥ 3.216), so with `refresh: always` the engine's own diff of the program's desired facts against the
observed ones names the drifted unit and field, and `up` runs that unit's ensure (`update`). `diff` is left to the
engine (an empty DiffResult answers DIFF_UNKNOWN: sdk/python/lib/pulumi/dynamic/__main__.py `Diff`; the engine
then compares old and new inputs: pkg/resource/deploy/step_generator.go `diffResource`).

Inputs (`unit_inputs`): the target (no secret), the unit's key (its kind is its resource's type), its ensure, teardown and probe scripts,
the desired facts, and for a unit that receives a secret on stdin its name and a keyed digest (a rotation shows as
a change; the value never enters inputs, outputs or state). Secrets come from the stack config through
`configure()`, which the engine calls with every `namespace:key` decrypted (pkg/resource/deploy/target.go
`GetPackageConfig`). Outputs are the inputs plus `rebootRequired`, `report` and the `signature` of the scripts
(below): no raw output.

Every operation runs through one small command (templates/common/run.sh.j2) that keeps the ownership record of
the unit on the host: ensure writes the resource id there; teardown runs only while the record names this
resource, so a rename or replacement (create the new, then delete the old) leaves the host as it is.

The class lives in this importable module and holds no state of its own: dill pickles it by reference, and every
resource shares one provider instance, one configuration and one connection per host in the provider process.

In a stack of several hosts (`gpuhosts:hosts`) a host that cannot be reached fails alone. The engine runs every
refresh step even when some fail, then stops the whole update before its first step (pulumi
pkg/resource/deploy/deployment_executor.go `refresh`: `newStepExecutor(…, true /*ignoreErrors*/)`, then "step
executor errored"), so one host that is down would hold back every other. A read that cannot reach its host
therefore reports each declared fact as not read, naming the host (`kpro9 (root@10.0.0.9:22) …`): the diff shows
that host's units as changes, the update runs them, and they fail at once on the connection the pool already
found unreachable, each naming its host; under `pulumi up --continue-on-error` the other hosts' steps all run.
The host's name comes from the stack's own config (`configure()` receives `gpuhosts:hosts`), not from the units'
inputs, so renaming a host still changes no input. A stack of one host keeps the strict read: its refresh fails.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import sys
import threading
import time
import uuid
from typing import Any

from pulumi.dynamic import CreateResult, ReadResult, ResourceProvider, UpdateResult

from gpuhosts import oplog, protocol
from gpuhosts.facts import keyed_observed
from gpuhosts.probe_batch import Batches
from gpuhosts.render import render
from gpuhosts.units import DEFAULT_LIMITS_S, operation_limits
from gpuhosts.ssh import (DIAL_ATTEMPTS, Completed, Connection, ConnectionDropped, HostKeyChanged, KeyRefused, Pool,
                          SshError, Target, Unreachable)

NAMESPACE = "gpuhosts"
SSH_KEY = f"{NAMESPACE}:sshPrivateKey"
DIAL_ATTEMPTS_VARIABLE = "GPUHOSTS_SSH_DIAL_ATTEMPTS"
# A unit's kind is its resource's type, not an input: a kind renamed by a release (with an alias to the old type)
# must change no input, or the real engine would run the unit's ensure again.
INPUT_KEYS = ("host", "unit", "ensure", "teardown", "probe", "facts", "secret", "limits")
# The probe names an observation (a fact no plan can know) with this prefix; it becomes the output `observed`.
OBSERVATION = "observed: "
# What a refresh stores for a declared fact the probe did not print.
NOT_REPORTED = "not reported"
# What a refresh of a stack of several hosts stores for a declared fact of a host it could not reach.
NOT_READ = "not read: "
# After a reboot the host is dialled again until another boot id answers.
REBOOT_SETTLE_S = 20.0
REBOOT_WAIT_S = 900.0


class UnitFailed(RuntimeError):
    """A unit's script failed; the message names the unit and shows the tail of its output, never a secret."""


# The state holds every unit's scripts in plain text, and a refresh runs the probes it holds, a destroy the
# teardowns: whoever may write the state backend could otherwise run anything as root on the hosts. Each unit's
# outputs therefore carry a MAC of what would run and where, keyed by the stack's SSH private key. That key is the
# one secret that already grants root on the hosts: a state signed with another key is dialled with that key too
# (the key reaches the provider from the same config), and the hosts refuse it. An unsigned or altered unit runs
# nothing; `pulumi up` runs its ensure from the program instead, which signs it again.
SIGNATURE = "signature"
TRUST_VARIABLE = "GPUHOSTS_TRUST_UNSIGNED_STATE"


def state_signature(props: dict[str, Any], private_key: str) -> str:
    """The MAC of a unit's scripts, its key and its host as the state holds them."""
    target = Target.from_inputs(props["host"])
    secret = props.get("secret")
    signed = {"host": [target.address, target.port, target.user, target.host_key], "unit": props.get("unit"),
              "ensure": props.get("ensure"), "teardown": props.get("teardown"), "probe": props.get("probe"),
              "secret": secret.get("name") if isinstance(secret, dict) else None,
              "limits": {k: int(v) for k, v in (props.get("limits") or {}).items()}}
    key = hashlib.sha256(b"gpuhosts state signature\0" + private_key.strip().encode()).digest()
    return hmac.new(key, json.dumps(signed, sort_keys=True, separators=(",", ":")).encode(),
                    hashlib.sha256).hexdigest()


def signature_problem(props: dict[str, Any], private_key: str | None, environ=os.environ) -> str | None:
    """Why the state's scripts of a unit may not run, or None."""
    if environ.get(TRUST_VARIABLE) == "1" or not private_key:
        # Without a key nothing can be dialled either, and that error names the missing key.
        return None
    given = props.get(SIGNATURE)
    if not isinstance(given, str) or not given:
        return ("the state holds no signature of its scripts (written by a gpuhosts before signatures, or edited)")
    if not hmac.compare_digest(given, state_signature(props, private_key)):
        return ("its scripts, key or host in the state do not match their signature: the state was edited, or "
                "gpuhosts:sshPrivateKey changed since it was signed")
    return None


def secret_digest(unit: str, value: str) -> str:
    """A keyed, truncated digest of a secret: equal values give equal digests per unit, nothing gives the value."""
    return hashlib.sha256(f"gpuhosts-secret\0{unit}\0{value}".encode()).hexdigest()[:16]


def unit_inputs(unit, target: dict[str, Any], secret_digest_value: Any = None,
                timeouts: dict[str, dict[str, int]] | None = None) -> dict[str, Any]:
    """A Unit (gpuhosts.units) as the resource's inputs; `timeouts`, the stack's ssh.operationTimeouts."""
    secret = None
    if unit.stdin_secret is not None:
        secret = {"name": unit.stdin_secret, "digest": secret_digest_value}
    return {
        "host": target, "unit": unit.key,
        "ensure": unit.ensure, "teardown": unit.teardown, "probe": unit.probe,
        "facts": dict(unit.desired), "secret": secret, "limits": operation_limits(unit.kind, timeouts),
        # Outputs the resource has once applied; declared so that the program can read them.
        "rebootRequired": None, "report": None,
    }


# How long one operation may run, on the host (timeout(1)) and for the client: the unit's `limits` input, per kind
# and overridable in the stack (gpuhosts/units.py `operation_limits`). GPUHOSTS_OPERATION_TIMEOUT_S, where set,
# replaces every ensure's and teardown's limit for one run (a link slower than the stack says).
PROBE_TIMEOUT_S = DEFAULT_LIMITS_S["probe"]
TIMEOUT_VARIABLE = "GPUHOSTS_OPERATION_TIMEOUT_S"


def operation_timeout_s(operation: str, props: dict[str, Any] | None = None, environ=os.environ) -> int:
    value = environ.get(TIMEOUT_VARIABLE, "")
    if operation != "probe" and value.isdigit() and int(value) > 0:
        return int(value)
    limits = (props or {}).get("limits") or {}
    # the engine hands numbers back as floats; a state written before limits has none
    given = limits.get(operation) if isinstance(limits, dict) else None
    return int(given) if isinstance(given, (int, float)) and given > 0 else DEFAULT_LIMITS_S[operation]


def run_operation(connection: Connection, props: dict[str, Any], operation: str, resource_id: str | None = None,
                  stdin: bytes = b"", probe_plan: str = "") -> Completed:
    """One operation of a unit on the host, through the command that keeps its ownership record (and, from an
    ensure or a teardown, `probe_plan`: the attestation of the host's probes); SshError when the host cannot be
    reached or the connection drops."""
    limit = operation_timeout_s(operation, props)
    command = lambda path: render("common/run.sh.j2", path=path, unit=props["unit"], operation=operation,
                                  owner=resource_id or "", timeout_s=limit, probe_plan=probe_plan)
    # the client waits a little longer than the host's own limit, so the host's message arrives first
    return connection.run_script(props[operation], command, stdin, timeout=limit + 60)


def probe(connection: Connection, props: dict[str, Any], failure=None) -> dict[str, Any]:
    """The facts a unit's probe observes on the host: what a refresh reads, and `gpuhosts check` too. UnitFailed
    when the probe fails (`failure` words the message), SshError when the host cannot be reached."""
    started = time.monotonic()
    completed = run_operation(connection, props, "probe")
    _log(f"gpuhosts-unit: {props['unit']} probe status={completed.status} seconds={time.monotonic() - started:.2f}")
    return probe_facts(props, completed, failure)


def probe_facts(props: dict[str, Any], completed: Completed, failure=None) -> dict[str, Any]:
    """The facts of a unit's finished probe; UnitFailed when it failed or printed no facts."""
    if completed.status != 0:
        raise UnitFailed((failure or _plain_failure)(props, "probe", completed))
    try:
        return protocol.parse_facts(completed.stdout)
    except protocol.ProtocolError as error:
        raise UnitFailed(f"{props['unit']}: probe: {error}\n{protocol.tail(completed.stdout + completed.stderr)}")


def refreshed_facts(declared: dict[str, Any], observed: dict[str, Any], unit: str = "",
                    secret_value=lambda name: None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The observed facts as a refresh stores them, and the observations apart. Facts the plan declares are
    compared; the rest (minors, dynamic majors) are observations only, never drift. A file that holds a secret
    is compared here, with the secret `secret_value` gives (gpuhosts/facts.py `keyed_observed`); where it is not
    given, the fact counts as declared and what the probe saw is an observation."""
    facts = {name: observed.get(name, NOT_REPORTED) for name in declared}
    notes = {}
    for name, value in facts.items():
        if isinstance(value, str):
            facts[name], note = keyed_observed(unit, value, secret_value)
            if note:
                facts[name], notes[name] = declared[name], f"{value} ({note})"
    facts.update({name: value for name, value in observed.items() if name not in declared and
                  not name.startswith(OBSERVATION)})
    observations = {name[len(OBSERVATION):]: value for name, value in observed.items()
                    if name.startswith(OBSERVATION)}
    return facts, {**observations, **notes}


def _plain_failure(props: dict[str, Any], operation: str, completed: Completed) -> str:
    text = protocol.tail(completed.stdout + completed.stderr)
    return f"{props['unit']}: {operation} exited with status {completed.status}:\n{text}"


_POOL = Pool()
_BATCHES = Batches(log=oplog.write)


class HostUnitProvider(ResourceProvider):
    # The pickled provider holds no secret: secrets reach it through configure().
    serialize_as_secret_always = False

    def configure(self, req) -> None:
        global _CONFIG
        _CONFIG = dict(req.config._props)
        oplog.to_configured_destination()
        watch_engine(sys.argv[1:])
        report_failures_as_messages(sys.modules.get("__main__"))

    # --- the engine's operations -------------------------------------------------------------------------------
    def create(self, props: dict[str, Any]) -> CreateResult:
        resource_id = uuid.uuid4().hex
        result = self._apply(resource_id, props, "ensure")
        return CreateResult(resource_id, outs=self._outputs(props, result))

    def update(self, resource_id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        result = self._apply(resource_id, news, "ensure")
        return UpdateResult(outs=self._outputs(news, result))

    def delete(self, resource_id: str, props: dict[str, Any]) -> None:
        unsigned = signature_problem(props, _config_value("sshPrivateKey"))
        if unsigned:
            raise UnitFailed(
                f"{props.get('unit')}: teardown: nothing ran: {unsigned}. If the unit is still declared, `pulumi up` "
                "signs it again; else compare its teardown in `pulumi stack export` with what this gpuhosts renders "
                f"(`gpuhosts plan`) and, if it is yours, run the destroy once with {TRUST_VARIABLE}=1")
        self._apply(resource_id, props, "teardown")

    def read(self, resource_id: str, props: dict[str, Any]) -> ReadResult:
        unsigned = signature_problem(props, _config_value("sshPrivateKey"))
        if unsigned:
            return self._not_read(resource_id, props, f"{props.get('unit')}: its probe did not run: {unsigned}; "
                                  "`pulumi up` runs its ensure from the program and signs it")
        try:
            observed = self.observe(props)
        except HostNotRead as error:
            return self._not_read(resource_id, props, str(error))
        _log(f"gpuhosts-provider: ssh_commands={_POOL.commands()} cpu_s={time.process_time():.2f}")
        facts, observations = refreshed_facts(props.get("facts") or {}, observed, props.get("unit", ""),
                                              _config_value)
        inputs = {key: props.get(key) for key in INPUT_KEYS}
        inputs["facts"] = facts
        inputs.update(rebootRequired=None, report=None)
        outs = {**props, "facts": facts, "observed": observations or None, SIGNATURE: self._signature(props)}
        return ReadResult(resource_id, outs=outs, inputs=inputs)

    @staticmethod
    def _not_read(resource_id: str, props: dict[str, Any], why: str) -> ReadResult:
        """The unit of a host of several that the refresh could not reach: each declared fact says so, so the unit
        is a change whose update fails naming the host, and the other hosts go on."""
        facts = {name: NOT_READ + why for name in props.get("facts") or {}}
        inputs = {key: props.get(key) for key in INPUT_KEYS}
        inputs.update(facts=facts, rebootRequired=None, report=None)
        return ReadResult(resource_id, outs={**props, "facts": facts, "observed": {"host": NOT_READ + why}},
                          inputs=inputs)

    # --- the work ---------------------------------------------------------------------------------------------
    def observe(self, props: dict[str, Any]) -> dict[str, Any]:
        connection = self._connection(props)
        try:
            batched = _BATCHES.answer(connection, props, _CONFIG, _config_value("sshPrivateKey"))
            if batched is not None:
                _log(f"gpuhosts-unit: {props['unit']} probe status={batched.status} batched")
                return probe_facts(props, batched, self._failure)
            return probe(connection, props, self._failure)
        except SshError as error:
            if isinstance(error, KeyRefused):
                # A refresh configures this provider with the config the last `up` saved in the state, not the
                # stack's current one (pulumi pkg/engine refresh: the providers are loaded from the snapshot), so
                # after `pulumi config set --secret gpuhosts:sshPrivateKey` it dials with the key the host no
                # longer takes. The units then show as changes, and `up`, whose steps get the current config, runs
                # their ensures with the new key and saves it.
                raise HostNotRead(f"{error}: the key the last `pulumi up` saved, which a refresh dials with; if "
                                  "gpuhosts:sshPrivateKey was rotated, `pulumi up` reads the host with the new key "
                                  "and saves it") from None
            if isinstance(error, (Unreachable, ConnectionDropped)) and fleet_hosts():
                raise HostNotRead(f"{host_label(props)} could not be reached ({error}); its units were not read") \
                    from None
            raise self._unreachable(props, "probe", error) from None

    def _apply(self, resource_id: str, props: dict[str, Any], operation: str) -> protocol.Result:
        _BATCHES.forget(props.get("host"))
        started = time.monotonic()
        completed = self._run(props, operation, resource_id)
        _log(f"gpuhosts-unit: {props['unit']} {operation} status={completed.status} "
             f"lock_waits={protocol.lock_waits(completed.stdout)} seconds={time.monotonic() - started:.2f}")
        if completed.status != 0:
            raise UnitFailed(self._failure(props, operation, completed))
        try:
            result = protocol.parse_result(completed.stdout)
        except protocol.ProtocolError as error:
            raise UnitFailed(f"{props['unit']}: {operation}: {error}\n"
                             f"{protocol.tail(completed.stdout + completed.stderr)}") from None
        _log(f"gpuhosts-unit: {props['unit']} {operation} changed={str(result.changed).lower()}")
        for reason in protocol.skipped(completed.stdout):
            # The operator's channel: under the engine a line on stderr is a diagnostic of the run, shown by
            # `pulumi destroy` (and `up`, which deletes what a rename or --replace left behind).
            sys.stderr.write(f"gpuhosts: {props['unit']}: {operation} skipped: {reason}\n")
            sys.stderr.flush()
        reboot = result.report.get("awaitReboot")
        if reboot:
            self._await_reboot(props, reboot.get("bootId", ""))
        return result

    def _run(self, props: dict[str, Any], operation: str, resource_id: str | None):
        connection = self._connection(props)
        stdin = b""
        secret = props.get("secret")
        if secret and operation == "ensure":
            value = _config_value(secret["name"])
            if value is None:
                raise UnitFailed(f"{props['unit']}: {NAMESPACE}:{secret['name']} is not set; "
                                 f"pulumi config set --secret {NAMESPACE}:{secret['name']}")
            stdin = (value + "\n").encode()
        plan = _BATCHES.attestation_for(_CONFIG, props.get("host"), _config_value("sshPrivateKey"))
        try:
            return run_operation(connection, props, operation, resource_id, stdin, plan)
        except SshError as error:
            raise self._unreachable(props, operation, error) from None

    @staticmethod
    def _unreachable(props: dict[str, Any], operation: str, error: SshError) -> Exception:
        if fleet_hosts() and isinstance(error, Unreachable) and not isinstance(error, (HostKeyChanged, KeyRefused)):
            # Which host, by its name in the stack: the unit's key alone is on every host.
            name = host_name(props)
            return UnitFailed(f"{name}/{props['unit']}: {operation}: {error}. Only {name}'s units stop: "
                              "`pulumi up --continue-on-error` converges the other hosts meanwhile")
        failed = HostUnitProvider._unreachable_words(props, operation, error)
        if isinstance(failed, UnitFailed) and fleet_hosts():
            return UnitFailed(f"{host_name(props)}/{failed}")
        return failed

    @staticmethod
    def _unreachable_words(props: dict[str, Any], operation: str, error: SshError) -> Exception:
        if isinstance(error, ConnectionDropped):
            return UnitFailed(f"{props['unit']}: {operation}: the connection dropped mid-command ({error}); "
                              "run `pulumi up` again: every unit converges from where it stopped")
        if isinstance(error, HostKeyChanged):
            # A unit's inputs do not say which kind of stack pins the key, so both keys are named.
            where = str(error).replace(f"{NAMESPACE}:*.ssh.hostKey", f"{NAMESPACE}:host.ssh.hostKey (a training "
                                       f"node's {NAMESPACE}:node.ssh.hostKey)")
            return UnitFailed(f"{props['unit']}: {operation}: {where}")
        if isinstance(error, KeyRefused):
            return UnitFailed(f"{props['unit']}: {operation}: {error}. Nothing ran on it. Give the host the public "
                              "key of gpuhosts:sshPrivateKey in the login user's ~/.ssh/authorized_keys, or set the "
                              "key it accepts: `pulumi config set --secret gpuhosts:sshPrivateKey < KEY`")
        if isinstance(error, Unreachable):
            return UnitFailed(f"{props['unit']}: {operation}: {error}. If the host is down, `pulumi preview "
                              "--refresh=false` still plans; a host gone for good: `pulumi destroy --refresh=false "
                              "--continue-on-error`, then `pulumi stack rm --force`")
        return error

    def _connection(self, props: dict[str, Any]):
        key = _config_value("sshPrivateKey")
        if not key:
            raise UnitFailed(f"{props['unit']}: {SSH_KEY} is not set; pulumi config set --secret {SSH_KEY} < KEY")
        try:
            return _POOL.get(Target.from_inputs(props["host"]), key, dial_attempts=dial_attempts())
        except SshError as error:
            unit = f"{host_name(props)}/{props['unit']}" if fleet_hosts() else props["unit"]
            raise UnitFailed(f"{unit}: {error}") from None

    def _await_reboot(self, props: dict[str, Any], old_boot_id: str) -> None:
        connection = self._connection(props)
        connection.close()
        connection.forget_unreachable()
        time.sleep(REBOOT_SETTLE_S)
        deadline = time.monotonic() + REBOOT_WAIT_S
        while time.monotonic() < deadline:
            try:
                answer = connection.exec('cat "${GPUHOSTS_HOST_ROOT:-}/proc/sys/kernel/random/boot_id"')
                if answer.status == 0 and answer.stdout.strip() not in ("", old_boot_id):
                    return
            except SshError:
                pass
            connection.close()
            # Refused while it reboots: that says nothing about the next dial.
            connection.forget_unreachable()
            time.sleep(5)
        raise UnitFailed(f"{props['unit']}: the host did not come back from its reboot within {REBOOT_WAIT_S:.0f} s")

    def _failure(self, props: dict[str, Any], operation: str, completed) -> str:
        return f"{props['unit']}: {operation} exited with status {completed.status}:\n" + \
            redacted(protocol.tail(completed.stdout + completed.stderr), _CONFIG)

    @staticmethod
    def _outputs(props: dict[str, Any], result: protocol.Result) -> dict[str, Any]:
        outs = {key: props.get(key) for key in INPUT_KEYS}
        report = result.report or None
        if report is not None:
            # A report is a measurement (a gate's, a benchmark's table): `pulumi stack output` shows the last one
            # that passed (components/proxmox_host.py), and when it was taken tells an operator how old it is.
            report = {**report, "measuredAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        outs.update(rebootRequired=result.reboot_required, report=report)
        outs[SIGNATURE] = HostUnitProvider._signature(props)
        return outs

    @staticmethod
    def _signature(props: dict[str, Any]) -> str | None:
        key = _config_value("sshPrivateKey")
        return state_signature(props, key) if key else None


_CONFIG: dict[str, Any] = {}


class HostNotRead(RuntimeError):
    """A refresh could not reach a host of several (see the module's words on failing alone)."""


def fleet_hosts() -> dict[tuple[str, int, str], str]:
    """The hosts of a stack of several, by SSH target (address, port, user) to name, from the stack's config; empty
    for a stack of one host. The config was validated by the program before any resource reached this provider."""
    text = _CONFIG.get(f"{NAMESPACE}:hosts")
    try:
        entries = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return {}
    found = {}
    for entry in entries if isinstance(entries, list) else []:
        ssh = entry.get("ssh") if isinstance(entry, dict) else None
        if isinstance(ssh, dict) and isinstance(entry.get("name"), str):
            found[(str(ssh.get("host")), int(ssh.get("port", 22)), str(ssh.get("user", "root")))] = entry["name"]
    return found


def host_name(props: dict[str, Any]) -> str:
    target = props.get("host") or {}
    key = (str(target.get("address")), int(target.get("port", 22)), str(target.get("user", "root")))
    return fleet_hosts().get(key, f"{key[2]}@{key[0]}:{key[1]}")


def host_label(props: dict[str, Any]) -> str:
    """A host as an error names it: its name in the stack and where it was dialled."""
    target = props.get("host") or {}
    # The engine hands numbers back as floats (a protobuf Struct holds doubles): 22.0, not 22.
    return f"{host_name(props)} ({target.get('user')}@{target.get('address')}:{int(target.get('port', 22))})"


_log = oplog.write

class _FailureMessages:
    """The traceback module as Pulumi's dynamic-provider server sees it, but a unit's failure formats as its message:
    the server answers every exception with `traceback.format_exc()` (sdk/python/lib/pulumi/dynamic/__main__.py
    `_abort_with_traceback`), and the CLI prints that text for each failed resource, so an operator read eight
    Python tracebacks through the server's frames for one refused key. Anything else keeps its traceback."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name: str):
        return getattr(self._real, name)

    def format_exc(self, *args, **kwargs) -> str:
        error = sys.exc_info()[1]
        if isinstance(error, UnitFailed):
            return str(error)
        return self._real.format_exc(*args, **kwargs)


def report_failures_as_messages(server) -> None:
    """Only inside the dynamic-provider server (run as `python -m pulumi.dynamic`, so its module is __main__)."""
    if server is not None and hasattr(server, "_abort_with_traceback") and not isinstance(
            getattr(server, "traceback", None), _FailureMessages):
        server.traceback = _FailureMessages(server.traceback)


ENGINE_CHECK_S = 5.0
_watching: list[threading.Thread] = []


def watch_engine(argv: list[str]) -> None:
    """Ends this provider process once the engine that started it is gone. Pulumi's Python dynamic-provider server
    (sdk/python/lib/pulumi/dynamic/__main__.py `main`) never checks on the engine whose address the CLI passes it,
    unlike Pulumi's Go plugins (rpcutil.Healthcheck), and the CLI starts it through a shell that does not exec it:
    a CLI killed mid-update left it running, holding its SSH connections, for as long as the machine ran."""
    host, _, port = (argv[0] if argv else "").rpartition(":")
    if _watching or not host or not port.isdigit():
        return

    def watch() -> None:
        refused = 0
        while refused < 2:
            time.sleep(ENGINE_CHECK_S)
            try:
                socket.create_connection((host, int(port)), timeout=ENGINE_CHECK_S).close()
                refused = 0
            except OSError:
                refused += 1
        _log(f"gpuhosts-provider: the engine at {host}:{port} is gone; this provider process ends")
        os._exit(1)

    _watching.append(threading.Thread(target=watch, name="engine-watch", daemon=True))
    _watching[0].start()


def _config_value(name: str) -> str | None:
    value = _CONFIG.get(f"{NAMESPACE}:{name}")
    return value if isinstance(value, str) else None


def redacted(text: str, config: dict[str, Any]) -> str:
    """`text` with every value of the stack's config that could be a secret replaced, by value: a secret's name
    says nothing (an API key may be named anything), so every string value of 8 characters or more goes, and each
    long line of a multi-line one (a private key's body may be printed in part)."""
    values = [value for value in config.values() if isinstance(value, str) and len(value) >= 8]
    pieces = values + [line.strip() for value in values for line in value.splitlines() if len(line.strip()) >= 16]
    for piece in sorted(set(pieces), key=len, reverse=True):
        text = text.replace(piece, "[secret]")
    return text


def dial_attempts() -> int:
    """How often a dial that fails on the way (a timeout, a reset) is tried before the host counts as unreachable;
    a refusal or no route is never tried again (gpuhosts/ssh.py). The provider's environment may lower it (a link
    known to be up) or raise it (a flaky one)."""
    text = os.environ.get(DIAL_ATTEMPTS_VARIABLE, "")
    if not text:
        return DIAL_ATTEMPTS
    if not text.isdigit() or int(text) < 1:
        raise UnitFailed(f"{DIAL_ATTEMPTS_VARIABLE}={text!r}: give a whole number of 1 or more")
    return int(text)


def connections_dialled() -> int:
    return _POOL.dials()


def commands_sent() -> int:
    return _POOL.commands()
