"""`gpuhosts check STACK`: a live drift check of a stack's host without Pulumi.

It runs each unit's read-only probe over SSH in the plan's apply order, through the code a refresh uses
(gpuhosts/provider.py `probe` and `refreshed_facts`, gpuhosts/ssh.py `Connection`), and compares what the host
reports with the facts the plan declares — the comparison `pulumi preview` makes after its refresh. Observations
(a GPU's minor, a dynamic major) are shown and never count as drift.

No Pulumi backend is involved, so the SSH key cannot come from the stack's encrypted `gpuhosts:sshPrivateKey`: it
is read from a file (`--ssh-key FILE`, or the file `$GPUHOSTS_SSH_KEY_FILE` names), in memory, and never printed.
The host key is pinned exactly as the provider pins it: the stack's `ssh.hostKey`, an unknown key refused.

With `--deep`, each download is also read whole: every file against the Hub's own listing of the repository at
the pinned revision (`GET {HF_ENDPOINT}/api/models/{repo}/tree/{revision}?recursive=true`, huggingface_hub
`list_repo_tree`, read from this machine; `HF_TOKEN` is sent when set), a weight file by its full sha256 against
the listing's LFS sha256. A refresh samples a weight file (its size and three MiB of it) and may miss one changed
byte of a multi-GB shard; the deep check names the file. Its cost is a full read of the weights on the host:
`deep-check: UNIT bytes=N seconds=S` on stderr per download.

Exit codes: 0 every unit in sync; 2 drift; 1 an error (bad stack, missing or unreadable key, a host that cannot be
reached, a probe that fails, a Hub listing that cannot be read). An error wins over drift: the check is then
incomplete.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import stat
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from gpuhosts import exit_codes
from gpuhosts.config import ConfigError, StackKind, stack_kind
from gpuhosts.facts import deep_content_fact, desired as desired_of, render_probe
from gpuhosts.plan import PlanError, read_stack_file, stand_in_secrets
from gpuhosts.plans.model_download import deep_probe
from gpuhosts.plans.proxmox_host import plan_host
from gpuhosts.plans.training_node import plan_training_node
from gpuhosts.provider import UnitFailed, probe, refreshed_facts, unit_inputs
from gpuhosts.render import PROJECT_ROOT, TemplateError, render
from gpuhosts.ssh import DIAL_ATTEMPTS, Connection, ConnectionDropped, SshError, Target, Unreachable, load_private_key
from gpuhosts.stacks import require_locks, validate_stack, validate_trainer_stack

KEY_FILE_VARIABLE = "GPUHOSTS_SSH_KEY_FILE"
# huggingface_hub's own variables (constants.py ENDPOINT, HF_TOKEN): where the Hub is, and the token it is sent.
HUB_ENDPOINT_VARIABLE, HUB_TOKEN_VARIABLE = "HF_ENDPOINT", "HF_TOKEN"
HUB_ENDPOINT = "https://huggingface.co"
EXIT_IN_SYNC, EXIT_ERROR, EXIT_INVALID, EXIT_DRIFT = exit_codes.OK, exit_codes.ERROR, exit_codes.INVALID, exit_codes.DIFFERENCES
IN_SYNC, DRIFTED, UNREACHABLE, FAILED = "in sync", "drifted", "unreachable", "failed"
# What a drifted field shows on the side the plan does not declare (a fact the probe reports beyond them).
NOT_DECLARED = "(not declared)"


class CheckError(Exception):
    """Input the check cannot start from; the message names the option or field and the fix."""


@dataclass(frozen=True)
class FieldDrift:
    field: str
    observed: Any
    desired: Any


@dataclass
class UnitCheck:
    unit: str
    kind: str
    status: str
    drift: list[FieldDrift] = field(default_factory=list)
    observations: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None
    # With --deep, for a download: what was read whole and how long it took.
    deep: dict[str, Any] | None = None


@dataclass(frozen=True)
class Stack:
    host: str
    target: Target
    graph: Any
    warnings: tuple[str, ...]


# --- pure ---------------------------------------------------------------------------------------------------------
def compare(desired: dict[str, Any], observed: dict[str, Any]) -> tuple[list[FieldDrift], dict[str, Any]]:
    """The drifted fields and the observations of one probe's answer, as the refresh and the engine's diff see it:
    the refreshed facts (`refreshed_facts`) against the declared ones, in the plan's order of facts."""
    facts, observations = refreshed_facts(desired, observed)
    drift = [FieldDrift(name, facts[name], desired[name]) for name in desired if facts[name] != desired[name]]
    drift += [FieldDrift(name, value, NOT_DECLARED) for name, value in facts.items() if name not in desired]
    return drift, observations


def exit_code(checks: list[UnitCheck]) -> int:
    statuses = {check.status for check in checks}
    if statuses & {UNREACHABLE, FAILED}:
        return EXIT_ERROR
    return EXIT_DRIFT if DRIFTED in statuses else EXIT_IN_SYNC


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def text_report(stack: str, host: str, target: Target, checks: list[UnitCheck]) -> list[str]:
    lines = [f"gpuhosts check {stack}: host {host} ({target.user}@{target.address}:{target.port})"]
    # A host that cannot be reached is one reason, said once: the first unit's; each unit then only says so.
    unreachable = [check.reason or "" for check in checks if check.status == UNREACHABLE]
    if unreachable:
        lines.append(f"  {host} unreachable: {unreachable[0].splitlines()[0] if unreachable[0] else ''}")
        lines += [f"      {line}" for line in unreachable[0].splitlines()[1:]]
    for check in checks:
        if check.status == UNREACHABLE:
            lines.append(f"  {check.unit}: unreachable")
        elif check.status == DRIFTED:
            lines.append(f"  {check.unit}: drifted")
            lines += [f"      {d.field}: {_shown(d.observed)} → {_shown(d.desired)}" for d in check.drift]
        elif check.status == FAILED:
            reason = (check.reason or "").splitlines() or [""]
            lines.append(f"  {check.unit}: {check.status} ({reason[0]}")
            lines += [f"      {line}" for line in reason[1:]]
            lines[-1] += ")"
        else:
            lines.append(f"  {check.unit}: in sync")
        lines += [f"      observed {name}: {_shown(value)}" for name, value in check.observations.items()]
        if check.deep and check.deep.get("directories"):
            lines.append(f"      deep: every recorded file of {', '.join(check.deep['directories'])} read whole in "
                         f"{check.deep['seconds']:.2f} s")
            lines += [f"      fix: {fix}" for fix in check.deep.get("fixes", [])]
        elif check.deep:
            lines.append(f"      deep: {check.deep['files']} file(s) of {check.deep['repo']}@{check.deep['revision']} "
                         f"read whole, {check.deep['bytes']} bytes in {check.deep['seconds']:.2f} s")
            lines += [f"      fix: {fix}" for fix in check.deep.get("fixes", [])]
    counts = {status: sum(c.status == status for c in checks) for status in (IN_SYNC, DRIFTED, UNREACHABLE, FAILED)}
    lines.append(f"{host}: " + ", ".join(f"{n} {status}" for status, n in counts.items() if n or status != FAILED))
    return lines


def json_report(stack: str, host: str, target: Target, checks: list[UnitCheck], warnings=()) -> dict[str, Any]:
    code = exit_code(checks)
    return {"stack": stack, "host": host, "target": f"{target.user}@{target.address}:{target.port}",
            "result": {EXIT_IN_SYNC: IN_SYNC, EXIT_DRIFT: DRIFTED, EXIT_ERROR: "error"}[code], "exitCode": code,
            "units": [asdict(check) for check in checks], "warnings": list(warnings)}


# --- input ----------------------------------------------------------------------------------------------------------
def load(stack_file: Path) -> Stack:
    """The stack's host, where its SSH server is (address, port, user, pinned key) and its unit graph. Secrets the
    stack names are stood in for, as in the plan: probes receive none."""
    other_keys: list[str] = []
    values, secure, _ = stand_in_secrets(*read_stack_file(stack_file, other_keys))
    if stack_kind(values) is StackKind.TRAINER:
        trainer = require_locks(validate_trainer_stack(values, secure, other_keys))
        name, ssh, graph, warnings = trainer.node.name, trainer.node.ssh, plan_training_node(trainer).graph, \
            trainer.warnings
    else:
        config = require_locks(validate_stack(values, secure, other_keys))
        name, ssh, graph, warnings = config.host.name, config.host.ssh, plan_host(config), config.warnings()
    # As components/host_units.py `target_of` gives it to the provider: None only with insecureIgnoreHostKey.
    return Stack(name, Target(ssh.host, ssh.port, ssh.user, ssh.host_key), graph, tuple(warnings))


def key_source(option: str | None, environ: dict[str, str]) -> tuple[str, str]:
    """(how the key file was given, its path); CheckError naming both ways when neither was."""
    if option:
        return "--ssh-key", option
    if environ.get(KEY_FILE_VARIABLE):
        return f"${KEY_FILE_VARIABLE}", environ[KEY_FILE_VARIABLE]
    raise CheckError(f"no SSH key: give --ssh-key FILE (or set {KEY_FILE_VARIABLE} to the file's path), the private "
                     "key the host authorises; the stack file holds gpuhosts:sshPrivateKey only encrypted")


def read_key(source: str, path: str):
    """The private key in the file, parsed in memory; CheckError naming the option, never showing the content."""
    try:
        mode = os.stat(path).st_mode
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as error:
        why = error.strerror if isinstance(error, OSError) else "it is not text"
        raise CheckError(f"{source} {path}: cannot read the key file ({why}); give the file that holds the private "
                         "key") from None
    if not stat.S_ISREG(mode):
        raise CheckError(f"{source} {path}: is not a file; give the file that holds the private key")
    if mode & 0o077:
        # As ssh(1) refuses an unprotected private key file.
        raise CheckError(f"{source} {path}: is accessible by others (mode {stat.S_IMODE(mode):04o}); chmod 600 it")
    try:
        return load_private_key(text)
    except SshError:
        raise CheckError(f"{source} {path}: is not an unencrypted ed25519, ECDSA or RSA private key in OpenSSH or "
                         "PEM form") from None


# --- the host ---------------------------------------------------------------------------------------------------------
def check_units(connection: Connection, graph, target: dict[str, Any], reword: Callable[[str], str] = str) \
        -> list[UnitCheck]:
    """Each unit's probe in the apply order. Once the host cannot be reached, every unit left is unreachable with
    that reason (no dialling again per unit); a connection that drops mid-probe costs that unit only."""
    checks: list[UnitCheck] = []
    gone: str | None = None
    for unit in graph.apply_order:
        props = unit_inputs(unit, target)
        if gone is not None:
            checks.append(UnitCheck(unit.key, unit.kind, UNREACHABLE, reason=gone))
            continue
        try:
            observed = probe(connection, props)
        except Unreachable as error:
            gone = reword(str(error))
            checks.append(UnitCheck(unit.key, unit.kind, UNREACHABLE, reason=gone))
            continue
        except ConnectionDropped as error:
            checks.append(UnitCheck(unit.key, unit.kind, UNREACHABLE, reason=reword(str(error))))
            continue
        except (UnitFailed, SshError) as error:
            checks.append(UnitCheck(unit.key, unit.kind, FAILED, reason=str(error)))
            continue
        drift, observations = compare(props["facts"], observed)
        checks.append(UnitCheck(unit.key, unit.kind, DRIFTED if drift else IN_SYNC, drift, observations))
    return checks


# --- the Hub and the deep check -----------------------------------------------------------------------------------------
class HubError(Exception):
    """The Hub's listing could not be read; the message says what the Hub answered."""


def hub_listing(endpoint: str, repo: str, revision: str, token: str | None = None,
                opener=urllib.request.urlopen) -> list[dict[str, Any]]:
    """Every entry of the repository at the revision, as huggingface_hub v0.36.0 `list_repo_tree(recursive=True)`
    asks for them: pages followed through their `Link: <…>; rel="next"` header (utils/_pagination.py
    `paginate`)."""
    url = (f"{endpoint.rstrip('/')}/api/models/{repo}/tree/{urllib.parse.quote(revision, safe='')}"
           "?recursive=true&expand=false")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    entries: list[dict[str, Any]] = []
    origin = _origin(endpoint)
    while url:
        if _origin(url) != origin:
            # the token goes to the Hub the stack names and nowhere a response points
            raise HubError(f"the Hub's listing of {repo}@{revision} pointed its next page at {_origin(url)}, not "
                           f"{origin}; not followed")
        try:
            with opener(urllib.request.Request(url, headers=headers), timeout=60) as response:
                entries += json.load(response)
                url = _next_page(response.headers.get("Link", ""))
        except urllib.error.HTTPError as error:
            code = error.headers.get("X-Error-Code") or error.code
            raise HubError(f"the Hub's listing of {repo}@{revision} answered {error.code} ({code})") from None
        except (urllib.error.URLError, OSError, ValueError) as error:
            raise HubError(f"the Hub's listing of {repo}@{revision} could not be read: "
                           f"{getattr(error, 'reason', error)}") from None
    return entries


def _origin(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def _next_page(link: str) -> str | None:
    for part in link.split(","):
        target, _, params = part.partition(";")
        if 'rel="next"' in params.replace(" ", ""):
            return target.strip().strip("<>")
    return None


def deep_check(connection: Connection, unit, target: dict[str, Any], listing: list[dict[str, Any]],
               check: UnitCheck, log=lambda line: None) -> UnitCheck:
    """The download read whole on the host against the Hub's listing, its drift added to the unit's check."""
    script, desired = deep_probe(unit, listing)
    props = {**unit_inputs(unit, target), "probe": script, "facts": desired}
    started = time.monotonic()
    observed = probe(connection, props)
    seconds = time.monotonic() - started
    drift, _ = compare(desired, observed)
    read = sum(entry.get("lfs", {}).get("size", entry.get("size", 0)) for entry in listing if entry.get("type") == "file")
    log(f"deep-check: {unit.key} bytes={read} seconds={seconds:.2f}")
    # A file the refresh does not see changed (a byte outside the samples) is repaired once it is gone: the
    # refresh then finds it missing and the download's ensure fetches it, and only it, again.
    where = f" in CT {unit.hub.container}" if unit.hub.container is not None else ""
    fixes = [f"rm {unit.hub.directory}/{d.field.split(' of ', 1)[1]}{where}, then pulumi up (the download fetches it "
             "again)" for d in drift if d.observed != "missing"]
    check.drift += drift
    check.deep = {"repo": unit.hub.repo, "revision": unit.hub.revision, "files": len(desired), "bytes": read,
                  "seconds": round(seconds, 2), "fixes": fixes}
    if drift and check.status == IN_SYNC:
        check.status = DRIFTED
    return check


def deep_content_check(connection: Connection, unit, target: dict[str, Any], check: UnitCheck,
                       log=lambda line: None) -> UnitCheck:
    """The directories a unit recorded as it wrote them (staged data set shards, tokenized data, a converted
    checkpoint), every file read whole against its recorded sha256, the drift added to the unit's check."""
    facts = [deep_content_fact(directory) for directory in unit.content]
    script = render_probe(unit.key, facts, prelude=render("common/content.sh.j2"), vmid=unit.container)
    props = {**unit_inputs(unit, target), "probe": script, "facts": desired_of(facts)}
    started = time.monotonic()
    observed = probe(connection, props)
    seconds = time.monotonic() - started
    drift, _ = compare(desired_of(facts), observed)
    log(f"deep-check: {unit.key} directories={len(facts)} seconds={seconds:.2f}")
    # a file gone is written again by the unit's ensure: the staging fetches it, the others redo their step
    fixes = [f"remove what {d.observed!r} names under {d.field.split(' of the content of ', 1)[1]}, then pulumi up "
             "(the unit writes it again)" for d in drift if d.observed not in ("missing", "no record")]
    check.drift += drift
    check.deep = {"repo": None, "revision": None, "files": len(facts), "bytes": None, "seconds": round(seconds, 2),
                  "fixes": fixes, "directories": list(unit.content)}
    if drift and check.status == IN_SYNC:
        check.status = DRIFTED
    return check


# --- the command ------------------------------------------------------------------------------------------------------
def add_subparser(commands) -> argparse.ArgumentParser:
    parser = commands.add_parser("check", help="run every unit's probe on the live host and report drift",
                                 description="Exit codes: 0 in sync, 2 drift, 1 error (bad stack, key, unreachable "
                                             "host, failed probe).")
    parser.add_argument("stack", help="stack name, e.g. kpro5")
    parser.add_argument("--stack-file", type=Path, help="stack config file (default: stacks/Pulumi.STACK.yaml)")
    parser.add_argument("--ssh-key", metavar="FILE",
                        help=f"private key file for the host (default: the file ${KEY_FILE_VARIABLE} names)")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.add_argument("--deep", action="store_true",
                        help="also read each download whole and compare every file with the Hub's listing "
                             f"(${HUB_ENDPOINT_VARIABLE}, default {HUB_ENDPOINT}), and every file a unit recorded "
                             "as it wrote it (data set shards, tokenized data, a converted checkpoint) against its "
                             "recorded sha256; reads all the weights and data")
    parser.add_argument("--dial-attempts", type=int, default=DIAL_ATTEMPTS, metavar="N",
                        help=f"dials cut on the way (a timeout, a reset) before the host counts as unreachable; "
                             f"a refused one is not retried (default {DIAL_ATTEMPTS})")
    parser.add_argument("--verbose", action="store_true", help="show each dial and probe on stderr")

    # argparse exits 2 on a usage error, which here means drift: a mistyped command is an error (1).
    parser.__class__ = _CheckParser
    return parser


class _CheckParser(argparse.ArgumentParser):
    """The `check` subparser: a usage error, an unknown option included, exits 2 (gpuhosts/exit_codes.py)."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        print(f"gpuhosts check: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_INVALID)

    def parse_known_args(self, args=None, namespace=None):
        # Left over, an unknown option would reach the top-level parser, whose error exits 2.
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, []


def run(args: argparse.Namespace, stack_name, environ: dict[str, str] | None = None) -> int:
    """`gpuhosts check` with parsed arguments; `stack_name` is the pattern a stack name matches."""
    environ = dict(os.environ if environ is None else environ)
    stack = args.stack
    try:
        if not stack_name.match(stack):
            raise CheckError(f"{stack!r} is not a stack name (letters, digits, '-', '_', '.')")
        if args.dial_attempts < 1:
            raise CheckError(f"--dial-attempts {args.dial_attempts}: give 1 or more")
        source, path = key_source(args.ssh_key, environ)
        loaded = load(args.stack_file or PROJECT_ROOT / "stacks" / f"Pulumi.{stack}.yaml")
        key = read_key(source, path)
    except (CheckError, ConfigError) as error:
        return _fail(args, stack, str(error), EXIT_INVALID)
    except (PlanError, TemplateError) as error:
        return _fail(args, stack, str(error))
    if not args.json:
        for warning in loaded.warnings:
            print(f"warning: {warning}", file=sys.stderr)
    target = loaded.target
    connection = Connection(target, key, dial_attempts=args.dial_attempts)
    inputs = {"address": target.address, "port": target.port, "user": target.user, "hostKey": target.host_key}
    reword = lambda reason: reason.replace("gpuhosts:sshPrivateKey", f"{source} {path}") \
        .replace("gpuhosts:*.ssh.hostKey", "the stack's ssh.hostKey")
    # The dial and probe log lines are the provider's log for the engine; here only on request.
    log = contextlib.nullcontext() if args.verbose else contextlib.redirect_stderr(io.StringIO())
    costs: list[str] = []
    try:
        with log:
            checks = check_units(connection, loaded.graph, inputs, reword)
            if args.deep:
                deep_checks(connection, loaded.graph, inputs, checks, environ, costs.append)
    finally:
        connection.close()
    for line in costs:
        print(line, file=sys.stderr)
    if args.json:
        print(json.dumps(json_report(stack, loaded.host, target, checks, loaded.warnings), indent=2, sort_keys=True,
                         ensure_ascii=False))
    else:
        print("\n".join(text_report(stack, loaded.host, target, checks)))
    return exit_code(checks)


def deep_checks(connection: Connection, graph, target: dict[str, Any], checks: list[UnitCheck],
                environ: dict[str, str], log) -> None:
    """--deep: each download its probe reached, read whole against the Hub's listing at its revision."""
    endpoint = environ.get(HUB_ENDPOINT_VARIABLE) or HUB_ENDPOINT
    token = environ.get(HUB_TOKEN_VARIABLE) or None
    by_key = {check.unit: check for check in checks}
    for unit in graph.apply_order:
        check = by_key[unit.key]
        if check.status in (UNREACHABLE, FAILED):
            continue
        if unit.content:
            try:
                deep_content_check(connection, unit, target, check, log)
            except (UnitFailed, SshError) as error:
                check.status, check.reason = FAILED, f"deep: {error}"
            continue
        if unit.hub is None:
            continue
        try:
            listing = hub_listing(endpoint, unit.hub.repo, unit.hub.revision, token)
            deep_check(connection, unit, target, listing, check, log)
        except HubError as error:
            check.status, check.reason = FAILED, f"deep: {error}"
        except (UnitFailed, SshError) as error:
            check.status, check.reason = FAILED, f"deep: {error}"


def _fail(args: argparse.Namespace, stack: str, message: str, code: int = EXIT_ERROR) -> int:
    print(f"gpuhosts check {stack}: {message}", file=sys.stderr)
    if args.json:
        print(json.dumps({"stack": stack, "result": "error", "exitCode": code, "error": message}, indent=2,
                         sort_keys=True, ensure_ascii=False))
    return code
