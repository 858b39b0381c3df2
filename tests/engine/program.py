"""The resources the real `__main__.py` registers for a stack file, as the engine receives them (secrets included).

Run as a process of its own (the mock runtime is process-global):

    python -m engine.program STACK_FILE  < secrets.json  > resources.json

stdin holds the stack's secrets by key name ({"sshPrivateKey": …, "hfToken": …}), as `pulumi config set --secret`
would hold them; stdout is a JSON list of {urn, type, name, parent, dependencies, inputs, aliases}.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gpuhosts.plan import read_stack_file, run_program

PROJECT = Path(__file__).resolve().parents[2]


def record(stack_file: Path, stack: str, secrets: dict[str, str]) -> list[dict]:
    values, secure = read_stack_file(stack_file)
    values.update(secrets)
    run = run_program(PROJECT, stack, values, secure | set(secrets), reveal_secrets=True)
    return [{"urn": r.urn, "type": r.type, "name": r.name, "parent": r.parent, "dependencies": r.dependencies,
             "inputs": r.inputs, "aliases": r.aliases} for r in run.resources]


def main() -> int:
    stack_file, stack = Path(sys.argv[1]), sys.argv[2]
    secrets = json.loads(sys.stdin.read() or "{}")
    json.dump(record(stack_file, stack, secrets), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
