"""`gpuhosts plan STACK [--stack-file FILE] [--out DIR]`: the offline plan of a stack."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpuhosts.config import ConfigError
from gpuhosts.plan import PlanError, write_plan
from gpuhosts.render import PROJECT_ROOT, TemplateError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpuhosts", description="Offline tools for the gpuhosts Pulumi program.")
    commands = parser.add_subparsers(dest="command", required=True)
    plan = commands.add_parser("plan", help="render every file and command a stack would apply, without a host")
    plan.add_argument("stack", help="stack name, e.g. kpro5")
    plan.add_argument("--stack-file", type=Path, help="stack config file (default: stacks/Pulumi.STACK.yaml)")
    plan.add_argument("--out", type=Path, help="output folder (default: build/plan/STACK)")
    args = parser.parse_args(argv)

    stack_file = args.stack_file or PROJECT_ROOT / "stacks" / f"Pulumi.{args.stack}.yaml"
    out = args.out or PROJECT_ROOT / "build" / "plan" / args.stack
    try:
        summary = write_plan(PROJECT_ROOT, args.stack, stack_file, out)
    except ConfigError as error:
        print(f"gpuhosts plan {args.stack}: {error}", file=sys.stderr)
        return 2
    except (PlanError, TemplateError) as error:
        print(f"gpuhosts plan {args.stack}: {error}", file=sys.stderr)
        return 1
    for warning in summary["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    hosts = ", ".join(summary["hosts"])
    print(f"plan of stack {args.stack} ({hosts}) written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
