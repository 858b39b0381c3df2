"""`gpuhosts bench STACK NAME`: run a declared benchmark again now, with its inputs unchanged.

It runs the benchmark unit's own ensure over SSH, through the code the provider uses (gpuhosts/provider.py
`run_operation`), in its forced form: the same script but for its `force=1` line, so the host measures again and
keeps its inputs marker (a later refresh sees no drift). The SSH key comes from a file as for `gpuhosts check`.
The stack output `benchmarks` shows the run of the last `pulumi up`; to have a rerun recorded there, change the
benchmark's `runId` instead.

Exit codes: 0 measured, 1 an error or a failed run (the table still printed when the host wrote one).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
from pathlib import Path

from gpuhosts import exit_codes
from gpuhosts import check, protocol
from gpuhosts.config import ConfigError
from gpuhosts.plan import PlanError
from gpuhosts.hostside.bench_probe import markdown
from gpuhosts.provider import run_operation, unit_inputs
from gpuhosts.render import PROJECT_ROOT, TemplateError
from gpuhosts.ssh import Connection, SshError

FORCE_OFF, FORCE_ON = "\nforce=0\n", "\nforce=1\n"


def forced(ensure: str, unit: str) -> str:
    """The benchmark's ensure with its force switch on; the template has exactly one such line."""
    if ensure.count(FORCE_OFF) != 1:
        raise PlanError(f"{unit}: its ensure has no single force switch to turn on")
    return ensure.replace(FORCE_OFF, FORCE_ON)


def add_subparser(commands) -> argparse.ArgumentParser:
    parser = commands.add_parser("bench", help="run a declared benchmark again now, over SSH",
                                 description="Exit codes: 0 measured, 1 error or failed run.")
    parser.add_argument("stack", help="stack name, e.g. kpro5")
    parser.add_argument("name", help="the benchmark's name in gpuhosts:benchmarks")
    parser.add_argument("--stack-file", type=Path, help="stack config file (default: stacks/Pulumi.STACK.yaml)")
    parser.add_argument("--ssh-key", metavar="FILE",
                        help=f"private key file for the host (default: the file ${check.KEY_FILE_VARIABLE} names)")
    parser.add_argument("--verbose", action="store_true", help="show the dial on stderr")
    return parser


def run(args: argparse.Namespace, stack_name, environ: dict[str, str] | None = None) -> int:
    environ = dict(os.environ if environ is None else environ)
    where = f"gpuhosts bench {args.stack}"
    try:
        if not stack_name.match(args.stack):
            raise check.CheckError(f"{args.stack!r} is not a stack name (letters, digits, '-', '_', '.')")
        loaded = check.load(args.stack_file or PROJECT_ROOT / "stacks" / f"Pulumi.{args.stack}.yaml")
        units = [u for u in loaded.graph.apply_order if u.kind == "Benchmark"]
        chosen = [u for u in units if u.key.split("-bench-", 1)[1] == args.name]
        if not chosen:
            names = ", ".join(u.key.split("-bench-", 1)[1] for u in units) or "none"
            raise check.CheckError(f"{args.name!r} is not a benchmark of this stack (declared: {names}); "
                                   "add it to gpuhosts:benchmarks")
        unit = chosen[0]
        source, path = check.key_source(args.ssh_key, environ)
        key = check.read_key(source, path)
    except (check.CheckError, ConfigError) as error:
        print(f"{where}: {error}", file=sys.stderr)
        return exit_codes.INVALID
    except (PlanError, TemplateError) as error:
        print(f"{where}: {error}", file=sys.stderr)
        return exit_codes.ERROR
    target = loaded.target
    inputs = {"address": target.address, "port": target.port, "user": target.user, "hostKey": target.host_key}
    props = unit_inputs(unit, inputs)
    props["ensure"] = forced(unit.ensure, unit.key)
    connection = Connection(target, key)
    log = contextlib.nullcontext() if args.verbose else contextlib.redirect_stderr(io.StringIO())
    try:
        with log:
            completed = run_operation(connection, props, "ensure")
    except SshError as error:
        print(f"{where}: {error}", file=sys.stderr)
        return 1
    finally:
        connection.close()
    print(completed.stdout.rstrip("\n").split("\n" + protocol.RESULT_PREFIX, 1)[0])
    if completed.status != 0:
        print(f"{where}: {unit.key} failed with status {completed.status}:\n{protocol.tail(completed.stderr)}",
              file=sys.stderr)
        return 1
    try:
        table = protocol.parse_result(completed.stdout).report
    except protocol.ProtocolError as error:
        print(f"{where}: {unit.key}: {error}", file=sys.stderr)
        return 1
    print(markdown(f"Benchmark {args.name} on {loaded.host}", table))
    print(json.dumps(table, sort_keys=True))
    return 0
