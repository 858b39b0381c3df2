"""A refresh reads a host in one SSH command: every unit's probe of that host, run by one script there.

The engine asks the provider to read each unit on its own (pulumi sdk/python/lib/pulumi/dynamic/__main__.py
`Read`, served by a small thread pool), so a refresh of a host of forty units was forty round trips, and a fleet's
refresh units × hosts of them. The provider knows the stack's config (`configure()` hands it every `gpuhosts:*`
key), so it plans the units itself, exactly as the program does (gpuhosts.plan.load_hosts). The first read of a
host runs all that host's planned probes in one command; the other reads of that host are answered from it.

A unit is answered from the batch only when the state's probe and its limit are the very text and limit the plan
gives it (its signature was checked before): each probe runs in a process of its own, under its own timeout,
its output and status kept apart by byte length, so its answer is what the probe alone would give. Anything else,
a probe the state holds from an older release, a config that does not plan, a host that cannot be reached, is
read alone, as before. `GPUHOSTS_REFRESH_BATCH=0` reads every unit alone (to see one probe's own command).

A refresh's config is the one the state saved, and the state is not trusted (gpuhosts/provider.py, signatures): an
edited config would plan other probes. So every ensure and teardown leaves on the host an attestation of the
host's probes as that run's config plans them, an HMAC keyed by the stack's SSH key (`attestation`), and the batch
runs only when the host holds the attestation of exactly the probes it carries; else nothing of it runs.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets as random_words
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from gpuhosts.config import NAMESPACE, StackKind, stack_kind
from gpuhosts.fleet import is_fleet, validate_fleet
from gpuhosts.plans.proxmox_host import plan_host
from gpuhosts.plans.training_node import plan_training_node
from gpuhosts.render import render
from gpuhosts.ssh import Completed, Connection, SshError
from gpuhosts.stacks import validate_stack, validate_trainer_stack
from gpuhosts.units import operation_limits

SWITCH = "GPUHOSTS_REFRESH_BATCH"
# How many probes of one host run at once on it: a refresh read about that many units at a time before.
PARALLEL = 4
SECRET_STAND_IN = "[secret]"
HOST_KEYS = ("address", "port", "user")


@dataclass(frozen=True)
class PlannedProbe:
    unit: str
    script: str
    limit_s: int


HostKey = tuple[str, int, str]


def host_key(target: dict[str, Any]) -> HostKey:
    return str(target.get("address")), int(target.get("port", 22)), str(target.get("user", "root"))


def config_values(config: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """The stack's `gpuhosts:*` values as the program reads them (objects arrive as JSON text), and which are
    secrets: every key that is not a section of a stack (the SSH key, the Hub token, API keys the services name).
    A secret's value stands in as the program's does: no probe reads one."""
    sections = {"kind", "host", "hosts", "nvidia", "gpus", "containers", "services", "benchmarks", "monitoring",
                "node", "training", "multiNode"}
    values, secure = {}, set()
    for key, text in config.items():
        namespace, _, name = key.partition(":")
        if namespace != NAMESPACE:
            continue
        if name not in sections:
            values[name], secure = SECRET_STAND_IN, secure | {name}
            continue
        try:
            values[name] = json.loads(text) if isinstance(text, str) else text
        except ValueError:
            values[name] = text
    return values, secure


def planned_probes(config: dict[str, Any]) -> dict[HostKey, dict[str, PlannedProbe]]:
    """Each host's units' probes, by the host's SSH target, as the stack's program plans them; ConfigError when
    the config does not validate (the program refused it too)."""
    values, secure = config_values(config)
    hosts: list[tuple[Any, Any]] = []  # (ssh config, graph)
    if stack_kind(values) is StackKind.TRAINER:
        trainer = validate_trainer_stack(values, secure)
        hosts.append((trainer.node.ssh, plan_training_node(trainer).graph))
    elif is_fleet(values):
        hosts.extend((entry.config.host.ssh, plan_host(entry.config))
                     for entry in validate_fleet(values, secure).hosts)
    else:
        config_ = validate_stack(values, secure)
        hosts.append((config_.host.ssh, plan_host(config_)))
    found: dict[HostKey, dict[str, PlannedProbe]] = {}
    for ssh, graph in hosts:
        limits = ssh.operation_timeouts
        found[(ssh.host, ssh.port, ssh.user)] = {
            unit.key: PlannedProbe(unit.key, unit.probe, operation_limits(unit.kind, limits)["probe"])
            for unit in graph}
    return found


def attestation(private_key: str, host: HostKey, probes: list[PlannedProbe]) -> str:
    """The stack key's HMAC of a host's probes: what an ensure leaves on the host, and what a batch must find."""
    key = hashlib.sha256(b"gpuhosts probe plan\0" + private_key.strip().encode()).digest()
    listed = [list(host)] + [[p.unit, hashlib.sha256(p.script.encode()).hexdigest(), p.limit_s]
                             for p in sorted(probes, key=lambda p: p.unit)]
    return hmac.new(key, json.dumps(listed, separators=(",", ":")).encode(), hashlib.sha256).hexdigest()


def batch_script(probes: list[PlannedProbe], boundary: str, expected: str, parallel: int = PARALLEL) -> str:
    """The one script that runs `probes` on the host, each under its own limit, and prints each one's status,
    stdout and stderr framed by `boundary` and their byte lengths; only where the host holds `expected`, their
    attestation."""
    # A probe holding the here-document's end line is refused by the template's `heredoc` filter (ValueError).
    return render("common/probe_batch.sh.j2", probes=probes, boundary=boundary, expected=expected,
                  parallel=parallel)


class BatchFraming(ValueError):
    """The batch's output is not what its script prints."""


class NotAttested(BatchFraming):
    """The host holds no attestation of these probes: none of them ran."""


NOT_ATTESTED_STATUS = 3


def parse_batch(stdout: bytes, probes: list[PlannedProbe], boundary: str) -> dict[str, Completed]:
    """Each probe's own status, stdout and stderr, cut out of the batch's output by their lengths."""
    results: dict[str, Completed] = {}
    position = 0
    marker = f"{boundary} ".encode()
    for index, probe in enumerate(probes, start=1):
        start = stdout.find(marker, position)
        end = stdout.find(b"\n", start)
        if start < 0 or end < 0:
            raise BatchFraming(f"no frame for probe {index} ({probe.unit})")
        fields = stdout[start + len(marker):end].split()
        if len(fields) != 4 or not all(f.lstrip(b"-").isdigit() for f in fields) or int(fields[0]) != index:
            raise BatchFraming(f"a malformed frame for probe {index} ({probe.unit}): {fields!r}")
        status, out_length, err_length = (int(f) for f in fields[1:])
        out = stdout[end + 1:end + 1 + out_length]
        err = stdout[end + 1 + out_length:end + 1 + out_length + err_length]
        if len(out) + len(err) != out_length + err_length:
            raise BatchFraming(f"the output of probe {index} ({probe.unit}) was cut short")
        results[probe.unit] = Completed(status, out.decode(errors="replace"), err.decode(errors="replace"))
        position = end + 1 + out_length + err_length
    return results


def run_batch(connection: Connection, probes: list[PlannedProbe], expected: str) -> dict[str, Completed]:
    """Every probe of `probes` in one command on the host; SshError or BatchFraming when it cannot be read,
    NotAttested when the host holds another attestation than `expected`."""
    boundary = "gpuhosts-probe-" + random_words.token_hex(12)
    script = batch_script(probes, boundary, expected)
    # Bounded on the client as each probe is on the host: the sum, should each run to its limit one after another.
    timeout = sum(probe.limit_s + 30 for probe in probes) + 60
    status, out, err = connection.exec_bytes(
        "uploaded=$(umask 077; mktemp /tmp/gpuhosts-probes.XXXXXXXX) && cat >\"$uploaded\" || exit 125\n"
        "exec </dev/null\nbash \"$uploaded\"; status=$?; rm -f \"$uploaded\"; exit \"$status\"\n",
        script.encode(), timeout=timeout)
    if status == NOT_ATTESTED_STATUS:
        raise NotAttested("the host holds no attestation of the probes this config plans (none ran)")
    if status != 0:
        raise BatchFraming(f"the batch exited with status {status}: {err.decode(errors='replace')[-500:]}")
    return parse_batch(out, probes, boundary)


@dataclass
class _Host:
    lock: threading.Lock = field(default_factory=threading.Lock)
    ran: bool = False
    answers: dict[str, tuple[PlannedProbe, Completed]] = field(default_factory=dict)


class Batches:
    """The batches of one provider process: planned once from its config, run once per host until an operation
    changes that host, each answer given once."""

    def __init__(self, log=lambda line: None, environ=os.environ):
        self._lock = threading.Lock()
        self._hosts: dict[HostKey, _Host] = {}
        self._planned: dict[HostKey, dict[str, PlannedProbe]] | None = None
        self._plan_problem = ""
        self._log = log
        self._environ = environ

    def _plan(self, config: dict[str, Any]) -> dict[HostKey, dict[str, PlannedProbe]]:
        with self._lock:
            if self._planned is None:
                try:
                    self._planned = planned_probes(config)
                except Exception as error:  # noqa: BLE001 - the units are read one by one instead
                    self._planned, self._plan_problem = {}, f"{type(error).__name__}: {str(error)[:300]}"
                    self._log(f"gpuhosts-batch: the config did not plan ({self._plan_problem}); each unit is read "
                              "alone")
            return self._planned

    def attestation_for(self, config: dict[str, Any], target: dict[str, Any], private_key: str | None) -> str:
        """What an ensure or a teardown on `target` leaves on it: the attestation of the host's planned probes, or
        '' where the config does not plan or names no such host."""
        planned = self._plan(config).get(host_key(target or {}))
        return attestation(private_key, host_key(target), list(planned.values())) if planned and private_key else ""

    def answer(self, connection: Connection, props: dict[str, Any], config: dict[str, Any],
               private_key: str | None) -> Completed | None:
        """The unit's probe result from its host's batch, or None: read it alone."""
        if self._environ.get(SWITCH, "1") == "0" or not private_key:
            return None
        key = host_key(props.get("host") or {})
        planned = self._plan(config).get(key, {})
        mine = planned.get(props.get("unit"))
        limits = props.get("limits") or {}
        if mine is None or props.get("probe") != mine.script or int(limits.get("probe", 0) or 0) != mine.limit_s:
            return None
        with self._lock:
            host = self._hosts.setdefault(key, _Host())
        with host.lock:
            if not host.ran:
                host.ran = True
                probes = list(planned.values())
                started = time.monotonic()
                try:
                    results = run_batch(connection, probes, attestation(private_key, key, probes))
                except (SshError, BatchFraming, ValueError) as error:
                    self._log(f"gpuhosts-batch: {key[2]}@{key[0]}:{key[1]} not read in one command ({error}); "
                              "each unit is read alone")
                    return None
                host.answers = {probe.unit: (probe, results[probe.unit]) for probe in probes}
                self._log(f"gpuhosts-batch: {key[2]}@{key[0]}:{key[1]} probes={len(probes)} "
                          f"seconds={time.monotonic() - started:.2f}")
            found = host.answers.pop(mine.unit, None)
        return found[1] if found is not None and found[0] == mine else None

    def forget(self, target: dict[str, Any]) -> None:
        """An ensure or a teardown ran on the host: what its batch read may be out of date."""
        with self._lock:
            self._hosts.pop(host_key(target or {}), None)
