"""`gpuhosts plan STACK [--stack-file FILE] [--out DIR]`: the offline plan of a stack; `diff`, `check` and `bench`
have modules of their own."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from gpuhosts import bench_cli, exit_codes
from gpuhosts import check as live_check
from gpuhosts import diff
from gpuhosts.config import ConfigError
from gpuhosts.plan import PlanError, read_stack_file, stand_in_secrets, write_plan
from gpuhosts.upgrades import upgrade_report
from gpuhosts.render import PROJECT_ROOT, TemplateError


# Pulumi's stack names: letters, digits, '-', '_' and '.', at most 100 (pulumi sdk/go/common/tokens ValidateStackName);
# none can climb out of a folder.
STACK_NAME = re.compile(r"^(?!\.+$)[A-Za-z0-9_.-]{1,100}$")


def main(argv: list[str] | None = None) -> int:
    """Every command's exit code means the same (gpuhosts/exit_codes.py); a reader that stops reading (`| head`)
    ends the command quietly."""
    try:
        return _main(argv)
    except BrokenPipeError:
        # Python's own advice (signal module docs, "Note on SIGPIPE"): point stdout at devnull so the interpreter's
        # final flush finds no closed pipe, and exit with the error status.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return exit_codes.ERROR


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpuhosts", description="Offline tools for the gpuhosts Pulumi program.")
    parser.add_argument("--version", action="version", version=f"gpuhosts {package_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    plan = commands.add_parser("plan", help="render every file and command a stack would apply, without a host")
    plan.add_argument("stack", help="stack name, e.g. kpro5")
    plan.add_argument("--stack-file", type=Path, help="stack config file (default: stacks/Pulumi.STACK.yaml)")
    plan.add_argument("--out", type=Path, help="output folder (default: build/plan/STACK)")
    plan.add_argument("--verbose", action="store_true", help="print each warning in full")
    upgrades = commands.add_parser("upgrades", help="the newer releases of what a stack pins that gpuhosts knows, "
                                   "whether the plan accepts each, and what a bump changes")
    upgrades.add_argument("stack", help="stack name, e.g. kpro5")
    upgrades.add_argument("--stack-file", type=Path, help="stack config file (default: stacks/Pulumi.STACK.yaml)")
    # `diff` reads its own arguments (gpuhosts/diff.py).
    commands.add_parser("diff", add_help=False, help="review a change: two plans, or stacks against --base GIT_REF "
                        "(exit 0 no change, 3 changes, 2 invalid input, 1 error)")
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["diff"]:
        return diff.main(argv[1:], STACK_NAME)
    # `gpuhosts check STACK`: the units' probes on the live host, drift reported (gpuhosts/check.py).
    live_check.add_subparser(commands)
    # `gpuhosts bench STACK NAME`: a declared benchmark measured again now (gpuhosts/bench_cli.py).
    bench_cli.add_subparser(commands)
    args = parser.parse_args(argv)
    if args.command == "check":
        return live_check.run(args, STACK_NAME)
    if args.command == "bench":
        return bench_cli.run(args, STACK_NAME)

    if not STACK_NAME.match(args.stack):
        print(f"gpuhosts plan: {args.stack!r} is not a stack name (letters, digits, '-', '_', '.'; as `pulumi stack "
              "init` accepts them)", file=sys.stderr)
        return exit_codes.INVALID
    stack_file = args.stack_file or PROJECT_ROOT / "stacks" / f"Pulumi.{args.stack}.yaml"
    if args.command == "upgrades":
        return _upgrades(args.stack, stack_file)
    out = args.out or PROJECT_ROOT / "build" / "plan" / args.stack
    try:
        summary = write_plan(PROJECT_ROOT, args.stack, stack_file, out)
    except ConfigError as error:
        print(f"gpuhosts plan {args.stack}: {error}", file=sys.stderr)
        return exit_codes.INVALID
    except (PlanError, TemplateError) as error:
        print(f"gpuhosts plan {args.stack}: {error}", file=sys.stderr)
        return exit_codes.ERROR
    shown = list(dict.fromkeys(summary["warnings"]))
    for warning in shown:
        print(f"warning: {warning if args.verbose else brief(warning)}", file=sys.stderr)
    if not args.verbose and any(brief(w) != w for w in shown):
        print(f"warning: each in full: {out / WARNINGS_FILE} (or gpuhosts plan --verbose)", file=sys.stderr)
    hosts = ", ".join(summary["hosts"])
    print(f"plan of stack {args.stack} ({hosts}) written to {out}")
    for line in service_lines(summary):
        print(line)
    # The resources `pulumi preview` would show, as it shows them.
    print()
    print((out / "tree.txt").read_text(), end="")
    return exit_codes.OK


def _upgrades(stack: str, stack_file: Path) -> int:
    try:
        others: list[str] = []
        values, secure = read_stack_file(stack_file, others)
        values, secure, _ = stand_in_secrets(values, secure)
        bumps, unchanged = upgrade_report(values, secure, others)
    except ConfigError as error:
        print(f"gpuhosts upgrades {stack}: {error}", file=sys.stderr)
        return exit_codes.INVALID
    except PlanError as error:
        print(f"gpuhosts upgrades {stack}: {error}", file=sys.stderr)
        return exit_codes.ERROR
    print(f"upgrades of stack {stack}: {len(bumps)} known newer release(s), "
          f"{sum(b.accepted for b in bumps)} accepted by the plan")
    for bump in bumps:
        print(bump.line())
    for line in unchanged:
        print(line)
    if bumps:
        print("a bump: edit the version in the stack file, review it with `gpuhosts diff " + stack + " --base main`, "
              "then `pulumi up` (a service with replicas rolls through them behind its gateway, each past its gate)")
    return exit_codes.OK


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpuhosts")
    except PackageNotFoundError:
        return "unknown (not installed: run make)"


WARNINGS_FILE = "warnings.txt"
BRIEF_CHARS = 160


def brief(warning: str) -> str:
    """A warning's first clause, one line of at most BRIEF_CHARS: the full text is in the plan folder."""
    first = warning.split("; ", 1)[0]
    return first if len(first) <= BRIEF_CHARS else first[:BRIEF_CHARS - 1] + "…"


def service_lines(summary: dict) -> list[str]:
    """One paragraph per service: where it runs, the engine build, and its derived command line."""
    lines = []
    for host, desired in summary["hosts"].items():
        training = desired.get("training")
        if training:
            gpus, ids = training["gpus"], training["layerIds"]
            lines.append(f"  {host}: hidden-state server on GPUs {gpus['server']}, training on GPUs {gpus['training']}")
            lines.append(f"    layer ids: drafter config {ids['drafterConfig']}, trainer {ids['trainer']}, "
                         f"server extracts {ids['serverExtracts']}")
            lines.append("    " + " ".join(training["server"]["argv"]))
        for vmid, container in (desired.get("containers") or {}).items():
            for name, service in (container.get("services") or {}).items():
                state = "enabled" if service["enabled"] else "installed stopped"
                lines.append(f"  {host} ct{vmid} {name} ({state}): {service['engine']} on {service['listen']}")
                lines.append("    " + " ".join(service["argv"]))
                if service.get("drafterTargetLayerIds"):
                    lines.append(f"    drafter target_layer_ids {service['drafterTargetLayerIds']}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
