"""What the check scripts share; they run inside an engine's own environment (its Python), so only the standard
library and that environment's packages are imported here."""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from typing import Any


def read_invocations() -> list[dict[str, Any]]:
    return json.load(sys.stdin)


def report(ok: bool, reason: str, flags: dict | None = None, environment: list | None = None, **extra: Any) -> None:
    """The one line a check prints: `VERIFY {"ok", "reason", "flags", "environment", …}`."""
    print("VERIFY " + json.dumps({"ok": ok, "reason": reason, "flags": flags or {}, "environment": environment or [],
                                  **extra}, sort_keys=True))


def flag_table(parser: argparse.ArgumentParser) -> dict[str, dict[str, Any]]:
    """Every option string of `parser` (sub-parsers' and groups' included): whether it takes a value, its choices."""
    table: dict[str, dict[str, Any]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        takes_value = action.nargs != 0
        choices = None
        if action.choices is not None:
            try:
                choices = sorted(str(c) for c in action.choices)
            except TypeError:
                choices = None
        for option in action.option_strings:
            table[option] = {"value": takes_value, "choices": choices}
    return dict(sorted(table.items()))


def short_reason(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip().splitlines()[0]
    return text[:300]


def failure(stage: str, error: BaseException) -> str:
    traceback.print_exc(file=sys.stderr)
    return f"{stage}: {short_reason(error)}"


class StrictParse(Exception):
    pass


def strict(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """argparse exits on an error; raise instead, with its message."""
    def error(message: str):
        raise StrictParse(message)
    parser.error = error  # type: ignore[method-assign]
    return parser
